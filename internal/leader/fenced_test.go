package leader

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/store/storetest"
)

// TestFencedStore: writes under a term go through while its Fence holds
// and are refused, leaving the store untouched, once it has closed;
// writes under any other context (agents' and operators' requests) are
// not fenced at all.
func TestFencedStore(t *testing.T) {
	bs, err := bolt.Open(filepath.Join(t.TempDir(), "anvil.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close() })
	st := Fenced(bs)

	e, err := New(Config{REST: nowhere, Namespace: "anvil", Identity: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	e.clock = fake
	campaign, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &Fence{e: e, run: context.Background(), end: cancel, leadDone: make(chan struct{})}
	f.renewedAt(fake.Now())
	if !f.open(campaign) {
		t.Fatal("open: the term ended before it began")
	}
	term := context.WithValue(campaign, fenceKey{}, f)

	if _, err := st.Create(term, storetest.Hardware("default", "m1")); err != nil {
		t.Fatalf("Create under an open term: %v", err)
	}
	fake.Advance(e.cfg.RenewDeadline) // not renewed in time: the term is over
	writes := map[string]func(ctx context.Context) error{
		"Create": func(ctx context.Context) error {
			_, err := st.Create(ctx, storetest.Hardware("default", "m2"))
			return err
		},
		"Update": func(ctx context.Context) error {
			h := storetest.Hardware("default", "m1")
			h.Labels = map[string]string{"by": "deposed"}
			_, err := st.Update(ctx, h)
			return err
		},
		"Apply": func(ctx context.Context) error {
			_, err := st.Apply(ctx, []model.Object{storetest.Hardware("default", "m3")})
			return err
		},
		"Delete": func(ctx context.Context) error { return st.Delete(ctx, model.KindHardware, "default", "m1", "") },
	}
	for name, w := range writes {
		if err := w(term); !errors.Is(err, ErrNotLeader) {
			t.Errorf("%s under a closed term = %v; want ErrNotLeader", name, err)
		}
	}
	objs, _, err := st.List(context.Background(), model.KindHardware, store.ListOptions{})
	if err != nil || len(objs) != 1 || objs[0].GetObjectMeta().Labels != nil {
		t.Fatalf("after refused writes the store holds %v (%v); want m1 as created", objs, err)
	}
	// An agent's or operator's request is not the leader's work.
	for _, name := range []string{"Create", "Update", "Apply", "Delete"} {
		if err := writes[name](context.Background()); err != nil {
			t.Errorf("%s outside any term: %v", name, err)
		}
	}
}

// liveStore is a store whose cache can lag (store.LiveReader).
type liveStore struct{ store.Store }

func (liveStore) StoredVersion(context.Context, string, string, string) (string, error) {
	return "", store.ErrNotFound
}

// TestFencedKeepsLiveReads: the engine, given the fenced store, still finds
// the live reads of the store underneath (reads are not fenced); a store
// without them has none through the fence either.
func TestFencedKeepsLiveReads(t *testing.T) {
	bs, err := bolt.Open(filepath.Join(t.TempDir(), "anvil.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close() })
	if lr := store.AsLiveReader(Fenced(liveStore{bs})); lr == nil {
		t.Error("AsLiveReader(Fenced(a LiveReader)) = nil")
	}
	if lr := store.AsLiveReader(Fenced(bs)); lr != nil {
		t.Errorf("AsLiveReader(Fenced(bolt)) = %T, want nil", lr)
	}
}
