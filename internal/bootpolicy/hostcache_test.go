package bootpolicy

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/model"
)

// TestLookupCacheFollowsTheStore: with Run going, Lookup answers from
// memory exactly what the store path answers, and follows creates, changes
// and deletes.
func TestLookupCacheFollowsTheStore(t *testing.T) {
	objs := []model.Object{
		hw("a", nic("52:54:00:00:00:01", "10.0.0.1", bp(true))),
		hw("b", nic("52:54:00:00:00:02", "10.0.0.2", bp(false)), nic("52-54-00-00-00-03", "10.0.0.3", bp(true))),
		// Two Hardware claim one MAC: the first by namespace/name wins.
		hw("c2", nic("52:54:00:00:00:04", "10.0.0.42", bp(true))),
		hw("c1", nic("52:54:00:00:00:04", "10.0.0.41", bp(true))),
	}
	cached, _ := newPolicy(t, baseConfig(), objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cached.Run(ctx) }()
	waitFor(t, "the first sync", func() bool { _, synced := cached.hosts.get(mustMAC("52:54:00:00:00:01")); return synced })

	uncached := &Policy{store: cached.store, mode: cached.mode, log: cached.log}
	for _, m := range []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03", "52:54:00:00:00:04", "52:54:00:00:00:99"} {
		got, gerr := cached.Lookup(ctx, mustMAC(m))
		want, werr := uncached.Lookup(ctx, mustMAC(m))
		if !reflect.DeepEqual(got, want) || errors.Is(gerr, dhcp.ErrUnknownHost) != errors.Is(werr, dhcp.ErrUnknownHost) {
			t.Errorf("Lookup(%s) from memory = %+v, %v; from the store = %+v, %v", m, got, gerr, want, werr)
		}
	}

	// A change is seen.
	st := openStoreOf(t, cached)
	obj, err := st.Get(ctx, model.KindHardware, "default", "a")
	if err != nil {
		t.Fatal(err)
	}
	a := obj.(*model.Hardware)
	a.Spec.Interfaces[0].Netboot.AllowPXE = bp(false)
	if _, err := st.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "allowPXE false", func() bool {
		h, err := cached.Lookup(ctx, mustMAC("52:54:00:00:00:01"))
		return err == nil && !h.AllowPXE
	})
	// A delete is seen, and the other claimant of a shared MAC takes over.
	if err := st.Delete(ctx, model.KindHardware, "default", "c1", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c2 to answer for the shared MAC", func() bool {
		h, err := cached.Lookup(ctx, mustMAC("52:54:00:00:00:04"))
		return err == nil && h.Name == "default/c2"
	})
	if err := st.Delete(ctx, model.KindHardware, "default", "c2", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the MAC to be unknown", func() bool {
		_, err := cached.Lookup(ctx, mustMAC("52:54:00:00:00:04"))
		return errors.Is(err, dhcp.ErrUnknownHost)
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v; want nil after cancel", err)
	}
}

func openStoreOf(t *testing.T, p *Policy) interface {
	Get(ctx context.Context, kind, ns, name string) (model.Object, error)
	Update(ctx context.Context, obj model.Object) (model.Object, error)
	Delete(ctx context.Context, kind, ns, name, rv string) error
} {
	t.Helper()
	s, ok := p.store.(interface {
		Get(ctx context.Context, kind, ns, name string) (model.Object, error)
		Update(ctx context.Context, obj model.Object) (model.Object, error)
		Delete(ctx context.Context, kind, ns, name, rv string) error
	})
	if !ok {
		t.Fatal("the test store cannot write")
	}
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMACSpellings: a MAC written in the Hardware with hyphens, upper case or
// Cisco's dots is found by DHCP (from the store and from memory) and by the
// script route (by MAC and by source address), and the boot environment's
// worker_id and hw_addr are the canonical form the agent reports as.
func TestMACSpellings(t *testing.T) {
	tests := []struct {
		name    string
		written string
	}{
		{name: "upper case colons", written: "52:54:00:AA:BB:01"},
		{name: "hyphens", written: "52-54-00-aa-bb-01"},
		{name: "upper case hyphens", written: "52-54-00-AA-BB-01"},
		{name: "dotted", written: "5254.00aa.bb01"},
		{name: "dotted upper case", written: "5254.00AA.BB01"},
	}
	const asked = "52:54:00:aa:bb:01"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := hw("m1", nic(tc.written, "10.0.0.11", bp(true)))
			p, _ := newPolicy(t, baseConfig(), h, wf("default", "w1", "m1", model.StatePending))

			got, err := p.Lookup(t.Context(), mustMAC(asked))
			if err != nil || got.Name != "default/m1" {
				t.Fatalf("Lookup(%s) from the store = %+v, %v; want default/m1", asked, got, err)
			}
			s, err := p.Script(t.Context(), httpboot.ScriptRequest{MAC: mustMAC(asked)})
			if err != nil {
				t.Fatalf("Script(%s) = %v", asked, err)
			}
			if !slices.Contains(kernelLine(s.Body), "worker_id="+asked) {
				t.Errorf("Script(%s) kernel line %v; want worker_id=%s", asked, kernelLine(s.Body), asked)
			}
			// Asked by source address only, the MAC is the interface's as
			// written, read once: the kernel line has it in canonical form.
			s, err = p.Script(t.Context(), httpboot.ScriptRequest{Source: netip.MustParseAddr("10.0.0.11")})
			if err != nil {
				t.Fatalf("Script(10.0.0.11) = %v", err)
			}
			if l := kernelLine(s.Body); !slices.Contains(l, "worker_id="+asked) || !slices.Contains(l, "hw_addr="+asked) {
				t.Errorf("Script(10.0.0.11) kernel line %v; want worker_id= and hw_addr=%s", l, asked)
			}

			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			waitFor(t, "the first sync", func() bool { _, synced := p.hosts.get(mustMAC(asked)); return synced })
			got, err = p.Lookup(ctx, mustMAC(asked))
			if err != nil || got.Name != "default/m1" {
				t.Errorf("Lookup(%s) from memory = %+v, %v; want default/m1", asked, got, err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
}
