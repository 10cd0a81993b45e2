package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Socket activation (systemd's sd_listen_fds protocol): the parent opens
// the listening sockets and passes them as file descriptors 3, 4, … with
// LISTEN_PID (the pid they are meant for), LISTEN_FDS (how many) and
// LISTEN_FDNAMES (their names, colon-separated). systemd does it for a
// .socket unit with FileDescriptorName=; a benchmark or test harness does
// it to hand `anvil serve` ports that stay bound from their choice to their
// use.
const (
	envListenPID     = "LISTEN_PID"
	envListenFDs     = "LISTEN_FDS"
	envListenFDNames = "LISTEN_FDNAMES"
	listenFDsStart   = 3 // SD_LISTEN_FDS_START
)

// InheritedListeners returns the TCP listeners passed to this process by
// socket activation, named "http", "https", "grpc" or "metadata" in
// LISTEN_FDNAMES, for Config.Listeners; with no activation (LISTEN_PID not
// this process's), none. It unsets the LISTEN_* variables so that no child
// takes the sockets for its own. A name it does not know, or a descriptor
// that is not a listening socket, is an error.
func InheritedListeners() (Listeners, error) {
	defer func() {
		for _, v := range []string{envListenPID, envListenFDs, envListenFDNames} {
			os.Unsetenv(v)
		}
	}()
	return inheritedListeners(os.Getenv, os.Getpid(), listenFDsStart)
}

// inheritedListeners is InheritedListeners reading env, for process pid,
// with the descriptors from first on.
func inheritedListeners(env func(string) string, pid, first int) (Listeners, error) {
	var l Listeners
	if env(envListenPID) != strconv.Itoa(pid) {
		return l, nil
	}
	n, err := strconv.Atoi(env(envListenFDs))
	if err != nil || n < 0 {
		return l, fmt.Errorf("socket activation: %s=%q is not a count", envListenFDs, env(envListenFDs))
	}
	names := strings.Split(env(envListenFDNames), ":")
	if len(names) != n {
		return l, fmt.Errorf("socket activation: %d descriptors but %s=%q names %d; name each http, https, grpc or metadata",
			n, envListenFDNames, env(envListenFDNames), len(names))
	}
	slots := map[string]*net.Listener{"http": &l.HTTP, "https": &l.HTTPS, "grpc": &l.GRPC, "metadata": &l.Metadata}
	for i, name := range names {
		slot := slots[name]
		if slot == nil {
			l.close()
			return Listeners{}, fmt.Errorf("socket activation: descriptor %d is named %q; want http, https, grpc or metadata", first+i, name)
		}
		if *slot != nil {
			l.close()
			return Listeners{}, fmt.Errorf("socket activation: two descriptors are named %q", name)
		}
		if v, err := unix.GetsockoptInt(first+i, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
			l.close()
			return Listeners{}, fmt.Errorf("socket activation: descriptor %d (%s) is not a listening socket", first+i, name)
		}
		f := os.NewFile(uintptr(first+i), name)
		ln, err := net.FileListener(f) // a dup: f is closed below
		f.Close()
		if err != nil {
			l.close()
			return Listeners{}, fmt.Errorf("socket activation: descriptor %d (%s): %w", first+i, name, err)
		}
		*slot = ln
	}
	return l, nil
}

// PassListeners prepares cmd, an `anvil serve` not started yet, to serve
// lns by socket activation: their sockets become its descriptors 3, 4, …
// with LISTEN_FDS and LISTEN_FDNAMES set, and LISTEN_PID set to the pid
// the program runs as (by /bin/sh, which execs it: the pid is not known
// before the process exists). It is the parent's side of
// InheritedListeners, for harnesses that start anvil on ports they hold.
// The caller still owns lns; cmd.ExtraFiles holds duplicates, which the
// caller closes once cmd has started.
func PassListeners(cmd *exec.Cmd, lns Listeners) error {
	var names []string
	for _, l := range []struct {
		name string
		ln   net.Listener
	}{{"http", lns.HTTP}, {"https", lns.HTTPS}, {"grpc", lns.GRPC}, {"metadata", lns.Metadata}} {
		if l.ln == nil {
			continue
		}
		fl, ok := l.ln.(interface{ File() (*os.File, error) })
		if !ok {
			return fmt.Errorf("socket activation: the %s listener (%T) has no file to pass", l.name, l.ln)
		}
		f, err := fl.File()
		if err != nil {
			return fmt.Errorf("socket activation: the %s listener: %w", l.name, err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		names = append(names, l.name)
	}
	if len(cmd.ExtraFiles) != len(names) {
		return errors.New("socket activation: cmd already passes files")
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, envListenFDs+"="+strconv.Itoa(len(names)), envListenFDNames+"="+strings.Join(names, ":"))
	// sh sets LISTEN_PID to its own pid, then becomes the program.
	cmd.Args = append([]string{"/bin/sh", "-c", envListenPID + `=$$ exec "$0" "$@"`, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	return nil
}
