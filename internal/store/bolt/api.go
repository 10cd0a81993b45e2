package bolt

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

var (
	_ store.Store    = (*Store)(nil)
	_ store.Sharer   = (*Store)(nil)
	_ store.Backuper = (*Store)(nil)
)

// Create implements store.Writer.
func (s *Store) Create(ctx context.Context, obj model.Object) (model.Object, error) {
	return s.writeOne(ctx, verbCreate, obj)
}

// Update implements store.Writer. The whole object, status included, is
// replaced; UID and creationTimestamp are kept.
func (s *Store) Update(ctx context.Context, obj model.Object) (model.Object, error) {
	return s.writeOne(ctx, verbUpdate, obj)
}

// UpdateShared implements store.Sharer: Update keeping obj itself in the
// cache, and returning the cached object, with no copy either way.
func (s *Store) UpdateShared(ctx context.Context, obj model.Object) (model.Object, error) {
	o, err := s.prepare(verbUpdate, obj, true)
	if err != nil {
		return nil, err
	}
	return s.submitOne(ctx, o)
}

func (s *Store) writeOne(ctx context.Context, v verb, obj model.Object) (model.Object, error) {
	o, err := s.prepare(v, obj, false)
	if err != nil {
		return nil, err
	}
	out, err := s.submitOne(ctx, o)
	if err != nil {
		return nil, err
	}
	return model.DeepCopy(out), nil
}

// submitOne commits one op and returns the cached object it wrote.
func (s *Store) submitOne(ctx context.Context, o *op) (model.Object, error) {
	resp := s.submit(&request{ctx: ctx, ops: []*op{o}})
	if resp.err != nil {
		return nil, resp.err
	}
	return resp.objs[0], nil
}

// Delete implements store.Writer.
func (s *Store) Delete(ctx context.Context, kind, namespace, name, resourceVersion string) error {
	if namespace == "" {
		namespace = model.DefaultNamespace
	}
	if err := store.CheckKey(kind, namespace, name); err != nil {
		return err
	}
	o := &op{verb: verbDelete, kc: s.kinds[kind], ns: namespace, name: name, key: namespace + "/" + name}
	if resourceVersion != "" {
		rv, err := store.ParseResourceVersion(resourceVersion)
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, o.key, err)
		}
		o.rv, o.hasRV = rv, true
	}
	return s.submit(&request{ctx: ctx, ops: []*op{o}}).err
}

// Apply implements store.Writer: one request, so one transaction, applied
// entirely or not at all. Each object gets its own revision, in order.
func (s *Store) Apply(ctx context.Context, objs []model.Object) ([]model.Object, error) {
	ops := make([]*op, len(objs))
	for i, obj := range objs {
		o, err := s.prepare(verbApply, obj, false)
		if err != nil {
			return nil, fmt.Errorf("apply object %d: %w", i, err)
		}
		ops[i] = o
	}
	if len(ops) == 0 {
		return nil, s.checkOpen()
	}
	resp := s.submit(&request{ctx: ctx, ops: ops})
	if resp.err != nil {
		return nil, resp.err
	}
	out := make([]model.Object, len(ops))
	for i, obj := range resp.objs {
		out[i] = model.DeepCopy(obj)
	}
	return out, nil
}

// decode returns a fresh object from stored JSON; rv, if non-zero, replaces
// its resourceVersion (for Deleted events).
func decode(kind string, raw []byte, rv uint64) (model.Object, error) {
	obj, err := model.Decode(kind, raw)
	if err != nil {
		return nil, err
	}
	if rv != 0 {
		obj.GetObjectMeta().ResourceVersion = strconv.FormatUint(rv, 10)
	}
	return obj, nil
}

// Get implements store.Reader. An empty namespace means "default".
func (s *Store) Get(ctx context.Context, kind, namespace, name string) (model.Object, error) {
	obj, err := s.GetShared(ctx, kind, namespace, name)
	if err != nil {
		return nil, err
	}
	return model.DeepCopy(obj), nil
}

// GetShared implements store.Sharer: the cached object itself. Cached
// objects are never modified: a write replaces its key's entry.
func (s *Store) GetShared(ctx context.Context, kind, namespace, name string) (model.Object, error) {
	if err := store.CheckKind(kind); err != nil {
		return nil, err
	}
	if namespace == "" {
		namespace = model.DefaultNamespace
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, store.ErrClosed
	}
	e := s.kinds[kind].objs[namespace+"/"+name]
	s.mu.RUnlock()
	if e == nil {
		return nil, store.NotFoundError(kind, namespace, name)
	}
	return e.obj, nil
}

// List implements store.Reader.
func (s *Store) List(ctx context.Context, kind string, opts store.ListOptions) ([]model.Object, string, error) {
	if err := store.CheckKind(kind); err != nil {
		return nil, "", err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, "", store.ErrClosed
	}
	var hits []*entry
	for _, e := range s.kinds[kind].objs {
		if store.Matches(kind, e.obj, opts.Namespace, opts.Labels, opts.Fields) {
			hits = append(hits, e)
		}
	}
	rv := strconv.FormatUint(s.rev, 10)
	s.mu.RUnlock()
	return copySorted(hits), rv, nil
}

// ByIndex implements store.Indexer.
func (s *Store) ByIndex(ctx context.Context, kind, index, value string) ([]model.Object, error) {
	hits, err := s.byIndex(kind, index, value)
	if err != nil {
		return nil, err
	}
	return copySorted(hits), nil
}

// ByIndexShared implements store.Sharer: ByIndex without the copies.
func (s *Store) ByIndexShared(ctx context.Context, kind, index, value string) ([]model.Object, error) {
	hits, err := s.byIndex(kind, index, value)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(hits, compareEntries)
	out := make([]model.Object, len(hits))
	for i, e := range hits {
		out[i] = e.obj
	}
	return out, nil
}

func (s *Store) byIndex(kind, index, value string) ([]*entry, error) {
	if err := store.CheckKind(kind); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, store.ErrClosed
	}
	kc := s.kinds[kind]
	set, err := kc.ix.Keys(index, value)
	if err != nil {
		s.mu.RUnlock()
		return nil, err
	}
	hits := make([]*entry, 0, len(set))
	for key := range set {
		hits = append(hits, kc.objs[key])
	}
	s.mu.RUnlock()
	return hits, nil
}

func copySorted(hits []*entry) []model.Object {
	slices.SortFunc(hits, compareEntries)
	out := make([]model.Object, len(hits))
	for i, e := range hits {
		// A reflective copy of the cached object, not a JSON decode of its
		// bytes: reads are the store's hottest path.
		out[i] = model.DeepCopy(e.obj)
	}
	return out
}

func compareEntries(a, b *entry) int {
	if c := cmp.Compare(a.ns, b.ns); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}
