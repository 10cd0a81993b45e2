package bolt

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"
)

type verb int

const (
	verbCreate verb = iota
	verbUpdate
	verbDelete
	verbApply
)

// op is one object change, prepared (validated, copied, encoded where
// possible) in the caller's goroutine so that the committer does little.
type op struct {
	verb       verb
	kc         *kindCache
	ns, name   string
	key        string
	obj        model.Object // private copy; nil for delete
	uid        string       // for a create
	sum        [32]byte
	idx        [][]string
	hasRV      bool
	rv         uint64
	statusZero bool // apply: keep the stored status
}

// request is what a caller queues: one op, or all of an Apply.
type request struct {
	ctx  context.Context
	ops  []*op
	done chan response // capacity 1
}

type response struct {
	objs []model.Object // per op, as committed (the cache's: copy before handing out); nil for a delete
	err  error
}

// change is one committed op, published in revision order.
type change struct {
	kc  *kindCache
	key string
	e   *entry // new entry; for a delete, the last one
	typ store.EventType
	rev uint64
}

type ovKey struct {
	kc  *kindCache
	key string
}

type undoRec struct {
	k       ovKey
	prev    *entry
	present bool
}

// prepare makes the op for obj; own says the store may keep obj itself
// (UpdateShared) instead of a copy.
func (s *Store) prepare(v verb, obj model.Object, own bool) (*op, error) {
	if obj == nil {
		return nil, fmt.Errorf("nil object: %w", store.ErrInvalid)
	}
	kind := model.KindOf(obj)
	if kind == "" {
		return nil, fmt.Errorf("%T is not a stored kind: %w", obj, store.ErrInvalid)
	}
	if tk := obj.GetTypeMeta().Kind; tk != "" && tk != kind {
		return nil, fmt.Errorf("%T says kind %q: %w", obj, tk, store.ErrInvalid)
	}
	// The store keeps priv (in its cache) once committed; the caller keeps
	// obj, unless it handed obj over.
	priv := obj
	if !own {
		priv = model.DeepCopy(obj)
	}
	*priv.GetTypeMeta() = model.TypeMeta{APIVersion: model.APIVersionOf(kind), Kind: kind}
	m := priv.GetObjectMeta()
	if m.Namespace == "" {
		m.Namespace = model.DefaultNamespace
	}
	if err := store.CheckKey(kind, m.Namespace, m.Name); err != nil {
		return nil, err
	}
	o := &op{verb: v, kc: s.kinds[kind], ns: m.Namespace, name: m.Name, key: m.Namespace + "/" + m.Name, obj: priv}
	var err error
	switch v {
	case verbCreate:
		if m.ResourceVersion != "" {
			return nil, fmt.Errorf("%s %s: resourceVersion must be empty on create: %w", kind, o.key, store.ErrInvalid)
		}
	case verbUpdate:
		if m.ResourceVersion != "" {
			if o.rv, err = store.ParseResourceVersion(m.ResourceVersion); err != nil {
				return nil, fmt.Errorf("%s %s: %w", kind, o.key, err)
			}
			o.hasRV = true
		}
	case verbApply:
		o.statusZero = store.StatusIsZero(priv)
	}
	if v == verbCreate || v == verbApply {
		o.uid = uuid.NewString()
	}
	m.ResourceVersion, m.UID, m.Generation, m.CreationTimestamp = "", "", 0, nil
	if o.sum, err = specSum(priv); err != nil {
		return nil, err
	}
	o.idx = s.kinds[kind].ix.Values(priv)
	return o, nil
}

// submit queues r and waits for the committer's answer. The wait is bounded
// by one commit; a request whose ctx has ended by the time its batch is
// applied is not applied and gets ctx's error.
func (s *Store) submit(r *request) response {
	if err := r.ctx.Err(); err != nil {
		return response{err: err}
	}
	r.done = make(chan response, 1)
	s.qmu.Lock()
	if s.qclosed {
		s.qmu.Unlock()
		return response{err: store.ErrClosed}
	}
	s.queue = append(s.queue, r)
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return <-r.done
}

func (s *Store) committer() {
	defer close(s.done)
	var spare []*request
	for {
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
		s.qmu.Lock()
		batch := s.queue
		s.queue = spare[:0]
		s.qmu.Unlock()
		if len(batch) > 0 {
			s.commit(batch)
		}
		clear(batch)
		spare = batch
	}
}

