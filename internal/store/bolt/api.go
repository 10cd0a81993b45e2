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

var _ store.Store = (*Store)(nil)

// Create implements store.Writer.
func (s *Store) Create(ctx context.Context, obj model.Object) (model.Object, error) {
	return s.writeOne(ctx, verbCreate, obj)
}

// Update implements store.Writer. The whole object, status included, is
// replaced; UID and creationTimestamp are kept.
func (s *Store) Update(ctx context.Context, obj model.Object) (model.Object, error) {
	return s.writeOne(ctx, verbUpdate, obj)
}

func (s *Store) writeOne(ctx context.Context, v verb, obj model.Object) (model.Object, error) {
	o, err := s.prepare(v, obj)
	if err != nil {
		return nil, err
	}
	resp := s.submit(&request{ctx: ctx, ops: []*op{o}})
	if resp.err != nil {
		return nil, resp.err
	}
	return model.DeepCopy(resp.objs[0]), nil
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
		o, err := s.prepare(verbApply, obj)
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
	return model.DeepCopy(e.obj), nil
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
	out, err := decodeSorted(kind, hits)
	return out, rv, err
}

// ByIndex implements store.Indexer.
func (s *Store) ByIndex(ctx context.Context, kind, index, value string) ([]model.Object, error) {
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
	return decodeSorted(kind, hits)
}

func decodeSorted(kind string, hits []*entry) ([]model.Object, error) {
	slices.SortFunc(hits, compareEntries)
	out := make([]model.Object, len(hits))
	for i, e := range hits {
		// A reflective copy of the cached object, not a JSON decode of its
		// bytes: reads are the store's hottest path.
		out[i] = model.DeepCopy(e.obj)
	}
	return out, nil
}

func compareEntries(a, b *entry) int {
	if c := cmp.Compare(a.ns, b.ns); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}
