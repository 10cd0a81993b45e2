package bootpolicy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// profileCache keeps every BootProfile, compiled, by namespace, fed by a
// watch (see Run), so that a script request reads a map instead of listing
// profiles. Until the first list completes (synced false), the policy
// lists the Hardware's namespace from the store instead.
type profileCache struct {
	mu     sync.RWMutex
	synced bool
	byNS   map[string][]*compiledProfile // sorted by name
}

// inNamespace returns the namespace's profiles and whether the cache can
// answer. The slice is shared: callers must not modify it.
func (c *profileCache) inNamespace(ns string) ([]*compiledProfile, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.synced {
		return nil, false
	}
	return c.byNS[ns], true
}

func (c *profileCache) reset(objs []model.Object) {
	m := map[string][]*compiledProfile{}
	for _, o := range objs {
		if bp, ok := o.(*model.BootProfile); ok {
			m[bp.Namespace] = append(m[bp.Namespace], compileProfile(bp))
		}
	}
	for _, ps := range m {
		slices.SortFunc(ps, func(a, b *compiledProfile) int { return cmp.Compare(a.p.Name, b.p.Name) })
	}
	c.mu.Lock()
	c.byNS, c.synced = m, true
	c.mu.Unlock()
}

// set adds or replaces a profile. The namespace's slice is copied, never
// changed in place: readers may hold the old one.
func (c *profileCache) set(bp *model.BootProfile) {
	cp := compileProfile(bp)
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := slices.DeleteFunc(slices.Clone(c.byNS[bp.Namespace]), func(x *compiledProfile) bool { return x.p.Name == bp.Name })
	i, _ := slices.BinarySearchFunc(ps, bp.Name, func(x *compiledProfile, name string) int { return cmp.Compare(x.p.Name, name) })
	c.byNS[bp.Namespace] = slices.Insert(ps, i, cp)
}

func (c *profileCache) remove(ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := slices.DeleteFunc(slices.Clone(c.byNS[ns]), func(x *compiledProfile) bool { return x.p.Name == name })
	if len(ps) == 0 {
		delete(c.byNS, ns)
	} else {
		c.byNS[ns] = ps
	}
}

func (c *profileCache) unsync() {
	c.mu.Lock()
	c.synced = false
	c.mu.Unlock()
}

// followProfiles lists every BootProfile into the cache, then applies the
// watch's changes until it ends.
func (p *Policy) followProfiles(ctx context.Context, src listWatcher) error {
	objs, rv, err := src.List(ctx, model.KindBootProfile, store.ListOptions{})
	if err != nil {
		return err
	}
	ch, err := src.Watch(ctx, model.KindBootProfile, store.WatchOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	p.profiles.reset(objs)
	for ev := range ch {
		switch ev.Type {
		case store.Added, store.Modified:
			if bp, ok := ev.Object.(*model.BootProfile); ok {
				p.profiles.set(bp)
			}
		case store.Deleted:
			if ev.Object != nil {
				m := ev.Object.GetObjectMeta()
				p.profiles.remove(m.Namespace, m.Name)
			}
		case store.Error:
			return ev.Err
		}
	}
	return ctx.Err()
}

// profilesOf returns the profiles of namespace ns: from the cache when Run
// has filled it, else listed from the store (one namespace, not all).
func (p *Policy) profilesOf(ctx context.Context, ns string) ([]*compiledProfile, error) {
	if ps, ok := p.profiles.inNamespace(ns); ok {
		return ps, nil
	}
	r, ok := p.store.(store.Reader)
	if !ok {
		return nil, fmt.Errorf("list boot profiles of namespace %s: the store cannot list (run the policy's cache)", ns)
	}
	objs, _, err := r.List(ctx, model.KindBootProfile, store.ListOptions{Namespace: ns})
	if err != nil {
		return nil, fmt.Errorf("list boot profiles of namespace %s: %w", ns, err)
	}
	out := make([]*compiledProfile, 0, len(objs))
	for _, o := range objs {
		if bp, ok := o.(*model.BootProfile); ok {
			out = append(out, compileProfile(bp))
		}
	}
	return out, nil
}
