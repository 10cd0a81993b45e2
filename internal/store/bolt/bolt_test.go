package bolt

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/storetest"
)

func openTest(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "anvil.db")
	}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStoreContract(t *testing.T) {
	// A small history so that the suite's too-old watch test is quick.
	const history = 64
	storetest.Run(t, storetest.Options{WatchHistory: history, SecretGenerations: true}, func(t *testing.T) store.Store {
		return openTest(t, "", Options{WatchHistory: history})
	})
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anvil.db")
	ctx := t.Context()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := storetest.Hardware("ns", "m1", "00:00:00:00:00:01")
	h.Labels = map[string]string{"a": "b"}
	c1, err := s.Create(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := s.Create(ctx, storetest.Workflow("ns", "w1", "m1", "agent-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, storetest.Hardware("ns", "gone")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, model.KindHardware, "ns", "gone", ""); err != nil {
		t.Fatal(err)
	}
	_, lastRV, err := s.List(ctx, model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, path, Options{})
	for _, want := range []model.Object{c1, c2} {
		m := want.GetObjectMeta()
		got, err := s.Get(ctx, model.KindOf(want), m.Namespace, m.Name)
		if err != nil {
			t.Fatalf("after reopen: %v", err)
		}
		gm := got.GetObjectMeta()
		if gm.UID != m.UID || gm.ResourceVersion != m.ResourceVersion || gm.Generation != m.Generation ||
			!gm.CreationTimestamp.Equal(*m.CreationTimestamp) || fmt.Sprint(gm.Labels) != fmt.Sprint(m.Labels) {
			t.Errorf("after reopen %s = %+v, want %+v", m.Key(), gm, m)
		}
	}
	if _, err := s.Get(ctx, model.KindHardware, "ns", "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted object after reopen: %v", err)
	}
	_, rv, err := s.List(ctx, model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv != lastRV {
		t.Errorf("list version after reopen %s, before close %s", rv, lastRV)
	}
	// Indexes are rebuilt.
	objs, err := s.ByIndex(ctx, model.KindWorkflow, store.IndexAgentID, "agent-1")
	if err != nil || len(objs) != 1 {
		t.Errorf("ByIndex after reopen = %d objects, %v", len(objs), err)
	}
	// Revisions continue; the deletion's revision is not reused.
	n, err := s.Create(ctx, storetest.Hardware("ns", "m2"))
	if err != nil {
		t.Fatal(err)
	}
	last, _ := strconv.ParseUint(lastRV, 10, 64)
	if got, _ := strconv.ParseUint(n.GetObjectMeta().ResourceVersion, 10, 64); got != last+1 {
		t.Errorf("first write after reopen at %d, want %d", got, last+1)
	}
	// History is not persisted: watching from before the reopen is gone,
	// from the reopen's version is fine.
	if _, err := s.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: "1"}); !errors.Is(err, store.ErrGone) {
		t.Errorf("watch from before reopen: %v, want ErrGone", err)
	}
	if _, err := s.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: lastRV}); err != nil {
		t.Errorf("watch from reopen version: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s := openTest(t, "", Options{})
	ctx := t.Context()
	h, err := s.Create(ctx, storetest.Hardware("default", "m1"))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: h.GetObjectMeta().ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range ch { // the watch is closed
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	_, err = s.Create(ctx, storetest.Hardware("default", "m2"))
	check("Create", err)
	_, err = s.Update(ctx, h)
	check("Update", err)
	check("Delete", s.Delete(ctx, model.KindHardware, "default", "m1", ""))
	_, err = s.Apply(ctx, []model.Object{storetest.Hardware("default", "m3")})
	check("Apply", err)
	_, err = s.Get(ctx, model.KindHardware, "default", "m1")
	check("Get", err)
	_, _, err = s.List(ctx, model.KindHardware, store.ListOptions{})
	check("List", err)
	_, err = s.ByIndex(ctx, model.KindHardware, store.IndexMAC, "x")
	check("ByIndex", err)
	_, err = s.Watch(ctx, model.KindHardware, store.WatchOptions{})
	check("Watch", err)
}

// TestCloseWithWriters closes the store under concurrent writers: every
// write either succeeds (and is then on disk) or fails with ErrClosed.
func TestCloseWithWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anvil.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		acked   []string
		started = make(chan struct{}, 64)
	)
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				name := fmt.Sprintf("g%d-%d", g, i)
				_, err := s.Create(context.Background(), storetest.Hardware("default", name))
				if errors.Is(err, store.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Create: %v", err)
					return
				}
				mu.Lock()
				acked = append(acked, name)
				mu.Unlock()
				select {
				case started <- struct{}{}:
				default:
				}
			}
		})
	}
	for range 32 {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s = openTest(t, path, Options{})
	for _, name := range acked {
		if _, err := s.Get(t.Context(), model.KindHardware, "default", name); err != nil {
			t.Errorf("acknowledged %s: %v", name, err)
		}
	}
	t.Logf("%d writes acknowledged before Close", len(acked))
}

