package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// event is a committed change as remembered for watchers: the stored JSON
// (for a deletion, the last stored state) and the change's revision. Live
// events also carry the committed object (immutable; copied, not decoded, on
// delivery); the history ring drops it, to bound its memory to the JSON.
type event struct {
	typ  store.EventType
	kind string
	raw  []byte
	obj  model.Object
	rev  uint64
}

// watcher is one Watch call. The committer puts matching events on in
// without ever blocking; a goroutine (run) decodes them into fresh objects
// and passes them to out, the caller's channel.
type watcher struct {
	s      *Store
	ctx    context.Context
	kind   string
	ns     string
	sel    labels.Selector
	fields []store.FieldRequirement
	shared bool // store.WatchOptions.Shared: events carry the cached objects

	initial []event // sent first; filtered by run
	in      chan event
	out     chan store.Event

	// Guarded by s.mu; overflow is read by run after in is closed.
	removed  bool
	overflow bool
}

func (w *watcher) matches(obj model.Object) bool {
	return store.Matches(w.kind, obj, w.ns, w.sel, w.fields)
}

// Watch implements store.Watcher.
//
// Events are filtered on the object they carry: a Modified event after which
// the object no longer matches the watch's filter is simply not sent (no
// synthetic Deleted), and one after which it starts matching arrives as
// Modified. A resource version newer than the store's is accepted and
// yields the changes after it.
func (s *Store) Watch(ctx context.Context, kind string, opts store.WatchOptions) (<-chan store.Event, error) {
	if err := store.CheckKind(kind); err != nil {
		return nil, err
	}
	var from uint64
	if opts.ResourceVersion != "" {
		var err error
		if from, err = store.ParseResourceVersion(opts.ResourceVersion); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &watcher{
		s: s, ctx: ctx, kind: kind, ns: opts.Namespace, sel: opts.Labels, fields: opts.Fields, shared: opts.Shared,
		in:  make(chan event, s.opts.WatchBuffer),
		out: make(chan store.Event),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, store.ErrClosed
	}
	if opts.ResourceVersion == "" {
		var hits []*entry
		for _, e := range s.kinds[kind].objs {
			if w.matches(e.obj) {
				hits = append(hits, e)
			}
		}
		slices.SortFunc(hits, compareEntries)
		w.initial = make([]event, len(hits))
		for i, e := range hits {
			w.initial[i] = event{typ: store.Added, kind: kind, raw: e.raw, obj: e.obj, rev: e.rev}
		}
	} else {
		if from < s.minRV {
			minRV := s.minRV
			s.mu.Unlock()
			return nil, fmt.Errorf("watch %s from %d: oldest remembered is %d: %w", kind, from, minRV, store.ErrGone)
		}
		// Copy the later events; run decodes and filters them, so the
		// lock is not held for that.
		for i := 0; i < s.ringLen; i++ {
			ev := s.ring[(s.ringHead+i)%len(s.ring)]
			if ev.rev > from && ev.kind == kind {
				w.initial = append(w.initial, ev)
			}
		}
	}
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	go w.run()
	return w.out, nil
}

// dropWatcherLocked unregisters w and closes its input. s.mu must be held.
func (s *Store) dropWatcherLocked(w *watcher, overflow bool) {
	if w.removed {
		return
	}
	w.removed, w.overflow = true, overflow
	delete(s.watchers, w)
	close(w.in)
}

func (w *watcher) unregister() {
	w.s.mu.Lock()
	w.s.dropWatcherLocked(w, false)
	w.s.mu.Unlock()
}

func (w *watcher) run() {
	defer close(w.out)
	for _, ev := range w.initial {
		if !w.deliver(ev, true) {
			return
		}
	}
	w.initial = nil
	for {
		select {
		case ev, ok := <-w.in:
			if !ok {
				if w.overflow {
					w.send(store.Event{Type: store.Error,
						Err: fmt.Errorf("watch %s: watcher fell more than %d events behind: %w", w.kind, cap(w.in), store.ErrGone)})
				}
				return
			}
			if !w.deliver(ev, false) {
				return
			}
		case <-w.ctx.Done():
			w.unregister()
			return
		case <-w.s.closing:
			return
		}
	}
}

// deliver sends ev's object — the cached one to a shared watcher, else a
// copy, or one decoded from the history's JSON — first checking the filter
// if asked (live events were filtered by the committer).
func (w *watcher) deliver(ev event, filter bool) bool {
	var rv uint64
	if ev.typ == store.Deleted {
		rv = ev.rev
	}
	var obj model.Object
	if ev.obj != nil {
		switch {
		case !w.shared:
			obj = model.DeepCopy(ev.obj)
		case rv != 0:
			obj = model.ShallowCopy(ev.obj) // for its own resourceVersion
		default:
			obj = ev.obj
		}
		if rv != 0 {
			obj.GetObjectMeta().ResourceVersion = strconv.FormatUint(rv, 10)
		}
	} else {
		var err error
		if obj, err = decode(ev.kind, ev.raw, rv); err != nil {
			w.send(store.Event{Type: store.Error, Err: err})
			w.unregister()
			return false
		}
	}
	if filter && !w.matches(obj) {
		return true
	}
	return w.send(store.Event{Type: ev.typ, Object: obj})
}

func (w *watcher) send(e store.Event) bool {
	select {
	case w.out <- e:
		return true
	case <-w.ctx.Done():
		w.unregister()
		return false
	case <-w.s.closing:
		return false
	}
}

// publish makes a committed batch visible: cache, indexes, history and
// watchers, in revision order, atomically for readers.
func (s *Store) publish(changes []change, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range changes {
		if c.typ == store.Deleted {
			c.kc.remove(c.key)
		} else {
			c.kc.put(c.key, c.e)
		}
		raw := c.e.raw
		if raw == nil {
			// A deletion: c.e is the last stored entry, published before
			// (its raw dropped). Deletions are rare; encode it again.
			var err error
			if raw, err = json.Marshal(c.e.obj); err != nil {
				s.log.Error("store: encode a deleted object for the watch history", "kind", c.kc.kind, "key", c.key, "err", err)
			}
		}
		ev := event{typ: c.typ, kind: c.kc.kind, raw: raw, rev: c.rev}
		s.remember(ev)
		c.e.raw = nil // persisted, and in the history: the cache keeps obj alone
		ev.obj = c.e.obj
		for w := range s.watchers {
			if w.kind != ev.kind || !w.matches(c.e.obj) {
				continue
			}
			select {
			case w.in <- ev:
			default:
				s.dropWatcherLocked(w, true)
			}
		}
	}
	s.rev = rev
}

// remember appends ev to the history ring, forgetting the oldest if full.
func (s *Store) remember(ev event) {
	n := len(s.ring)
	if s.ringLen == n {
		s.minRV = s.ring[s.ringHead].rev
		s.ring[s.ringHead] = ev
		s.ringHead = (s.ringHead + 1) % n
		return
	}
	s.ring[(s.ringHead+s.ringLen)%n] = ev
	s.ringLen++
}
