package kubeproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Faults of the API server, for tests of what its clients do without it.
// etcd keeps running throughout, so nothing written before a fault is lost.

// PauseAPIServer stops the kube-apiserver with SIGSTOP: its port still
// accepts connections (the kernel completes the handshake) but nothing
// answers, as with a network partition or a stalled control plane. It
// returns once every thread of the process is stopped: kill(2) returns
// before the threads take the signal, and a thread still running could
// answer a request sent just after (a fresh-clone CI run saw an Update
// succeed "with the API server paused").
func (c *Cluster) PauseAPIServer() error {
	pid := c.APIServer.cmd.Process.Pid
	if err := c.APIServer.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); !allStopped(pid); {
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver (pid %d) was sent SIGSTOP but its threads did not all stop within 10s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// allStopped reports whether every thread of pid is in the stopped state
// ("T" in /proc/PID/task/TID/stat).
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command's closing parenthesis.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// ResumeAPIServer continues a paused kube-apiserver (SIGCONT).
func (c *Cluster) ResumeAPIServer() error {
	return c.APIServer.cmd.Process.Signal(syscall.SIGCONT)
}

// KillAPIServer kills the kube-apiserver (SIGKILL, as a crash or an
// evicted pod) and waits until it has exited: its port then refuses
// connections.
func (c *Cluster) KillAPIServer() error {
	p := c.APIServer
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopBound):
		return errors.New("kubeproc: kube-apiserver did not exit after SIGKILL")
	}
}

// RestartAPIServer starts a kube-apiserver again on the same port and
// etcd as before (so the URL, the token and the CA stay valid) once the
// previous one has exited, and waits until it is ready.
func (c *Cluster) RestartAPIServer() error {
	select {
	case <-c.APIServer.exited:
	default:
		return errors.New("kubeproc: RestartAPIServer: the kube-apiserver still runs; kill it first")
	}
	s, err := c.apiStart(c.apiPort)
	if err != nil {
		return err
	}
	c.APIServer = s.proc
	if err := waitReady(s.proc, s.ready); err != nil {
		return fmt.Errorf("kubeproc: restarted kube-apiserver: %w; the end of %s:\n%s", err, s.proc.Log, s.proc.Tail())
	}
	return nil
}
