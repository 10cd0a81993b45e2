package kubeproc

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// Faults of the API server, for tests of what its clients do without it.
// etcd keeps running throughout, so nothing written before a fault is lost.

// PauseAPIServer stops the kube-apiserver with SIGSTOP: its port still
// accepts connections (the kernel completes the handshake) but nothing
// answers, as with a network partition or a stalled control plane.
func (c *Cluster) PauseAPIServer() error {
	return c.APIServer.cmd.Process.Signal(syscall.SIGSTOP)
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