// commit applies a batch in one transaction; see the package comment.
func (s *Store) commit(batch []*request) {
	start := time.Now()
	resps := make([]response, len(batch))
	overlay := map[ovKey]*entry{}
	lookup := func(k ovKey) *entry {
		if e, ok := overlay[k]; ok {
			return e
		}
		// Only this goroutine modifies the cache, so reading it without
		// the lock is safe.
		return k.kc.objs[k.key]
	}
	rev := s.rev
	var changes []change
	var undo []undoRec
	now := s.opts.Clock.Now()

	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			resps[i].err = err
			continue
		}
		rev0, nch := rev, len(changes)
		undo = undo[:0]
		objs := make([]model.Object, len(r.ops))
		var err error
		for j, o := range r.ops {
			k := ovKey{o.kc, o.key}
			cur := lookup(k)
			if err = checkPrecondition(o, cur); err != nil {
				break
			}
			rev++
			prev, present := overlay[k]
			undo = append(undo, undoRec{k, prev, present})
			if o.verb == verbDelete {
				overlay[k] = nil
				changes = append(changes, change{kc: o.kc, key: o.key, e: cur, typ: store.Deleted, rev: rev})
				continue
			}
			var e *entry
			if e, err = s.stamp(o, cur, rev, now); err != nil {
				break
			}
			overlay[k] = e
			typ := store.Added
			if cur != nil {
				typ = store.Modified
			}
			changes = append(changes, change{kc: o.kc, key: o.key, e: e, typ: typ, rev: rev})
			objs[j] = e.obj
		}
		if err != nil {
			for u := len(undo) - 1; u >= 0; u-- {
				if undo[u].present {
					overlay[undo[u].k] = undo[u].prev
				} else {
					delete(overlay, undo[u].k)
				}
			}
			rev, changes = rev0, changes[:nch]
			resps[i].err = err
			continue
		}
		resps[i].objs = objs
	}

	if len(changes) > 0 {
		if err := s.persist(overlay, rev); err != nil {
			s.log.Error("store commit failed", "err", err, "requests", len(batch))
			err = fmt.Errorf("commit: %w", err)
			for i := range resps {
				if resps[i].err == nil {
					resps[i] = response{err: err}
				}
			}
			changes = nil
		} else {
			s.publish(changes, rev)
		}
	}
	if d := time.Since(start); d > time.Second {
		s.log.Warn("slow store commit", "duration", d, "requests", len(batch), "changes", len(changes))
	}
	for i, r := range batch {
		r.done <- resps[i]
	}
}

func checkPrecondition(o *op, cur *entry) error {
	kind := o.kc.kind
	switch o.verb {
	case verbCreate:
		if cur != nil {
			return fmt.Errorf("%s %s: %w", kind, o.key, store.ErrAlreadyExists)
		}
	case verbUpdate, verbDelete:
		if cur == nil {
			return store.NotFoundError(kind, o.ns, o.name)
		}
		if o.hasRV && o.rv != cur.rev {
			return fmt.Errorf("%s %s: resourceVersion %d, stored %d: %w", kind, o.key, o.rv, cur.rev, store.ErrConflict)
		}
	}
	return nil
}

// stamp sets the store-owned metadata of o.obj for revision rev and encodes
// it into a new cache entry.
func (s *Store) stamp(o *op, cur *entry, rev uint64, now time.Time) (*entry, error) {
	m := o.obj.GetObjectMeta()
	idx := o.idx
	if cur == nil {
		ts := now
		m.UID, m.CreationTimestamp, m.Generation = o.uid, &ts, 1
	} else {
		cm := cur.obj.GetObjectMeta()
		m.UID = cm.UID
		if cm.CreationTimestamp != nil {
			ts := *cm.CreationTimestamp
			m.CreationTimestamp = &ts
		}
		m.Generation = cur.gen
		if o.sum != cur.specSum {
			m.Generation++
		}
		if o.verb == verbApply && o.statusZero {
			store.CopyStatus(o.obj, cur.obj)
			idx = o.kc.ix.Values(o.obj)
		}
	}
	m.ResourceVersion = strconv.FormatUint(rev, 10)
	raw, err := json.Marshal(o.obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", o.kc.kind, o.key, err)
	}
	return &entry{obj: o.obj, raw: raw, ns: o.ns, name: o.name, rev: rev, gen: m.Generation, specSum: o.sum, idx: idx}, nil
}

// persist writes the final state of every key the batch touched, and the
// revision counter, in one fsynced transaction.
func (s *Store) persist(overlay map[ovKey]*entry, rev uint64) error {
	keys := make([]ovKey, 0, len(overlay))
	for k := range overlay {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ovKey) int {
		if c := cmp.Compare(a.kc.kind, b.kc.kind); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	tx, err := s.db.Begin(true)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // no-op after a successful Commit
	var bk *bolt.Bucket
	bkind := ""
	for _, k := range keys {
		if bk == nil || bkind != k.kc.kind {
			bkind = k.kc.kind
			if bk = tx.Bucket([]byte(bkind)); bk == nil {
				return fmt.Errorf("bucket %s missing", bkind)
			}
		}
		if e := overlay[k]; e != nil {
			err = bk.Put([]byte(k.key), e.raw)
		} else {
			err = bk.Delete([]byte(k.key))
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", k.kc.kind, k.key, err)
		}
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], rev)
	if err := tx.Bucket(metaBucket).Put(revisionKey, v[:]); err != nil {
		return err
	}
	return tx.Commit()
}
