package store

import (
	"fmt"

	"github.com/anvilproj/anvil/internal/model"
)

// Index is one kind's secondary indexes in memory (Indexes(kind): value →
// the keys of the objects holding it), as the stores' caches keep them.
// An object's values are computed once (Values) and kept with it, so that
// the same values are removed when it changes. It is not safe for
// concurrent use: its store's lock guards it.
type Index struct {
	kind  string
	names []string
	sets  map[string]map[string]map[string]struct{} // index → value → keys
}

// NewIndex returns the empty indexes of kind.
func NewIndex(kind string) *Index {
	x := &Index{kind: kind, names: Indexes(kind), sets: map[string]map[string]map[string]struct{}{}}
	for _, n := range x.names {
		x.sets[n] = map[string]map[string]struct{}{}
	}
	return x
}

// Values returns obj's values of every index of its kind, in Indexes
// order: what Add and Remove take.
func (x *Index) Values(obj model.Object) [][]string {
	out := make([][]string, len(x.names))
	for i, n := range x.names {
		out[i], _ = IndexValues(obj, n)
	}
	return out
}

// Add records that the object at key holds vals (from Values).
func (x *Index) Add(key string, vals [][]string) {
	for i, n := range x.names {
		m := x.sets[n]
		for _, v := range vals[i] {
			set := m[v]
			if set == nil {
				set = map[string]struct{}{}
				m[v] = set
			}
			set[key] = struct{}{}
		}
	}
}

// Remove forgets that the object at key holds vals (what Add was given).
func (x *Index) Remove(key string, vals [][]string) {
	for i, n := range x.names {
		m := x.sets[n]
		for _, v := range vals[i] {
			if set := m[v]; set != nil {
				delete(set, key)
				if len(set) == 0 {
					delete(m, v)
				}
			}
		}
	}
}

// Keys returns the keys of the objects whose index holds value (the
// caller's to read, not to keep past its lock), or an error wrapping
// ErrInvalid for an index the kind does not have.
func (x *Index) Keys(index, value string) (map[string]struct{}, error) {
	m, ok := x.sets[index]
	if !ok {
		return nil, fmt.Errorf("%s has no index %q (have %v): %w", x.kind, index, x.names, ErrInvalid)
	}
	return m[value], nil
}
