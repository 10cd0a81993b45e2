package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// entry is one cached object. obj is never modified once cached: readers
// get deep copies.
type entry struct {
	obj model.Object
	rv  uint64
	idx [][]string // index values, in store.Indexes(kind) order
}

// change is one remembered event.
type change struct {
	typ store.EventType
	obj model.Object
	rv  uint64
}

// kindCache is one kind's objects as last seen by its watch, its index,
// its recent changes and its watchers.
type kindCache struct {
	kind string
	res  resource

	mu      sync.Mutex
	objs    map[string]*entry // by namespace/name
	ix      *store.Index
	rv      uint64        // the newest revision this cache reflects
	synced  bool          // the first list is in
	lastErr error         // the last list or watch failure, for waitSynced
	moved   chan struct{} // closed and replaced whenever rv or synced changes
	closed  bool

	history []change // the latest changes, oldest first, at most max
	max     int
	// dropped is the revision of the newest change no longer in history
	// (or of a re-list, which loses the changes before it): a watch must
	// resume from at least this.
	dropped  uint64
	watchers map[*watcher]struct{}
}

func newKindCache(kind string, res resource, history int) *kindCache {
	return &kindCache{kind: kind, res: res, objs: map[string]*entry{}, ix: store.NewIndex(kind),
		moved: make(chan struct{}), max: history, watchers: map[*watcher]struct{}{}}
}

// advanceLocked wakes everyone waiting for the cache to move.
func (kc *kindCache) advanceLocked() {
	close(kc.moved)
	kc.moved = make(chan struct{})
}

// waitSynced waits for the first list.
func (kc *kindCache) waitSynced(ctx context.Context) error {
	for {
		kc.mu.Lock()
		synced, moved, lastErr := kc.synced, kc.moved, kc.lastErr
		kc.mu.Unlock()
		if synced {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)
			}
			return ctx.Err()
		}
	}
}

// waitFor waits until cond holds on the cache (checked under its lock) or
// timeout passes; it reports whether cond held.
func (kc *kindCache) waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		kc.mu.Lock()
		ok, moved, closed := cond(), kc.moved, kc.closed
		kc.mu.Unlock()
		if ok || closed {
			return ok
		}
		select {
		case <-moved:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (kc *kindCache) putLocked(key string, e *entry) {
	if old := kc.objs[key]; old != nil {
		kc.ix.Remove(key, old.idx)
	}
	kc.objs[key] = e
	kc.ix.Add(key, e.idx)
}

func (kc *kindCache) removeLocked(key string) {
	if old := kc.objs[key]; old != nil {
		kc.ix.Remove(key, old.idx)
		delete(kc.objs, key)
	}
}

func (kc *kindCache) newEntry(obj model.Object, rv uint64) *entry {
	return &entry{obj: obj, rv: rv, idx: kc.ix.Values(obj)}
}

// record applies one watch event to the cache, remembers it and passes it
// to the watchers.
func (kc *kindCache) record(typ store.EventType, obj model.Object, rv uint64) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	key := obj.GetObjectMeta().Key()
	if typ == store.Deleted {
		kc.removeLocked(key)
	} else {
		kc.putLocked(key, kc.newEntry(obj, rv))
	}
	c := change{typ: typ, obj: obj, rv: rv}
	if len(kc.history) >= kc.max {
		kc.dropped = kc.history[0].rv
		kc.history = slices.Delete(kc.history, 0, 1)
	}
	kc.history = append(kc.history, c)
	for w := range kc.watchers {
		w.offerLocked(c)
	}
	if rv > kc.rv {
		kc.rv = rv
	}
	kc.advanceLocked()
}

// replace sets the cache to a fresh list. Changes between the last event
// and the list are not known one by one, so watches that were running end
// with ErrGone and watches may only resume from the list's revision on.
func (kc *kindCache) replace(objs []model.Object, rv uint64) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	for key := range kc.objs {
		kc.removeLocked(key)
	}
	for _, o := range objs {
		orv, _ := strconv.ParseUint(o.GetObjectMeta().ResourceVersion, 10, 64)
		kc.putLocked(o.GetObjectMeta().Key(), kc.newEntry(o, orv))
	}
	if kc.synced {
		for w := range kc.watchers {
			w.failLocked(fmt.Errorf("%s: the cache was re-listed at revision %d: %w", kc.kind, rv, store.ErrGone))
		}
	}
	kc.history = kc.history[:0]
	kc.dropped = rv
	kc.rv = max(kc.rv, rv)
	kc.synced = true
	kc.lastErr = nil
	kc.advanceLocked()
}

