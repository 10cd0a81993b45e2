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
		{"URL without a scheme", with(func(c *Config) { c.URL = "10.0.0.3:7080" }), `Config.URL "10.0.0.3:7080": want http://HOST:PORT`},
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
// (not themselves); a Lease that lapsed is no peer, and one gone for
// StaleAfter is deleted; a replica that stops cleanly deletes its Lease
// and is no longer a peer.
func TestRegistry(t *testing.T) {
	c := kubetest.Start(t)
	start := func(id, url string) (*Registry, context.CancelFunc, func() error) {
		r, err := New(Config{REST: c.RESTConfig(), Namespace: "default", Identity: id, URL: url, Period: time.Second})
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
	// A replica that crashed a minute ago (lapsed, kept) and one that
	// crashed two hours ago (to be swept).
	lapsed := func(name string, ago time.Duration) {
		c.JSON(t, http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/default/leases", map[string]any{
			"metadata": map[string]any{"name": name, "labels": map[string]any{LabelComponent: ComponentValue},
				"annotations": map[string]any{AnnotationURL: "http://192.0.2.9:7080"}},
			"spec": map[string]any{"holderIdentity": name, "leaseDurationSeconds": 30,
				"renewTime": time.Now().Add(-ago).UTC().Format("2006-01-02T15:04:05.000000Z07:00")},
		}, http.StatusCreated)
	}
	lapsed("anvil-replica-crashed", time.Minute)
	lapsed("anvil-replica-long-gone", 2*time.Hour)

	a, _, _ := start("anvil-a", "http://10.0.0.1:7080")
	b, stopB, waitB := start("anvil-b", "http://10.0.0.2:7080")
	peersOf := func(r *Registry) []Peer {
		p, err := r.Peers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	testtool.WaitFor(t, "each replica to see the other", func() bool {
		return slices.Equal(peersOf(a), []Peer{{"anvil-b", "http://10.0.0.2:7080"}}) &&
			slices.Equal(peersOf(b), []Peer{{"anvil-a", "http://10.0.0.1:7080"}})
	})
	const leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases/"
	testtool.WaitFor(t, "the Lease gone for two hours to be deleted", func() bool {
		code, _ := c.Do(t, http.MethodGet, leases+"anvil-replica-long-gone", nil, "application/json")
		return code == http.StatusNotFound
	})
	if code, _ := c.Do(t, http.MethodGet, leases+"anvil-replica-crashed", nil, "application/json"); code != http.StatusOK {
		t.Errorf("the Lease lapsed a minute ago: GET %d; want it kept (a paused replica may come back)", code)
	}

	stopB()
	if err := waitB(); err != nil {
		t.Fatalf("Run = %v; want nil after a clean stop", err)
	}
	if code, _ := c.Do(t, http.MethodGet, leases+"anvil-replica-anvil-b", nil, "application/json"); code != http.StatusNotFound {
		t.Errorf("after b stopped cleanly, GET its Lease = %d; want 404", code)
	}
	if p := peersOf(a); len(p) != 0 {
		t.Errorf("a's peers after b stopped: %v; want none", p)
	}
}
