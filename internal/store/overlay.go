package store

import (
	"cmp"
	"context"
	"slices"

	"github.com/anvilproj/anvil/internal/model"
)

// OverlayBase is what an Overlay reads through to. Every Store is one.
type OverlayBase interface {
	Get(ctx context.Context, kind, namespace, name string) (model.Object, error)
	Indexer
}

// Overlay is a read view of a store as it will be once a write of objs is
// made: each object created, or replacing the stored one of its kind,
// namespace and name. It answers Get and ByIndex as the store would after
// the write, so that a check of the write (does a MAC belong to two
// Hardware? does a workflow's worker belong to its namespace?) runs before
// anything is stored, through the store's own indexes: every Store
// implementation gets it, not only the embedded one.
//
// It does not copy the objects (but for one without a namespace): they
// are the caller's and must not change while the Overlay is used, and
// what it returns of them must not be changed. It is as consistent as its base's reads; a
// writer that must not race another (two Hardware claiming one MAC at
// once) serialises the check and the write itself.
type Overlay struct {
	base OverlayBase
	objs map[overlayKey]model.Object
	// index holds the objects' index values, by kind and index name then
	// value: a write of thousands of objects looks each of them up, so a
	// scan per lookup would be quadratic.
	index map[[2]string]map[string][]model.Object
}

type overlayKey struct{ kind, namespace, name string }

// NewOverlay returns base with objs written over it. An object without a
// namespace is in model.DefaultNamespace, as a Store would put it (the
// Overlay answers with a copy that says so); of two objects with one key
// the later wins, as in Apply.
func NewOverlay(base OverlayBase, objs []model.Object) *Overlay {
	o := &Overlay{base: base, objs: make(map[overlayKey]model.Object, len(objs))}
	for _, obj := range objs {
		if obj.GetObjectMeta().Namespace == "" {
			obj = model.DeepCopy(obj)
			obj.GetObjectMeta().Namespace = model.DefaultNamespace
		}
		o.objs[keyOf(obj)] = obj
	}
	o.index = map[[2]string]map[string][]model.Object{}
	for k, obj := range o.objs {
		for _, ix := range Indexes(k.kind) {
			vals, _ := IndexValues(obj, ix)
			for _, v := range vals {
				m := o.index[[2]string{k.kind, ix}]
				if m == nil {
					m = map[string][]model.Object{}
					o.index[[2]string{k.kind, ix}] = m
				}
				m[v] = append(m[v], obj)
			}
		}
	}
	return o
}

func keyOf(obj model.Object) overlayKey {
	m := obj.GetObjectMeta()
	return overlayKey{model.KindOf(obj), m.Namespace, m.Name}
}

// Get returns the overlaid object of that key, else the base's. The
// object returned is shared: the caller must not change it.
func (o *Overlay) Get(ctx context.Context, kind, namespace, name string) (model.Object, error) {
	if namespace == "" {
		namespace = model.DefaultNamespace
	}
	if obj, ok := o.objs[overlayKey{kind, namespace, name}]; ok {
		return obj, nil
	}
	return o.base.Get(ctx, kind, namespace, name)
}

// ByIndex returns what the base's index holds for value, without the
// objects the overlay replaces, plus the overlaid objects whose index
// values (IndexValues, as every Store computes them) hold value, ordered
// by namespace then name.
func (o *Overlay) ByIndex(ctx context.Context, kind, index, value string) ([]model.Object, error) {
	stored, err := o.base.ByIndex(ctx, kind, index, value)
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(stored, func(obj model.Object) bool {
		_, replaced := o.objs[keyOf(obj)]
		return replaced
	})
	out = append(out, o.index[[2]string{kind, index}][value]...)
	slices.SortFunc(out, func(a, b model.Object) int {
		ka, kb := keyOf(a), keyOf(b)
		return cmp.Or(cmp.Compare(ka.namespace, kb.namespace), cmp.Compare(ka.name, kb.name))
	})
	return out, nil
}
