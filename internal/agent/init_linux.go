package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The boot environment's PID 1 is split in two processes. PID 1 (Init) only
// mounts the kernel's filesystems, reaps every orphan and restarts the agent
// process if it ever dies; the agent (Boot, in a child process) does the
// real work. A Go program that reaps with wait4(-1) would steal the exit
// status of the commands the actions run (exec.Cmd.Wait would fail with
// ECHILD), and a panicking PID 1 panics the kernel: keeping PID 1 to a loop
// of wait4 avoids both.

// mountPoint is one filesystem Init mounts.
type mountPoint struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

// initMounts are the filesystems the boot environment needs, in order.
var initMounts = []mountPoint{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=620,ptmxmode=666"},
	{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
}

// AgentCommand is the argument list Init starts the agent process with,
// after the binary's own path.
var AgentCommand = []string{"agent", "--boot"}

// restartDelay is how long Init waits before starting a dead agent again.
const restartDelay = 3 * time.Second

// Init is PID 1 of the boot environment: it mounts /proc, /sys, /dev and
// friends, starts the agent process (this binary with AgentCommand) on the
// console, reaps every process that ends, and starts the agent again when
// it exits. It never returns.
func Init() {
	fmt.Println("\nanvil init: the Anvil boot environment is starting")
	for _, m := range initMounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			fmt.Printf("anvil init: mkdir %s: %v\n", m.target, err)
		}
		if err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			fmt.Printf("anvil init: mount %s on %s: %v\n", m.fstype, m.target, err)
		}
	}
	_ = os.Setenv("PATH", "/bin:/sbin:/usr/bin:/usr/sbin")
	_ = os.Setenv("HOME", "/root")
	// PID 1 ignores the signals a console's Ctrl-C and Ctrl-\ would send
	// it; the agent process gets them instead.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGHUP)

	self, err := os.Executable()
	if err != nil {
		self = "/init"
	}
	for {
		cmd := exec.Command(self, AgentCommand...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		if err := cmd.Start(); err != nil {
			// Without a controlling terminal (no console device), start
			// it without one.
			cmd = exec.Command(self, AgentCommand...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err = cmd.Start(); err != nil {
				fmt.Printf("anvil init: start the agent: %v\n", err)
				time.Sleep(restartDelay)
				continue
			}
		}
		status := reapUntil(cmd.Process.Pid)
		fmt.Printf("anvil init: the agent exited (%s); starting it again in %s\n", status, restartDelay)
		time.Sleep(restartDelay)
	}
}

// reapUntil reaps every child that ends until pid does, and describes how
// pid ended.
func reapUntil(pid int) string {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// ECHILD: nothing left to wait for, so pid is gone too.
			return "lost: " + err.Error()
		}
		if got != pid {
			continue // an orphan re-parented to us
		}
		switch {
		case ws.Exited():
			return fmt.Sprintf("exit code %d", ws.ExitStatus())
		case ws.Signaled():
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("status %#x", uint32(ws))
	}
}
