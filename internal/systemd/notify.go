// Package systemd speaks the parts of systemd's service protocol that
// `anvil serve` needs: sd_notify messages over $NOTIFY_SOCKET (READY=1,
// RELOADING=1, STOPPING=1, STATUS=, WATCHDOG=1), the watchdog's interval
// from $WATCHDOG_USEC and $WATCHDOG_PID with a ping loop driven by a
// liveness check, and log lines in the form journald parses when standard
// error is its stream ($JOURNAL_STREAM).
//
// It owns the wire formats and the environment only; what "ready" and
// "alive" mean is its caller's (internal/server), and when to reload is the
// command's. It imports the standard library and internal/clock only, so
// that every binary's logger (internal/cmdbase) can use it.
package systemd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The environment variables systemd sets for a service (sd_notify(3),
// sd_watchdog_enabled(3), systemd.exec(5)).
const (
	EnvNotifySocket  = "NOTIFY_SOCKET"
	EnvWatchdogUSec  = "WATCHDOG_USEC"
	EnvWatchdogPID   = "WATCHDOG_PID"
	EnvJournalStream = "JOURNAL_STREAM"
)

// Notifier sends sd_notify messages to the service manager. A nil
// *Notifier is valid and sends nothing: the program is not run by systemd
// (or by anything speaking its protocol).
type Notifier struct {
	addr *net.UnixAddr
}

// NewNotifier returns a Notifier sending to socket, a path or an abstract
// name written with a leading '@' (as systemd writes it in NOTIFY_SOCKET);
// nil when socket is empty.
func NewNotifier(socket string) (*Notifier, error) {
	switch {
	case socket == "":
		return nil, nil
	case strings.HasPrefix(socket, "/"), strings.HasPrefix(socket, "@"):
		// Go's net package reads a leading '@' as Linux's abstract
		// namespace, exactly the convention of NOTIFY_SOCKET.
		return &Notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}}, nil
	}
	return nil, fmt.Errorf("%s=%q: want an absolute path or an abstract socket name starting with @ (vsock is not supported)", EnvNotifySocket, socket)
}

// Env is what systemd told the process through its environment: where to
// send notifications, and the watchdog's ping interval (0: no watchdog).
type Env struct {
	Notifier      *Notifier
	WatchdogEvery time.Duration
}

// FromEnv reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID and then
// unsets them, so that the programs this one starts (container runtimes,
// mkfs, …) do not notify systemd as if they were the service: with
// NotifyAccess=main systemd would drop their messages and log each. A bad
// value is an error naming the variable.
func FromEnv() (Env, error) {
	var env Env
	var err error
	defer func() {
		for _, v := range []string{EnvNotifySocket, EnvWatchdogUSec, EnvWatchdogPID} {
			os.Unsetenv(v)
		}
	}()
	if env.Notifier, err = NewNotifier(os.Getenv(EnvNotifySocket)); err != nil {
		return Env{}, err
	}
	if env.WatchdogEvery, err = WatchdogEvery(os.Getenv(EnvWatchdogUSec), os.Getenv(EnvWatchdogPID), os.Getpid()); err != nil {
		return Env{}, err
	}
	return env, nil
}

// WatchdogEvery is how often to ping the watchdog given WATCHDOG_USEC and
// WATCHDOG_PID: half the timeout, as sd_watchdog_enabled(3) advises, so
// that one late ping is no kill; 0 when there is no watchdog or it watches
// another process (pid is ours).
func WatchdogEvery(usec, watchedPID string, pid int) (time.Duration, error) {
	if usec == "" {
		return 0, nil
	}
	if watchedPID != "" {
		p, err := strconv.Atoi(watchedPID)
		if err != nil || p <= 0 {
			return 0, fmt.Errorf("%s=%q: want a process ID", EnvWatchdogPID, watchedPID)
		}
		if p != pid {
			return 0, nil
		}
	}
	n, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number of microseconds", EnvWatchdogUSec, usec)
	}
	return time.Duration(n) * time.Microsecond / 2, nil
}

// Notify sends the state lines (sd_notify(3): "READY=1", "STATUS=…") in
// one datagram. On a nil Notifier it does nothing.
func (n *Notifier) Notify(lines ...string) error {
	if n == nil || len(lines) == 0 {
		return nil
	}
	for _, l := range lines {
		if strings.ContainsRune(l, '\n') {
			return fmt.Errorf("sd_notify: a newline in %q", l)
		}
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// Ready says the service is up, with status as what `systemctl status`
// shows.
func (n *Notifier) Ready(status string) error {
	return n.Notify("READY=1", statusLine(status))
}

// Reloading says a reload has begun; the service sends Ready when it is
// done. MONOTONIC_USEC is required with it by Type=notify-reload and
// harmless with Type=notify.
func (n *Notifier) Reloading(status string) error {
	usec, err := monotonicUSec()
	if err != nil {
		return err
	}
	return n.Notify("RELOADING=1", "MONOTONIC_USEC="+strconv.FormatInt(usec, 10), statusLine(status))
}

// Stopping says the service is shutting down.
func (n *Notifier) Stopping(status string) error {
	return n.Notify("STOPPING=1", statusLine(status))
}

// Status updates the status text alone.
func (n *Notifier) Status(status string) error { return n.Notify(statusLine(status)) }

// statusLine is a STATUS= line; the text is one line.
func statusLine(s string) string { return "STATUS=" + strings.ReplaceAll(s, "\n", " ") }

// monotonicUSec reads CLOCK_MONOTONIC, the clock systemd compares
// MONOTONIC_USEC with.
func monotonicUSec() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, errors.Join(errors.New("sd_notify: read CLOCK_MONOTONIC"), err)
	}
	return ts.Nano() / 1e3, nil
}