// failed records err as the last failure and reports whether the cache
// has had its first list.
func (kc *kindCache) failed(err error) (synced bool) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	kc.lastErr = err
	kc.advanceLocked()
	return kc.synced
}

func (kc *kindCache) close() {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	kc.closed = true
	for w := range kc.watchers {
		w.endLocked()
	}
	kc.advanceLocked()
}

// reflect keeps kc current until the store closes: list, then watch from
// the list's revision; on a watch that ends, watch again from the last
// revision seen; on one that is too old, list again. Errors are retried
// with back-off, and logged.
func (s *Store) reflect(kc *kindCache) {
	backoff := retryMin
	retry := func(what string, err error) bool {
		if !kc.failed(err) && s.cfg.Waiting != nil {
			s.cfg.Waiting(fmt.Errorf("%s %s: %w", what, kc.res.gvr.GroupResource(), err))
		}
		s.log.Warn("kube store: "+what+" failed; retrying", "kind", kc.kind, "in", backoff, "err", err)
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, retryMax)
		select {
		case <-t.C:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	for s.ctx.Err() == nil {
		rv, err := s.list(kc)
		if err != nil {
			if s.ctx.Err() != nil || !retry("list", err) {
				return
			}
			continue
		}
		backoff = retryMin
		for s.ctx.Err() == nil {
			err := s.watchFrom(kc, rv)
			if s.ctx.Err() != nil {
				return
			}
			if errors.Is(err, store.ErrGone) {
				s.log.Info("kube store: watch too old; listing again", "kind", kc.kind, "err", err)
				break
			}
			if err != nil && !retry("watch", err) {
				return
			}
			kc.mu.Lock()
			rv = kc.rv
			kc.mu.Unlock()
		}
	}
}

// list fills the cache with one list of the kind and returns its revision.
func (s *Store) list(kc *kindCache) (uint64, error) {
	ul, err := s.client(kc, s.cfg.Namespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	rv, err := store.ParseResourceVersion(ul.GetResourceVersion())
	if err != nil {
		return 0, err
	}
	objs := make([]model.Object, 0, len(ul.Items))
	for i := range ul.Items {
		o, err := decode(kc.kind, &ul.Items[i])
		if err != nil {
			s.log.Warn("kube store: object not readable; left out of the cache", "kind", kc.kind,
				"object", ul.Items[i].GetNamespace()+"/"+ul.Items[i].GetName(), "err", err)
			continue
		}
		objs = append(objs, o)
	}
	kc.replace(objs, rv)
	return rv, nil
}

// ---- reads ----

func (s *Store) kind(kind string) (*kindCache, error) {
	if err := store.CheckKind(kind); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	return s.kinds[kind], nil
}

// Get implements store.Reader, from the cache. An empty namespace means
// "default".
func (s *Store) Get(ctx context.Context, kind, namespace, name string) (model.Object, error) {
	kc, err := s.kind(kind)
	if err != nil {
		return nil, err
	}
	if namespace == "" {
		namespace = model.DefaultNamespace
	}
	kc.mu.Lock()
	e := kc.objs[namespace+"/"+name]
	kc.mu.Unlock()
	if e == nil {
		return nil, store.NotFoundError(kind, namespace, name)
	}
	return model.DeepCopy(e.obj), nil
}

// List implements store.Reader, from the cache. The version returned is
// the newest revision the kind's cache reflects.
func (s *Store) List(ctx context.Context, kind string, opts store.ListOptions) ([]model.Object, string, error) {
	kc, err := s.kind(kind)
	if err != nil {
		return nil, "", err
	}
	kc.mu.Lock()
	var hits []*entry
	for _, e := range kc.objs {
		if store.Matches(kind, e.obj, opts.Namespace, opts.Labels, opts.Fields) {
			hits = append(hits, e)
		}
	}
	rv := kc.rv
	kc.mu.Unlock()
	return copySorted(hits), strconv.FormatUint(rv, 10), nil
}

// ByIndex implements store.Indexer, from the cache.
func (s *Store) ByIndex(ctx context.Context, kind, index, value string) ([]model.Object, error) {
	kc, err := s.kind(kind)
	if err != nil {
		return nil, err
	}
	kc.mu.Lock()
	set, err := kc.ix.Keys(index, value)
	if err != nil {
		kc.mu.Unlock()
		return nil, err
	}
	hits := make([]*entry, 0, len(set))
	for key := range set {
		hits = append(hits, kc.objs[key])
	}
	kc.mu.Unlock()
	return copySorted(hits), nil
}

func copySorted(hits []*entry) []model.Object {
	slices.SortFunc(hits, func(a, b *entry) int { return compareKeys(a.obj, b.obj) })
	out := make([]model.Object, len(hits))
	for i, e := range hits {
		out[i] = model.DeepCopy(e.obj)
	}
	return out
}

func compareKeys(a, b model.Object) int {
	am, bm := a.GetObjectMeta(), b.GetObjectMeta()
	if c := cmp.Compare(am.Namespace, bm.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(am.Name, bm.Name)
}

// ---- watches ----

// watchBuffer is how many changes a watcher may fall behind before it is
// ended with ErrGone (it lists and watches again).
const watchBuffer = 4096

// watcher is one Watch call: the cache offers it changes without
// blocking; run filters them, copies them and hands them to the caller.
type watcher struct {
	kc     *kindCache
	ns     string
	sel    labels.Selector
	fields []store.FieldRequirement

	in  chan change
	out chan store.Event
	// Guarded by kc.mu.
	ended bool
	err   error
}

func (w *watcher) offerLocked(c change) {
	if w.ended {
		return
	}
	select {
	case w.in <- c:
	default:
		w.failLocked(fmt.Errorf("%s watch fell %d changes behind: %w", w.kc.kind, watchBuffer, store.ErrGone))
	}
}

func (w *watcher) failLocked(err error) {
	if w.ended {
		return
	}
	w.err = err
	w.endLocked()
}

func (w *watcher) endLocked() {
	if w.ended {
		return
	}
	w.ended = true
	delete(w.kc.watchers, w)
	close(w.in)
}

// Watch implements store.Watcher from the cache and its history.
func (s *Store) Watch(ctx context.Context, kind string, opts store.WatchOptions) (<-chan store.Event, error) {
	kc, err := s.kind(kind)
	if err != nil {
		return nil, err
	}
	var from uint64
	if opts.ResourceVersion != "" {
		if from, err = store.ParseResourceVersion(opts.ResourceVersion); err != nil {
			return nil, err
		}
	}
	w := &watcher{kc: kc, ns: opts.Namespace, sel: opts.Labels, fields: opts.Fields,
		in: make(chan change, watchBuffer), out: make(chan store.Event)}
	var initial []change
	kc.mu.Lock()
	if kc.closed {
		kc.mu.Unlock()
		return nil, store.ErrClosed
	}
	if opts.ResourceVersion == "" {
		objs := make([]model.Object, 0, len(kc.objs))
		for _, e := range kc.objs {
			objs = append(objs, e.obj)
		}
		slices.SortFunc(objs, compareKeys)
		for _, o := range objs {
			initial = append(initial, change{typ: store.Added, obj: o})
		}
	} else {
		if from < kc.dropped {
			kc.mu.Unlock()
			return nil, fmt.Errorf("%s: watch from %d, but the history starts after %d: %w", kind, from, kc.dropped, store.ErrGone)
		}
		for _, c := range kc.history {
			if c.rv > from {
				initial = append(initial, c)
			}
		}
	}
	kc.watchers[w] = struct{}{}
	kc.mu.Unlock()
	go w.run(ctx, initial)
	return w.out, nil
}

func (w *watcher) run(ctx context.Context, initial []change) {
	defer close(w.out)
	defer func() {
		w.kc.mu.Lock()
		w.endLocked()
		w.kc.mu.Unlock()
	}()
	send := func(c change) bool {
		if !store.Matches(w.kc.kind, c.obj, w.ns, w.sel, w.fields) {
			return true
		}
		select {
		case w.out <- store.Event{Type: c.typ, Object: model.DeepCopy(c.obj)}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for _, c := range initial {
		if !send(c) {
			return
		}
	}
	for {
		select {
		case c, ok := <-w.in:
			if !ok {
				w.kc.mu.Lock()
				err := w.err
				w.kc.mu.Unlock()
				if err != nil {
					select {
					case w.out <- store.Event{Type: store.Error, Err: err}:
					case <-ctx.Done():
					}
				}
				return
			}
			if !send(c) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
