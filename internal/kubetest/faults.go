package kubetest

import (
	"testing"
	"time"
)

// Faults of the API server for tests (kubeproc does them): etcd keeps
// running throughout, so nothing written before a fault is lost.

// PauseAPIServer stops the kube-apiserver with SIGSTOP: its port accepts
// connections but nothing answers. ResumeAPIServer or KillAPIServer ends
// the pause.
func (c *Cluster) PauseAPIServer(t testing.TB) {
	t.Helper()
	if err := c.Cluster.PauseAPIServer(); err != nil {
		t.Fatalf("kubetest: pause kube-apiserver: %v", err)
	}
	t.Logf("kubetest: kube-apiserver paused (SIGSTOP)")
}

// ResumeAPIServer continues a paused kube-apiserver (SIGCONT).
func (c *Cluster) ResumeAPIServer(t testing.TB) {
	t.Helper()
	if err := c.Cluster.ResumeAPIServer(); err != nil {
		t.Fatalf("kubetest: resume kube-apiserver: %v", err)
	}
}

// KillAPIServer kills the kube-apiserver (SIGKILL) and waits until it has
// exited: its port then refuses connections.
func (c *Cluster) KillAPIServer(t testing.TB) {
	t.Helper()
	if err := c.Cluster.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubetest: kube-apiserver killed")
}

// RestartAPIServer starts a kube-apiserver again on the same port and etcd
// once the previous one has been killed, and waits until it is ready.
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	begin := time.Now()
	if err := c.Cluster.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubetest: kube-apiserver ready again at %s in %v", c.URL, time.Since(begin).Round(time.Millisecond))
}
