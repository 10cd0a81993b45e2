package ui

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// relistDelay is how long the view waits before listing again after its
// watch ended with an error (ErrGone: it fell behind), so a store that
// keeps failing is not asked in a tight loop.
const relistDelay = time.Second

// view is the UI's read model: every Hardware and Workflow, held as the
// objects the store's watch hands out (shared, never modified here), so a
// page over 10,000 machines reads pointers under a read lock instead of
// copying the fleet per request. One List at start (and after a watch
// falls behind), then one shared Watch per kind for the life of the
// server. It also tells subscribers (the SSE streams) which workflow
// changed. It is safe for concurrent use.
type view struct {
	st  store.Store
	log *slog.Logger

	mu       sync.RWMutex
	hardware map[string]*model.Hardware // by namespace/name
	wfs      map[string]*model.Workflow // by namespace/name
	byHW     map[string][]string        // hardware namespace/name → its workflows' keys
	hwKeys   []string                   // keys of hardware, sorted: the list's order and pages
	subs     map[chan struct{}]string   // subscriber → the workflow key it follows
}

func newView(st store.Store, log *slog.Logger) *view {
	return &view{st: st, log: log, hardware: map[string]*model.Hardware{}, wfs: map[string]*model.Workflow{},
		byHW: map[string][]string{}, subs: map[chan struct{}]string{}}
}

// run follows kind until ctx ends: list, then watch from the list's
// version; a watch that ends with an error is started again from a
// fresh list.
func (v *view) run(ctx context.Context, kind string) {
	for ctx.Err() == nil {
		err := v.follow(ctx, kind)
		if ctx.Err() != nil {
			return
		}
		v.log.Warn("ui: watch ended; listing again", "kind", kind, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(relistDelay):
		}
	}
}

func (v *view) follow(ctx context.Context, kind string) error {
	objs, rv, err := v.st.List(ctx, kind, store.ListOptions{})
	if err != nil {
		return err
	}
	v.reset(kind, objs)
	ch, err := v.st.Watch(ctx, kind, store.WatchOptions{ResourceVersion: rv, Shared: true})
	if err != nil {
		return err
	}
	for ev := range ch {
		switch ev.Type {
		case store.Error:
			return ev.Err
		case store.Deleted:
			v.apply(ev.Object, true)
		default:
			v.apply(ev.Object, false)
		}
	}
	if ctx.Err() == nil {
		return errors.New("watch closed by the store")
	}
	return nil
}

// reset replaces every object of kind with objs (a fresh list).
func (v *view) reset(kind string, objs []model.Object) {
	v.mu.Lock()
	switch kind {
	case model.KindHardware:
		v.hardware = map[string]*model.Hardware{}
		v.hwKeys = v.hwKeys[:0]
	case model.KindWorkflow:
		v.wfs = map[string]*model.Workflow{}
		v.byHW = map[string][]string{}
	}
	v.mu.Unlock()
	for _, o := range objs {
		v.apply(o, false)
	}
}

// apply records one change and wakes the subscribers of a changed
// workflow.
func (v *view) apply(obj model.Object, deleted bool) {
	m := obj.GetObjectMeta()
	key := m.Namespace + "/" + m.Name
	v.mu.Lock()
	defer v.mu.Unlock()
	switch o := obj.(type) {
	case *model.Hardware:
		i, had := slices.BinarySearch(v.hwKeys, key)
		switch {
		case deleted && had:
			delete(v.hardware, key)
			v.hwKeys = slices.Delete(v.hwKeys, i, i+1)
		case !deleted:
			v.hardware[key] = o
			if !had {
				v.hwKeys = slices.Insert(v.hwKeys, i, key)
			}
		}
	case *model.Workflow:
		hw := m.Namespace + "/" + o.Spec.HardwareRef
		if old := v.wfs[key]; old != nil {
			oldHW := m.Namespace + "/" + old.Spec.HardwareRef
			v.byHW[oldHW] = slices.DeleteFunc(v.byHW[oldHW], func(k string) bool { return k == key })
			if len(v.byHW[oldHW]) == 0 {
				delete(v.byHW, oldHW)
			}
		}
		if deleted {
			delete(v.wfs, key)
		} else {
			v.wfs[key] = o
			v.byHW[hw] = append(v.byHW[hw], key)
		}
		for ch, k := range v.subs {
			if k == key {
				select {
				case ch <- struct{}{}:
				default: // a wake-up is already pending: the reader sees this change too
				}
			}
		}
	}
}

// subscribe returns a channel that receives a value after each change of
// the workflow key (coalesced: one pending value at most), and the
// function that ends the subscription.
func (v *view) subscribe(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	v.mu.Lock()
	v.subs[ch] = key
	v.mu.Unlock()
	return ch, func() {
		v.mu.Lock()
		delete(v.subs, ch)
		v.mu.Unlock()
	}
}

// workflow returns the workflow key as the view holds it (shared: read
// only), or nil.
func (v *view) workflow(key string) *model.Workflow {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.wfs[key]
}

// hardwareByKey returns the Hardware key (shared: read only), or nil.
func (v *view) hardwareByKey(key string) *model.Hardware {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.hardware[key]
}

// latest returns the newest workflow on the Hardware key (by creation,
// then name), or nil. Call it holding mu.
func (v *view) latestLocked(hwKey string) *model.Workflow {
	var best *model.Workflow
	for _, k := range v.byHW[hwKey] {
		w := v.wfs[k]
		if best == nil || newer(w, best) {
			best = w
		}
	}
	return best
}

// workflowsOf returns the workflows of the Hardware key, newest first.
func (v *view) workflowsOf(hwKey string) []*model.Workflow {
	v.mu.RLock()
	out := make([]*model.Workflow, 0, len(v.byHW[hwKey]))
	for _, k := range v.byHW[hwKey] {
		out = append(out, v.wfs[k])
	}
	v.mu.RUnlock()
	slices.SortFunc(out, func(a, b *model.Workflow) int {
		if newer(a, b) {
			return -1
		}
		return 1
	})
	return out
}

func newer(a, b *model.Workflow) bool {
	ta, tb := a.CreationTimestamp, b.CreationTimestamp
	if ta != nil && tb != nil && !ta.Equal(*tb) {
		return ta.After(*tb)
	}
	return a.Name > b.Name
}
