// Package kubetest starts a real Kubernetes API server for tests: Debian's
// etcd and a kube-apiserver built from the Go module proxy by
// scripts/fetch-kube.sh (`make kube`), both in the test's temporary
// directory on loopback ports (or an address the test gives), stopped
// when the test ends. The processes and credentials are
// internal/kubeproc's; this package ties them to a test (testing.TB) and
// owns the helpers tests speak to the server with.
//
// It speaks plain HTTP and JSON (Cluster.Do, Cluster.JSON) for tests that
// check the wire, and hands tests that use client-go a rest.Config
// (Cluster.RESTConfig); deploy/crds/crdstest installs Anvil's CRDs.
// Without etcd or kube-apiserver a test skips, and fails under CI=true
// (testtool.Need).
//
// It is for tests only; no command imports it.
package kubetest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/kubeproc"
	"github.com/anvilproj/anvil/internal/testtool"
)

// Cluster is a running kube-apiserver and its etcd.
type Cluster struct {
	kubeproc.Cluster
}

// Binaries returns the kube-apiserver and etcd to run (see
// kubeproc.FindBinaries). It stops t with testtool.Need when one is
// missing.
func Binaries(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	apiserver, etcd, err := kubeproc.FindBinaries(testtool.ModuleRoot(t))
	if errors.Is(err, kubeproc.ErrNoBinary) {
		testtool.Need(t, "%s", strings.TrimPrefix(err.Error(), kubeproc.ErrNoBinary.Error()+": "))
	}
	if err != nil {
		t.Fatal(err)
	}
	return apiserver, etcd
}

// Start starts etcd and kube-apiserver, waits until the API server's
// /readyz answers ok, and stops both when t ends. It fails t if either
// cannot start, with the end of its log.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartOn(t, "")
}

// StartOn is Start with the API server listening on address (an IPv4
// address of this host; "" is 127.0.0.1): for a client in another network
// namespace, which cannot reach this one's loopback (kubeproc.Options).
func StartOn(t testing.TB, address string) *Cluster {
	t.Helper()
	apiserver, etcd := Binaries(t)
	kc, err := kubeproc.Start(kubeproc.Options{APIServer: apiserver, Etcd: etcd, Dir: t.TempDir(), Address: address, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{*kc}
	// Cleanups run last-registered first: this one before t.TempDir's
	// removal. c's processes, not kc's: a restart (faults.go) replaces
	// c's API server.
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, p := range []*kubeproc.Proc{c.APIServer, c.Etcd} {
				t.Logf("kubetest: the end of %s:\n%s", p.Log, p.Tail())
			}
		}
	})
	return c
}

// Do sends a request to the API server: in, unless nil, is sent as JSON
// ([]byte as it is, anything else marshalled); accept, unless empty, is
// the Accept header. It returns the status and body, and fails t only if
// the request could not be made: the status is the caller's to judge.
func (c *Cluster) Do(t testing.TB, method, path string, in any, accept string) (int, []byte) {
	t.Helper()
	return c.send(t, method, path, "application/json", in, accept)
}

// send is Do with the request's Content-Type given.
func (c *Cluster) send(t testing.TB, method, path, contentType string, in any, accept string) (int, []byte) {
	t.Helper()
	var body []byte
	if in != nil {
		b, ok := in.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(in); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
		body = b
	}
	code, b, err := c.Request(context.Background(), method, path, contentType, body, accept)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, b
}

// JSON sends a request as Do does, fails t unless the answer has status
// want, and returns the answer decoded.
func (c *Cluster) JSON(t testing.TB, method, path string, in any, want int) map[string]any {
	t.Helper()
	status, b := c.Do(t, method, path, in, "application/json")
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %v in %.200q", method, path, err, b)
	}
	return out
}

// WriteKubeconfig writes a kubeconfig file for the cluster's admin user
// into dir and returns its path: what `anvil serve --kubeconfig` and
// kubectl take.
func (c *Cluster) WriteKubeconfig(t testing.TB, dir string) string {
	t.Helper()
	p, err := c.Cluster.WriteKubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
