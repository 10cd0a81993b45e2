package bootpolicy

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// hostCache keeps the DHCP view (a *dhcp.Host) of every Hardware interface
// in memory, fed by a watch on Hardware, so that Lookup on the DHCP packet
// path is a map read. Without it each packet cost a store index lookup and
// a deep copy of the Hardware: half of `anvil serve`'s CPU per exchange
// under perfdhcp. Until the first list completes (synced false), Lookup
// reads the store as before.
type hostCache struct {
	mu     sync.RWMutex
	synced bool
	byMAC  map[macaddr.MAC][]cachedHost // claimants, by ns/name
	macsOf map[string][]macaddr.MAC     // Hardware key -> its MACs in byMAC
}

type cachedHost struct {
	key  string
	host *dhcp.Host
}

// get returns the host for mac and whether the cache can answer at all.
// When two Hardware claim a MAC, the first by namespace/name wins, as in
// the store path.
func (c *hostCache) get(mac macaddr.MAC) (h *dhcp.Host, synced bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.synced {
		return nil, false
	}
	if hs := c.byMAC[mac]; len(hs) > 0 {
		return hs[0].host, true
	}
	return nil, true
}

// reset replaces the whole cache with objs (a fresh list).
func (c *hostCache) reset(p *Policy, objs []model.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byMAC, c.macsOf = map[macaddr.MAC][]cachedHost{}, map[string][]macaddr.MAC{}
	for _, o := range objs {
		if hw, ok := o.(*model.Hardware); ok {
			c.setLocked(p, hw)
		}
	}
	c.synced = true
}

func (c *hostCache) set(p *Policy, hw *model.Hardware) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(hw.Key())
	c.setLocked(p, hw)
}

func (c *hostCache) remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(key)
}

func (c *hostCache) setLocked(p *Policy, hw *model.Hardware) {
	key := hw.Key()
	for i := range hw.Spec.Interfaces {
		m := hw.Spec.Interfaces[i].MAC()
		if !m.IsValid() {
			continue
		}
		if slices.Contains(c.macsOf[key], m) {
			continue // the first interface with a MAC wins, as in pick
		}
		hs := append(c.byMAC[m], cachedHost{key: key, host: p.host(hw, i)})
		slices.SortFunc(hs, func(a, b cachedHost) int { return cmp.Compare(a.key, b.key) })
		c.byMAC[m] = hs
		c.macsOf[key] = append(c.macsOf[key], m)
	}
}

func (c *hostCache) removeLocked(key string) {
	for _, m := range c.macsOf[key] {
		hs := slices.DeleteFunc(c.byMAC[m], func(h cachedHost) bool { return h.key == key })
		if len(hs) == 0 {
			delete(c.byMAC, m)
		} else {
			c.byMAC[m] = hs
		}
	}
	delete(c.macsOf, key)
}

func (c *hostCache) unsync() {
	c.mu.Lock()
	c.synced = false
	c.mu.Unlock()
}

// listWatcher is the store a Policy's caches follow.
type listWatcher interface {
	store.Reader
	store.Watcher
}

// Run keeps the Policy's in-memory views current until ctx ends: the DHCP
// view of every Hardware and every BootProfile, each a list, then a watch
// from its version; after a watch error, a fresh list. It needs a store
// that can also list and watch (the embedded store can). Without Run,
// Lookup reads the store on every call and Script lists the Hardware's
// namespace's profiles.
func (p *Policy) Run(ctx context.Context) error {
	src, ok := p.store.(listWatcher)
	if !ok {
		return errors.New("bootpolicy: the store cannot list and watch")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.keepFollowing(ctx, model.KindBootProfile, func(ctx context.Context) error { return p.followProfiles(ctx, src) }, p.profiles.unsync)
	}()
	p.keepFollowing(ctx, model.KindHardware, func(ctx context.Context) error { return p.follow(ctx, src) }, p.hosts.unsync)
	wg.Wait()
	return nil
}

// keepFollowing runs follow until ctx ends, marking the cache unsynced
// (unsync) whenever it is not being fed.
func (p *Policy) keepFollowing(ctx context.Context, kind string, follow func(context.Context) error, unsync func()) {
	defer unsync()
	for {
		err := follow(ctx)
		if ctx.Err() != nil {
			return
		}
		unsync()
		p.log.Warn("bootpolicy: "+kind+" watch ended; listing again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (p *Policy) follow(ctx context.Context, src listWatcher) error {
	objs, rv, err := src.List(ctx, model.KindHardware, store.ListOptions{})
	if err != nil {
		return err
	}
	ch, err := src.Watch(ctx, model.KindHardware, store.WatchOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	p.hosts.reset(p, objs)
	for ev := range ch {
		switch ev.Type {
		case store.Added, store.Modified:
			if hw, ok := ev.Object.(*model.Hardware); ok {
				p.hosts.set(p, hw)
			}
		case store.Deleted:
			if ev.Object != nil {
				p.hosts.remove(ev.Object.GetObjectMeta().Namespace + "/" + ev.Object.GetObjectMeta().Name)
			}
		case store.Error:
			return ev.Err
		}
	}
	return ctx.Err()
}
