package kubetest

import (
	"syscall"
	"testing"
	"time"
)

// Faults of the API server, for tests of what its clients do without it.
// etcd keeps running throughout, so nothing written before a fault is lost.

// PauseAPIServer stops the kube-apiserver with SIGSTOP: its port still
// accepts connections (the kernel completes the handshake) but nothing
// answers, as with a network partition or a stalled control plane. A
// client without a deadline hangs. ResumeAPIServer or KillAPIServer
// ends the pause.
func (c *Cluster) PauseAPIServer(t testing.TB) {
	t.Helper()
	if err := c.apiProc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("kubetest: pause kube-apiserver: %v", err)
	}
	t.Logf("kubetest: kube-apiserver paused (SIGSTOP)")
}

// ResumeAPIServer continues a paused kube-apiserver (SIGCONT).
func (c *Cluster) ResumeAPIServer(t testing.TB) {
	t.Helper()
	if err := c.apiProc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("kubetest: resume kube-apiserver: %v", err)
	}
}

// KillAPIServer kills the kube-apiserver (SIGKILL, as a crash or an
// evicted pod) and waits until it has exited: its port then refuses
// connections. RestartAPIServer brings it back.
func (c *Cluster) KillAPIServer(t testing.TB) {
	t.Helper()
	p := c.apiProc
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(stopBound):
		t.Fatalf("kubetest: kube-apiserver did not exit after SIGKILL")
	}
	t.Logf("kubetest: kube-apiserver killed")
}

// RestartAPIServer starts a kube-apiserver again on the same port and
// etcd as before (so c.URL, the token and the CA stay valid) once the
// previous one has been killed, and waits until it is ready. It fails t
// if it cannot start, with the end of its log.
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	select {
	case <-c.apiProc.exited:
	default:
		t.Fatal("kubetest: RestartAPIServer: the kube-apiserver still runs; KillAPIServer first")
	}
	begin := time.Now()
	s := c.apiStart(c.apiPort)
	if err := waitReady(s.proc, s.ready); err != nil {
		t.Fatalf("kubetest: restarted kube-apiserver: %v; the end of %s:\n%s", err, s.proc.log, s.proc.tail())
	}
	t.Logf("kubetest: kube-apiserver ready again at %s in %v", c.URL, time.Since(begin).Round(time.Millisecond))
}
