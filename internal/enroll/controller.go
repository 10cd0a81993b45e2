package enroll

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// DefaultRetryInterval is how long Run waits before watching again after
// a watch or a pass failed.
const DefaultRetryInterval = 5 * time.Second

// Controller enrols discovered machines as they become due: it runs a
// full Pass when it starts and whenever a WorkflowRuleSet or a Template
// changes (a new rule may match machines that waited, a Template that was
// missing or did not render may now), and enrols one Hardware when a
// discovered Hardware is added or changed (its agent reported
// attributes). Work is done in one goroutine, an event at a time, so a
// storm of discoveries costs a bounded amount of memory and one store
// write at a time.
type Controller struct {
	e     *Enroller
	clock clock.Clock
	retry time.Duration
}

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	Config
	// Clock times the retries. If nil, the real clock.
	Clock clock.Clock
	// RetryInterval: if 0, DefaultRetryInterval.
	RetryInterval time.Duration
}

// NewController returns a Controller; Run starts it.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	return &Controller{e: New(cfg.Config), clock: clock.Or(cfg.Clock), retry: cfg.RetryInterval}
}

// Enroller returns the controller's Enroller (for a pass on demand).
func (c *Controller) Enroller() *Enroller { return c.e }

// Run enrols until ctx ends, watching again after a failure. It returns
// nil when ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	for {
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.e.log.Warn("enrolment controller: watching again", "err", err, "in", c.retry)
		select {
		case <-ctx.Done():
			return nil
		case <-c.clock.After(c.retry):
		}
	}
}

// follow watches rule sets, Templates and discovered Hardware from now, runs a full
// pass, then acts on each change until a watch ends.
func (c *Controller) follow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := c.e.cfg.Store
	_, rv, err := st.List(ctx, model.KindWorkflowRuleSet, store.ListOptions{})
	if err != nil {
		return err
	}
	sets, err := st.Watch(ctx, model.KindWorkflowRuleSet, store.WatchOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	_, rv, err = st.List(ctx, model.KindTemplate, store.ListOptions{})
	if err != nil {
		return err
	}
	tpls, err := st.Watch(ctx, model.KindTemplate, store.WatchOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	_, rv, err = st.List(ctx, model.KindHardware, store.ListOptions{Labels: discovered})
	if err != nil {
		return err
	}
	hws, err := st.Watch(ctx, model.KindHardware, store.WatchOptions{Labels: discovered, ResourceVersion: rv})
	if err != nil {
		return err
	}
	// With commissioning, a deleted commissioning workflow (to
	// re-commission its machine) is followed by a new one: watch
	// workflows then, and only then (their status changes are many).
	var wfs <-chan store.Event
	if c.e.cfg.CommissionTemplate != "" {
		_, rv, err = st.List(ctx, model.KindWorkflow, store.ListOptions{})
		if err != nil {
			return err
		}
		if wfs, err = st.Watch(ctx, model.KindWorkflow, store.WatchOptions{ResourceVersion: rv}); err != nil {
			return err
		}
	}
	// Changes from here on arrive on the watches; the pass sees at least
	// everything before them.
	if err := c.pass(ctx); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-sets:
			if !ok {
				return errors.New("workflow rule set watch closed")
			}
			if ev.Type == store.Error {
				return ev.Err
			}
			if ev.Type == store.Added || ev.Type == store.Modified {
				if err := c.pass(ctx); err != nil {
					return err
				}
			}
		case ev, ok := <-tpls:
			// A Template a rule names may have been missing, or not
			// rendered for a machine: try the machines that wait.
			if !ok {
				return errors.New("template watch closed")
			}
			if ev.Type == store.Error {
				return ev.Err
			}
			if ev.Type == store.Added || ev.Type == store.Modified {
				if err := c.pass(ctx); err != nil {
					return err
				}
			}
		case ev, ok := <-hws:
			if !ok {
				return errors.New("hardware watch closed")
			}
			if ev.Type == store.Error {
				return ev.Err
			}
			hw, isHW := ev.Object.(*model.Hardware)
			if !isHW || ev.Type == store.Deleted || !due(hw) {
				continue
			}
			if _, err := c.e.One(ctx, hw); err != nil {
				return fmt.Errorf("enrol hardware %s: %w", hw.Key(), err)
			}
		case ev, ok := <-wfs:
			if !ok {
				return errors.New("workflow watch closed")
			}
			if ev.Type == store.Error {
				return ev.Err
			}
			if err := c.commissionDeleted(ctx, ev); err != nil {
				return err
			}
		}
	}
}

// commissionDeleted considers again the machine whose commissioning
// workflow ev deleted, so that it gets a new one (a re-commissioning).
func (c *Controller) commissionDeleted(ctx context.Context, ev store.Event) error {
	wf, ok := ev.Object.(*model.Workflow)
	if !ok || ev.Type != store.Deleted || wf.Spec.HardwareRef == "" {
		return nil
	}
	obj, err := c.e.cfg.Store.Get(ctx, model.KindHardware, wf.Namespace, wf.Spec.HardwareRef)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	hw := obj.(*model.Hardware)
	if wf.Name != CommissionWorkflowName(hw) || hw.Labels[model.LabelDiscovered] != "true" || !due(hw) {
		return nil
	}
	if _, err := c.e.One(ctx, hw); err != nil {
		return fmt.Errorf("commission hardware %s: %w", hw.Key(), err)
	}
	return nil
}

// due reports whether hw may need enrolling, before any store read: it
// has attributes and no rule enrolled it.
func due(hw *model.Hardware) bool {
	return hw.Status.Attributes != nil && hw.Annotations[model.AnnotationEnrolledBy] == ""
}

func (c *Controller) pass(ctx context.Context) error {
	_, err := c.e.Pass(ctx, "", false)
	return err
}
