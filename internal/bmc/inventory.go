package bmc

import (
	"context"
	"errors"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// inventoryTargets returns the Hardware of m's namespace whose
// spec.bmcRef names m: where its inventory goes.
func (p *Poller) inventoryTargets(ctx context.Context, m *model.Machine) ([]*model.Hardware, error) {
	objs, _, err := p.e.cfg.Store.List(ctx, model.KindHardware, store.ListOptions{Namespace: m.Namespace})
	if err != nil {
		return nil, err
	}
	var out []*model.Hardware
	for _, o := range objs {
		h := o.(*model.Hardware)
		if h.Spec.BMCRef != nil && h.Spec.BMCRef.Name == m.Name {
			out = append(out, h)
		}
	}
	return out, nil
}

// recordInventory writes inv as status.attributes.outOfBand of each
// Hardware in hws (afresh, on a conflict again), leaving the rest of the
// attributes (the agent's) alone, and only where it says something new:
// an unchanged inventory writes nothing, and keeps the readAt of the read
// that first found it. It reports whether every write went through (a
// Hardware deleted meanwhile counts as done).
func (p *Poller) recordInventory(ctx context.Context, m *model.Machine, hws []*model.Hardware, inv *model.OutOfBand) bool {
	ok := true
	for _, h := range hws {
		err := retryConflict(func() error {
			o, err := p.e.cfg.Store.Get(ctx, model.KindHardware, h.Namespace, h.Name)
			if err != nil {
				return err
			}
			cur := o.(*model.Hardware)
			if cur.Spec.BMCRef == nil || cur.Spec.BMCRef.Name != m.Name {
				return nil // pointed elsewhere meanwhile
			}
			if a := cur.Status.Attributes; a != nil && a.OutOfBand.SameContent(inv) {
				return nil
			}
			if cur.Status.Attributes == nil {
				cur.Status.Attributes = &model.Attributes{}
			}
			cur.Status.Attributes.OutOfBand = inv
			if diffs := cur.Status.Attributes.IdentityMismatch(); len(diffs) > 0 {
				p.e.log.Warn("bmc poll: the BMC describes another machine than the agent did: is spec.bmcRef right?",
					"hardware", cur.Key(), "machine", m.Key(), "differences", diffs)
			}
			_, err = p.e.cfg.Store.Update(ctx, cur)
			return err
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			ok = false
			if ctx.Err() == nil {
				p.e.log.Warn("bmc poll: cannot record the machine's inventory", "hardware", h.Key(), "machine", m.Key(), "err", err)
			}
		}
	}
	return ok
}
