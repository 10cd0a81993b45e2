package peers

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestConfigErrors: New refuses each bad Config, naming the field.
func TestConfigErrors(t *testing.T) {
	ok := Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "anvil", Identity: "anvil-0-x1"}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no REST", with(func(c *Config) { c.REST = nil }), "Config.REST is nil"},
		{"no namespace", with(func(c *Config) { c.Namespace = "" }), "Config.Namespace is empty"},
		{"no identity", with(func(c *Config) { c.Identity = "" }), "Config.Identity is empty"},
		{"fractional period", with(func(c *Config) { c.Period = 1500 * time.Millisecond }), "Period 1.5s is not a whole number of seconds"},
		{"URL without a scheme", with(func(c *Config) { c.URL = "10.0.0.3:7080" }), `URL "10.0.0.3:7080": want http://HOST:PORT`},
		{"agent URL without a host", with(func(c *Config) { c.AgentURL = "http://" }), `AgentURL "http://": want http://HOST:PORT`},
		{"identity too long", with(func(c *Config) { c.Identity = strings.Repeat("a", 300) }), "makes the Lease name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestLeaseName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"anvil-0-3f2a", "anvil-replica-anvil-0-3f2a"},
		{"Node_7.lab-ab12", "anvil-replica-node-7.lab-ab12"},
		{"_x_", "anvil-replica-x"},
	} {
		if got := LeaseName(tc.in); got != tc.want {
			t.Errorf("LeaseName(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestRegistry, against a real API server: two replicas find each other
// (not themselves), with the URL each publishes for its peers and the one
// for agents; a Lease that lapsed is no peer; a replica that stops
// cleanly releases its Lease and is no longer a peer; a replica in a pod
// has its Lease owned by the pod (deleted with it).
func TestRegistry(t *testing.T) {
	c := kubetest.Start(t)
	start := func(id, url, agentURL string, pod Pod) (*Registry, context.CancelFunc, func() error) {
		r, err := New(Config{REST: c.RESTConfig(), Namespace: "default", Identity: id, URL: url, AgentURL: agentURL, Pod: pod, Period: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		var runErr error
		go func() { runErr = r.Run(ctx); close(done) }()
		wait := func() error { <-done; return runErr }
		t.Cleanup(func() { cancel(); <-done })
		return r, cancel, wait
	}
	// A replica that crashed a minute ago: its Lease lapsed.
	c.JSON(t, http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/default/leases", map[string]any{
		"metadata": map[string]any{"name": "anvil-replica-crashed", "labels": map[string]any{LabelComponent: ComponentValue},
			"annotations": map[string]any{AnnotationURL: "http://192.0.2.9:7080", AnnotationAgentURL: "http://192.0.2.9:7080"}},
		"spec": map[string]any{"holderIdentity": "crashed", "leaseDurationSeconds": 30,
			"renewTime": time.Now().Add(-time.Minute).UTC().Format("2006-01-02T15:04:05.000000Z07:00")},
	}, http.StatusCreated)

	// a is reached by its peers on the pod network and by agents at the
	// public address; b publishes no agent URL.
	a, _, _ := start("anvil-a", "http://10.244.0.7:7080", "http://192.0.2.1:7080", Pod{})
	b, stopB, waitB := start("anvil-b", "http://10.0.0.2:7080", "", Pod{Name: "anvil-7f9c-x2k4p", UID: "0c4e1f8a-2b7d-4e55-9a31-6f0d2c9b1e77"})
	peersOf := func(r *Registry) []Peer {
		p, err := r.Peers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	testtool.WaitFor(t, "each replica to see the other", func() bool {
		return slices.Equal(peersOf(a), []Peer{{Name: "anvil-b", URL: "http://10.0.0.2:7080"}}) &&
			slices.Equal(peersOf(b), []Peer{{Name: "anvil-a", URL: "http://10.244.0.7:7080", AgentURL: "http://192.0.2.1:7080"}})
	})
	if u, err := b.AgentURLs(context.Background()); err != nil || !slices.Equal(u, []string{"http://192.0.2.1:7080"}) {
		t.Errorf("b.AgentURLs = %q, %v; want a's agent URL", u, err)
	}
	if u, err := a.AgentURLs(context.Background()); err != nil || len(u) != 0 {
		t.Errorf("a.AgentURLs = %q, %v; want none (b publishes none)", u, err)
	}
	const leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases/"
	lease := func(name string) map[string]any { return c.JSON(t, http.MethodGet, leases+name, nil, http.StatusOK) }
	refs, _ := lease("anvil-replica-anvil-b")["metadata"].(map[string]any)["ownerReferences"].([]any)
	if len(refs) != 1 || refs[0].(map[string]any)["kind"] != "Pod" || refs[0].(map[string]any)["uid"] != "0c4e1f8a-2b7d-4e55-9a31-6f0d2c9b1e77" {
		t.Errorf("b's Lease ownerReferences = %v; want its Pod", refs)
	}
	if refs := lease("anvil-replica-anvil-a")["metadata"].(map[string]any)["ownerReferences"]; refs != nil {
		t.Errorf("a's Lease ownerReferences = %v; want none (no pod)", refs)
	}

	stopB()
	if err := waitB(); err != nil {
		t.Fatalf("Run = %v; want nil after a clean stop", err)
	}
	if h := lease("anvil-replica-anvil-b")["spec"].(map[string]any)["holderIdentity"]; h != nil {
		t.Errorf("after b stopped cleanly its Lease's holder is %v; want none (released)", h)
	}
	if p := peersOf(a); len(p) != 0 {
		t.Errorf("a's peers after b stopped: %v; want none", p)
	}
}