// TestWatchHistoryBoundary checks the exact edge of the remembered history.
func TestWatchHistoryBoundary(t *testing.T) {
	s := openTest(t, "", Options{WatchHistory: 5})
	ctx := t.Context()
	var rvs []string
	for i := range 8 {
		o, err := s.Create(ctx, storetest.Hardware("default", fmt.Sprintf("h%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, o.GetObjectMeta().ResourceVersion)
	}
	// The last 5 events (rvs[3..7]) are remembered: watching from rvs[2]
	// needs exactly those; from rvs[1] it needs rvs[2] too, which is gone.
	if _, err := s.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: rvs[1]}); !errors.Is(err, store.ErrGone) {
		t.Errorf("watch from %s: %v, want ErrGone", rvs[1], err)
	}
	ch, err := s.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: rvs[2]})
	if err != nil {
		t.Fatalf("watch from %s: %v", rvs[2], err)
	}
	for i := 3; i < 8; i++ {
		ev := <-ch
		if ev.Type != store.Added || ev.Object.GetObjectMeta().ResourceVersion != rvs[i] {
			t.Errorf("replay %d: %s %v", i, ev.Type, ev.Object.GetObjectMeta())
		}
	}
	if _, err := s.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: "x"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("watch from a non-numeric version: %v", err)
	}
}

// TestSlowWatcher: a watcher that does not read gets ErrGone once its
// buffer is full, after the events that fitted, and its channel closes;
// writers are never held up by it.
func TestSlowWatcher(t *testing.T) {
	s := openTest(t, "", Options{WatchBuffer: 4})
	ctx := t.Context()
	slow, err := s.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := s.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := s.Create(ctx, storetest.Hardware("default", fmt.Sprintf("h%d", i))); err != nil {
			t.Fatal(err)
		}
		// The fast watcher keeps up: it reads each event before the next
		// write, so it never holds more than one.
		if ev := <-fast; ev.Type != store.Added {
			t.Fatalf("fast watcher got %s %v", ev.Type, ev.Err)
		}
	}
	n := 0
	var last store.Event
	for ev := range slow {
		last = ev
		if ev.Type == store.Error {
			break
		}
		n++
	}
	if last.Type != store.Error || !errors.Is(last.Err, store.ErrGone) {
		t.Fatalf("slow watcher ended with %s %v after %d events, want ERROR wrapping ErrGone", last.Type, last.Err, n)
	}
	if _, ok := <-slow; ok {
		t.Error("slow watcher's channel not closed after the error")
	}
	if n == 0 || n >= 50 {
		t.Errorf("slow watcher got %d events before the error", n)
	}
}

// TestBatchErrorsAreIndependent checks that in one group commit a failing
// op does not affect the others: many concurrent creates of the same name
// yield exactly one success.
func TestBatchErrorsAreIndependent(t *testing.T) {
	s := openTest(t, "", Options{})
	var ok, exists atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			name := "same"
			if i%2 == 1 {
				name = fmt.Sprintf("other-%d", i)
			}
			_, err := s.Create(t.Context(), storetest.Hardware("default", name))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, store.ErrAlreadyExists):
				exists.Add(1)
			default:
				t.Errorf("Create: %v", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 33 || exists.Load() != 31 {
		t.Errorf("%d created, %d already existed; want 33 and 31", ok.Load(), exists.Load())
	}
}

func TestCancelledContext(t *testing.T) {
	s := openTest(t, "", Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Create(ctx, storetest.Hardware("default", "m1")); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with cancelled ctx: %v", err)
	}
	if _, err := s.Get(t.Context(), model.KindHardware, "default", "m1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("object written despite cancelled ctx: %v", err)
	}
}

// TestLockedByAnotherOpen: a store file another Store holds (as a running
// server does) is refused after LockTimeout with an error that says why,
// not bbolt's bare "timeout".
func TestLockedByAnotherOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anvil.db")
	openTest(t, path, Options{})
	s, err := Open(path, Options{LockTimeout: 50 * time.Millisecond})
	if err == nil {
		_ = s.Close()
		t.Fatal("a second Open of a held store succeeded")
	}
	if !strings.Contains(err.Error(), "another process holds its lock") || !strings.Contains(err.Error(), path) {
		t.Errorf("Open = %v; want the path and that another process holds its lock", err)
	}
}
