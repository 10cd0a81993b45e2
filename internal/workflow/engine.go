package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/tmplbudget"
)

// Config configures an Engine.
type Config struct {
	Store store.Store
	// Clock is the engine's time source: timeouts, requeues, long polls
	// and every timestamp it writes. If nil, clock.Real.
	Clock  clock.Clock
	Logger *slog.Logger
	// MaxWait caps how long GetAction waits for work; 0 means 30s.
	MaxWait time.Duration
	// MaxConcurrentReports bounds the reports processed at once; the rest
	// wait their turn before reading anything. With thousands of agents
	// reporting together this keeps memory proportional to the bound, not
	// to the fleet, and the store's group commit still gets full batches.
	// 0 means DefaultMaxConcurrentReports.
	MaxConcurrentReports int
	// RenderBudget bounds each rendering of a workflow's Template. If
	// zero, uses Budget.
	RenderBudget tmplbudget.Budget
	// ISOURL, if set, is the URL of the server's own boot ISO for a
	// Hardware: an isoboot workflow without bootOptions.isoURL boots it.
	ISOURL func(*model.Hardware) string
	// MissingGrace is how long a workflow whose Template, Hardware or
	// worker's Hardware is not in the store yet is rendered again (every
	// errorRequeueDelay) before it fails, counted from the first miss this
	// engine saw. 0 fails it at the first miss, right for a store whose
	// reads are consistent across kinds (the embedded one). The Kubernetes
	// store watches each kind apart, so a Workflow can be seen before the
	// Template created just before it; and objects applied together by
	// kubectl or a GitOps tool arrive in any order.
	MissingGrace time.Duration
}

// DefaultMaxWait is the GetAction long-poll cap when Config.MaxWait is 0.
const DefaultMaxWait = 30 * time.Second

// DefaultMaxConcurrentReports is Config.MaxConcurrentReports when 0. It is
// also the largest group commit reports can make: with 10,000 agents
// reporting at once, 2,048 ran the fleet benchmark 17 % faster, at 20 %
// less server CPU per call, than 256 (fewer, larger fsynced commits). A
// report in flight holds only a copy of its workflow's status, so the
// bound costs a few MiB.
const DefaultMaxConcurrentReports = 2048

// reconcileWorkers is the size of the controller's worker pool.
const reconcileWorkers = 4

// maxConflictRetries bounds the re-read-and-retry loop on store.ErrConflict.
const maxConflictRetries = 50

// errorRequeueDelay is how long a reconcile that failed on a store error waits
// before it is tried again.
const errorRequeueDelay = time.Second

// Engine runs workflows: the controller (Run) renders new workflows, keeps one
// active workflow per hardware, toggles netboot and enforces deadlines; the
// agent API (GetAction, ReportActionStatus) hands out actions and records
// reports. Workflows are identified by "namespace/name".
type Engine struct {
	store store.Store
	// idx answers the engine's index lookups, which only read what they
	// get: with the store's shared objects when it has them
	// (store.SharedIndexer), so that no lookup copies a workflow.
	idx store.Indexer
	// shared, if not nil, is store's no-copy reads and writes
	// (store.Sharer). Objects from it, from the watch (WatchOptions.Shared)
	// and so from offer/take are immutable: whoever changes a workflow's
	// status changes a model.WithPrivateStatus copy.
	shared store.Sharer
	// live, if not nil, confirms a workflow read from store's cache
	// before one of its actions is handed out (store.LiveReader).
	live    store.LiveReader
	clock   clock.Clock
	log     *slog.Logger
	maxWait time.Duration
	// reportSlots is a semaphore bounding reports in progress.
	reportSlots chan struct{}
	budget      tmplbudget.Budget
	isoURL      func(*model.Hardware) string // Config.ISOURL

	queue *workQueue

	nmu     sync.Mutex
	waiters map[string]chan struct{} // per agent, closed on a relevant change

	tmu    sync.Mutex
	timers map[string]*deadlineTimer

	// cmu guards seen and latest: the newest version of each workflow the
	// controller has been given (by the watch, a list or a report), so a
	// re-list only queues what changed, and latest, objects not yet taken by
	// a reconcile, so a reconcile rarely has to read the store.
	cmu    sync.Mutex
	seen   map[string]seenWorkflow
	latest map[string]*model.Workflow

	wmu    sync.Mutex
	warned map[string]bool // see warnOnce

	// rmu guards rendering: the cancel function of each workflow's
	// template rendering in progress, so that deleting the workflow stops
	// it (a Template's rendering can take its whole time budget).
	rmu       sync.Mutex
	rendering map[string]context.CancelCauseFunc

	// mmu guards missingSince: when this engine first found each
	// workflow's referenced object missing (Config.MissingGrace).
	missingGrace time.Duration
	mmu          sync.Mutex
	missingSince map[string]time.Time
}

// retryLater is a reconcile to try again soon that is not a failure worth
// a warning (a referenced object not seen yet).
type retryLater struct{ err error }

func (r *retryLater) Error() string { return r.err.Error() }
func (r *retryLater) Unwrap() error { return r.err }

// errWorkflowDeleted cancels the rendering of a workflow that was deleted.
var errWorkflowDeleted = errors.New("the workflow was deleted")

type seenWorkflow struct {
	rv, hardwareRef string
}

type deadlineTimer struct {
	at time.Time
	t  clock.Timer
}

// New returns an Engine. GetAction and ReportActionStatus work without Run;
// rendering, waiting, netboot toggling and server-side timeouts need Run.
func New(cfg Config) *Engine {
	e := &Engine{
		store:   cfg.Store,
		idx:     store.SharedIndexer(cfg.Store),
		shared:  store.AsSharer(cfg.Store),
		live:    store.AsLiveReader(cfg.Store),
		clock:   clock.Or(cfg.Clock),
		log:     cfg.Logger,
		maxWait: cfg.MaxWait,
		budget:  cfg.RenderBudget,
		isoURL:  cfg.ISOURL,
		queue:   newWorkQueue(),
		waiters: map[string]chan struct{}{},
		timers:  map[string]*deadlineTimer{},
		seen:    map[string]seenWorkflow{},
		latest:  map[string]*model.Workflow{},
		warned:  map[string]bool{},

		rendering: map[string]context.CancelCauseFunc{},

		missingGrace: cfg.MissingGrace,
		missingSince: map[string]time.Time{},
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.maxWait <= 0 {
		e.maxWait = DefaultMaxWait
	}
	if e.budget == (tmplbudget.Budget{}) {
		e.budget = Budget
	}
	slots := cfg.MaxConcurrentReports
	if slots <= 0 {
		slots = DefaultMaxConcurrentReports
	}
	e.reportSlots = make(chan struct{}, slots)
	return e
}

// WorkflowID returns the ID of a workflow as used in NextAction and
// ActionReport: "namespace/name".
func WorkflowID(wf *model.Workflow) string { return wf.Namespace + "/" + wf.Name }

func splitKey(id string) (ns, name string, ok bool) {
	ns, name, ok = strings.Cut(id, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", false
	}
	return ns, name, true
}

// ---------------------------------------------------------------------------
// Controller

// Run is the controller. It lists and watches Workflows (re-listing when the
// watch ends or falls behind) and reconciles every changed workflow through a
// de-duplicating queue served by a small pool of workers; the same workflow is
// never reconciled twice at once. It returns when ctx ends (nil) or the store
// is closed.
func (e *Engine) Run(ctx context.Context) error {
	e.queue.reopen()
	var wg sync.WaitGroup
	for range reconcileWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, ok := e.queue.get()
				if !ok {
					return
				}
				if err := e.reconcile(ctx, key); err != nil && ctx.Err() == nil {
					if r := (*retryLater)(nil); errors.As(err, &r) {
						e.log.Debug("workflow: will render again", "workflow", key, "err", r.err)
					} else {
						e.log.Warn("workflow reconcile failed; will retry", "workflow", key, "err", err)
					}
					e.clock.AfterFunc(errorRequeueDelay, func() { e.queue.add(key) })
				}
				e.queue.done(key)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.watchJobs(ctx)
	}()
	err := e.watch(ctx)
	e.queue.shutdown()
	wg.Wait()
	e.tmu.Lock()
	for k, t := range e.timers {
		t.t.Stop()
		delete(e.timers, k)
	}
	e.tmu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// watch feeds the queue from a list and a watch, re-listing whenever the
// watch ends.
func (e *Engine) watch(ctx context.Context) error {
	for ctx.Err() == nil {
		objs, rv, err := e.store.List(ctx, model.KindWorkflow, store.ListOptions{})
		if err == nil {
			e.relisted(ctx, objs)
			var ch <-chan store.Event
			ch, err = e.store.Watch(ctx, model.KindWorkflow, store.WatchOptions{ResourceVersion: rv, Shared: true})
			if err == nil {
				for ev := range ch {
					if ev.Type == store.Error {
						e.log.Info("workflow watch ended; re-listing", "err", ev.Err)
						break
					}
					wf, ok := ev.Object.(*model.Workflow)
					if !ok {
						continue
					}
					if ev.Type == store.Deleted {
						e.cancelRendering(wf.Key())
						e.forgetMissing(wf.Key())
						e.forget(wf.Key())
						e.queue.add(wf.Key())
						e.notifyWorkflowAgents(wf)
						e.enqueueSiblings(ctx, wf)
						continue
					}
					if e.offer(wf) {
						e.queue.add(wf.Key())
					}
				}
				continue
			}
		}
		if errors.Is(err, store.ErrClosed) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, store.ErrGone) {
			e.log.Warn("workflow list/watch failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(errorRequeueDelay):
			}
		}
	}
	return nil
}

// newerRV reports whether resource version a is newer than b. Versions that
// are not decimal numbers are taken as newer (never skip a change).
func newerRV(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return a != b
	}
	return x > y
}

// offer records wf as the newest known version of its workflow; it reports
// whether it is newer than any seen before (and so worth a reconcile). wf
// becomes the engine's: the caller must not use it further.
func (e *Engine) offer(wf *model.Workflow) bool {
	key := wf.Key()
	e.cmu.Lock()
	defer e.cmu.Unlock()
	if old, ok := e.seen[key]; ok && !newerRV(wf.ResourceVersion, old.rv) {
		return false
	}
	e.seen[key] = seenWorkflow{rv: wf.ResourceVersion, hardwareRef: wf.Spec.HardwareRef}
	e.latest[key] = wf
	return true
}

// take returns (and forgets) the newest offered version of key, or nil.
func (e *Engine) take(key string) *model.Workflow {
	e.cmu.Lock()
	defer e.cmu.Unlock()
	wf := e.latest[key]
	delete(e.latest, key)
	return wf
}

func (e *Engine) forget(key string) {
	e.cmu.Lock()
	delete(e.seen, key)
	delete(e.latest, key)
	e.cmu.Unlock()
}

// relisted queues the listed workflows that changed since last seen, and
// the ones that disappeared (deleted while the watch was down).
func (e *Engine) relisted(ctx context.Context, objs []model.Object) {
	present := make(map[string]bool, len(objs))
	for _, o := range objs {
		wf := o.(*model.Workflow)
		present[wf.Key()] = true
		if e.offer(wf) {
			e.queue.add(wf.Key())
		}
	}
	var gone []seenWorkflow
	var goneKeys []string
	e.cmu.Lock()
	for k, s := range e.seen {
		if !present[k] {
			gone = append(gone, s)
			goneKeys = append(goneKeys, k)
		}
	}
	e.cmu.Unlock()
	for i, k := range goneKeys {
		e.cancelRendering(k)
		e.forget(k)
		e.queue.add(k)
		ns, name, _ := splitKey(k)
		e.enqueueSiblings(ctx, &model.Workflow{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
			Spec: model.WorkflowSpec{HardwareRef: gone[i].hardwareRef}})
	}
}

// reconcile brings one workflow forward, re-reading it on write conflicts.
func (e *Engine) reconcile(ctx context.Context, key string) error {
	ns, name, ok := splitKey(key)
	if !ok {
		return nil
	}
	wf := e.take(key)
	for attempt := 0; ; attempt++ {
		if wf == nil {
			obj, err := store.GetShared(ctx, e.store, model.KindWorkflow, ns, name)
			if errors.Is(err, store.ErrNotFound) {
				e.cancelTimer(key)
				return nil
			}
			if err != nil {
				return err
			}
			wf = obj.(*model.Workflow)
		}
		// wf may be shared (the store's, offered by the watch or a
		// report): reconcileOnce changes only the status, so only the
		// status is copied.
		err := e.reconcileOnce(ctx, model.WithPrivateStatus(wf))
		wf = nil
		if errors.Is(err, store.ErrConflict) && attempt < maxConflictRetries {
			continue
		}
		return err
	}
}

func (e *Engine) reconcileOnce(ctx context.Context, wf *model.Workflow) error {
	key := wf.Key()
	now := e.clock.Now()
	st := &wf.Status
	changed := false

	// (a) Render a new workflow.
	if st.State == "" {
		def, err := e.render(ctx, wf)
		if err != nil {
			if errors.Is(err, errWorkflowDeleted) {
				return nil // nothing left to record it on
			}
			var rerr *RenderError
			if !errors.As(err, &rerr) {
				return err // the store failed or the engine is stopping; try again later
			}
			if e.stillMissing(key, err, now) {
				return &retryLater{err}
			}
			RenderFailedStatus(st, err, now)
			e.log.Info("workflow template rendering failed", "workflow", key, "err", err)
		} else {
			e.forgetMissing(key)
			*st = InitialStatus(wf, def, now)
			if err := e.resolveWorkers(ctx, wf.Namespace, st); err != nil {
				return err
			}
		}
		changed = true
	}

	// (d) Deadlines.
	if c, _ := CheckDeadlines(st, now); c {
		changed = true
	}

	final := st.State.IsFinal()
	disabled := model.BoolValue(wf.Spec.Disabled, false)

	// (b) One active workflow per hardware.
	waitingFor := ""
	if !final && !disabled && wf.Spec.HardwareRef != "" {
		var err error
		if waitingFor, err = e.activeSibling(ctx, wf); err != nil {
			return err
		}
	}
	if !final {
		if waitingFor != "" {
			msg := fmt.Sprintf("waiting for workflow %s to finish on hardware %s", waitingFor, wf.Spec.HardwareRef)
			if SetCondition(st, model.Condition{Type: ConditionWaiting, Status: "True", Reason: "HardwareBusy",
				Message: msg, Time: &now}) {
				AddHistory(st, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: st.State, Message: msg})
				changed = true
			}
		} else if !disabled && RemoveCondition(st, ConditionWaiting) {
			AddHistory(st, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: st.State,
				Message: "no longer waiting: this workflow is now active on its hardware"})
			changed = true
		}
	}

	// (e) bootMode netboot through the BMC, once this workflow is the
	// active one on its hardware: another's machine is not powered off.
	if !final && !disabled && waitingFor == "" && (wantsBMCNetboot(wf) || wantsISOBoot(wf) || customboot(wf) != nil) {
		job := e.netbootJob
		switch {
		case wantsISOBoot(wf):
			job = e.isoMountJob
		case customboot(wf) != nil:
			job = e.custombootPreparingJob
		}
		c, err := job(ctx, wf, now)
		if err != nil {
			return err
		}
		if c {
			changed = true
			final = st.State.IsFinal()
		}
	}
	// (f) isoboot: the CD comes out once the workflow has succeeded;
	// customboot: its post actions run.
	if st.State == model.StateSuccess && (wantsISOBoot(wf) || customboot(wf) != nil) {
		job := e.isoEjectJob
		if customboot(wf) != nil {
			job = e.custombootPostJob
		}
		c, err := job(ctx, wf, now)
		if err != nil {
			return err
		}
		if c {
			changed = true
			final = st.State.IsFinal()
		}
	}

	// (c) toggleAllowNetboot.
	if wf.Spec.BootOptions != nil && wf.Spec.BootOptions.ToggleAllowNetboot && wf.Spec.HardwareRef != "" {
		c := FindCondition(st, ConditionAllowNetboot)
		switch {
		case !final && !disabled && waitingFor == "" && c == nil:
			if e.toggleNetboot(ctx, wf, true, now) {
				changed = true
			}
		case st.State == model.StateSuccess && (c == nil || c.Status == "True"):
			if e.toggleNetboot(ctx, wf, false, now) {
				changed = true
			}
		}
	}

	if changed {
		obj, err := e.update(ctx, wf)
		if err != nil {
			return err
		}
		wf = obj.(*model.Workflow)
	}
	e.schedule(key, NextDeadline(&wf.Status))
	if wf.Status.State.IsFinal() || disabled {
		e.enqueueSiblings(ctx, wf)
	}
	e.notifyWorkflowAgents(wf)
	return nil
}

func (e *Engine) render(ctx context.Context, wf *model.Workflow) (*model.WorkflowDefinition, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	key := wf.Key()
	e.rmu.Lock()
	e.rendering[key] = cancel
	e.rmu.Unlock()
	defer func() {
		e.rmu.Lock()
		delete(e.rendering, key)
		e.rmu.Unlock()
	}()
	def, err := renderStored(rctx, e.store, e.budget, wf)
	if err != nil && rctx.Err() != nil {
		// Stopped from outside (deleted, or the engine is stopping), not
		// the template's fault: nothing to record.
		return nil, fmt.Errorf("rendering workflow %s: %w", key, context.Cause(rctx))
	}
	return def, err
}

// cancelRendering stops the rendering of workflow key, if one is running.
func (e *Engine) cancelRendering(key string) {
	e.rmu.Lock()
	cancel := e.rendering[key]
	e.rmu.Unlock()
	if cancel != nil {
		cancel(errWorkflowDeleted)
	}
}

// activeSibling returns the name of the workflow wf waits for, or "" when wf
// is the active one on its hardware (model.ActiveWorkflow, which the boot
// policy asks too) among the workflows of wf's namespace on wf's hardware,
// wf itself as given, not as stored.
func (e *Engine) activeSibling(ctx context.Context, wf *model.Workflow) (string, error) {
	objs, err := e.idx.ByIndex(ctx, model.KindWorkflow, store.IndexHardwareRef, wf.Spec.HardwareRef)
	if err != nil {
		return "", err
	}
	ws := []*model.Workflow{wf}
	for _, o := range objs {
		w := o.(*model.Workflow)
		if w.Namespace == wf.Namespace && w.Name != wf.Name {
			ws = append(ws, w)
		}
	}
	if a := model.ActiveWorkflow(ws); a != nil && a.Name != wf.Name {
		return a.Name, nil
	}
	return "", nil
}

// enqueueSiblings queues the unfinished workflows on wf's hardware, so that
// the next one becomes active when wf ends, is disabled or is deleted.
func (e *Engine) enqueueSiblings(ctx context.Context, wf *model.Workflow) {
	if wf.Spec.HardwareRef == "" {
		return
	}
	objs, err := e.idx.ByIndex(ctx, model.KindWorkflow, store.IndexHardwareRef, wf.Spec.HardwareRef)
	if err != nil {
		return
	}
	for _, o := range objs {
		w := o.(*model.Workflow)
		if w.Namespace == wf.Namespace && w.Name != wf.Name && !w.Status.State.IsFinal() {
			e.queue.add(w.Key())
		}
	}
}

// toggleNetboot sets allowPXE on every interface of the workflow's hardware
// (only where it differs) and records it on the workflow. It reports whether
// the workflow's status changed.
func (e *Engine) toggleNetboot(ctx context.Context, wf *model.Workflow, allow bool, now time.Time) bool {
	n, err := e.setAllowPXE(ctx, wf.Namespace, wf.Spec.HardwareRef, allow)
	status, reason := "True", "WorkflowStarted"
	if !allow {
		status, reason = "False", "WorkflowSucceeded"
	}
	msg := fmt.Sprintf("toggleAllowNetboot: allowPXE set to %t on hardware %s (%d interface(s) changed)", allow, wf.Spec.HardwareRef, n)
	if err != nil {
		msg = fmt.Sprintf("toggleAllowNetboot: could not set allowPXE to %t on hardware %s: %v", allow, wf.Spec.HardwareRef, err)
		e.log.Warn("toggleAllowNetboot failed", "workflow", wf.Key(), "err", err)
	}
	SetCondition(&wf.Status, model.Condition{Type: ConditionAllowNetboot, Status: status, Reason: reason, Message: msg, Time: &now})
	AddHistory(&wf.Status, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: wf.Status.State, Message: msg})
	return true
}

func (e *Engine) setAllowPXE(ctx context.Context, ns, name string, allow bool) (int, error) {
	for attempt := 0; ; attempt++ {
		obj, err := e.store.Get(ctx, model.KindHardware, ns, name)
		if err != nil {
			return 0, err
		}
		hw := obj.(*model.Hardware)
		n := 0
		for i := range hw.Spec.Interfaces {
			ifc := &hw.Spec.Interfaces[i]
			if ifc.Netboot == nil {
				ifc.Netboot = &model.Netboot{}
			}
			if ifc.Netboot.AllowPXE == nil || *ifc.Netboot.AllowPXE != allow {
				ifc.Netboot.AllowPXE = model.Bool(allow)
				n++
			}
		}
		if n == 0 {
			return 0, nil
		}
		_, err = e.store.Update(ctx, hw)
		if errors.Is(err, store.ErrConflict) && attempt < maxConflictRetries {
			continue
		}
		return n, err
	}
}

// schedule arranges for key to be reconciled at `at` (zero: never).
func (e *Engine) schedule(key string, at time.Time) {
	e.tmu.Lock()
	defer e.tmu.Unlock()
	old := e.timers[key]
	if at.IsZero() {
		if old != nil {
			old.t.Stop()
			delete(e.timers, key)
		}
		return
	}
	if old != nil {
		if old.at.Equal(at) {
			return
		}
		old.t.Stop()
	}
	d := at.Sub(e.clock.Now())
	if d < 0 {
		d = 0
	}
	dt := &deadlineTimer{at: at}
	e.timers[key] = dt
	dt.t = e.clock.AfterFunc(d, func() {
		e.tmu.Lock()
		if e.timers[key] == dt {
			delete(e.timers, key)
		}
		e.tmu.Unlock()
		e.queue.add(key)
	})
}

func (e *Engine) cancelTimer(key string) { e.schedule(key, time.Time{}) }

// ---------------------------------------------------------------------------
// Agent notifications

// waitChan returns a channel closed at the next change relevant to agent.
func (e *Engine) waitChan(agent string) <-chan struct{} {
	e.nmu.Lock()
	defer e.nmu.Unlock()
	ch := e.waiters[agent]
	if ch == nil {
		ch = make(chan struct{})
		e.waiters[agent] = ch
	}
	return ch
}

func (e *Engine) notify(agent string) {
	e.nmu.Lock()
	if ch := e.waiters[agent]; ch != nil {
		close(ch)
		delete(e.waiters, agent)
	}
	e.nmu.Unlock()
}

func (e *Engine) notifyWorkflowAgents(wf *model.Workflow) {
	for i := range wf.Status.Tasks {
		if a := wf.Status.Tasks[i].AgentID; a != "" && (i == 0 || a != wf.Status.Tasks[i-1].AgentID) {
			e.notify(a)
		}
	}
}

// ---------------------------------------------------------------------------
// Agent API

// resolveWorkers records each task of a freshly rendered status under the
// agent ID of the machine its worker names (ResolveAgent within ns), so
// that a worker given as a MAC reaches an agent that reports as its
// Hardware's spec.agentID, and the other way round.
func (e *Engine) resolveWorkers(ctx context.Context, ns string, st *model.WorkflowStatus) error {
	for i := range st.Tasks {
		t := &st.Tasks[i]
		id, err := ResolveAgent(ctx, e.idx, ns, ParseAgentName(t.AgentID))
		if err != nil {
			return err
		}
		if id != t.AgentID {
			e.log.Debug("workflow: task's worker is a machine known by another agent ID", "namespace", ns,
				"task", t.Name, "worker", t.AgentID, "agent", id)
			t.AgentID = id
		}
	}
	return nil
}

// stillMissing reports whether a render that failed with err should be
// tried again instead of failing the workflow: err is a referenced object
// missing, and MissingGrace has not passed since this engine first saw
// it missing.
func (e *Engine) stillMissing(key string, err error, now time.Time) bool {
	var we WorkerErrors
	if e.missingGrace <= 0 || (!errors.Is(err, errMissing) && !errors.As(err, &we)) {
		return false
	}
	e.mmu.Lock()
	defer e.mmu.Unlock()
	since, ok := e.missingSince[key]
	if !ok {
		e.missingSince[key], since = now, now
	}
	if now.Sub(since) < e.missingGrace {
		return true
	}
	delete(e.missingSince, key)
	return false
}

func (e *Engine) forgetMissing(key string) {
	e.mmu.Lock()
	delete(e.missingSince, key)
	e.mmu.Unlock()
}

// GetAction returns the next action for agentID (any of its machine's
// names: see ResolveAgent). If there is none now, it waits up to min(wait,
// MaxWait) for a change to a workflow of this agent and looks again;
// ErrNoAction when the wait ends with nothing to run.
func (e *Engine) GetAction(ctx context.Context, agentID string, wait time.Duration) (*NextAction, error) {
	return e.GetActionFor(ctx, ParseAgentName(agentID), wait)
}

// GetActionFor is GetAction for a name read where the call arrived.
func (e *Engine) GetActionFor(ctx context.Context, name AgentName, wait time.Duration) (*NextAction, error) {
	if wait > e.maxWait {
		wait = e.maxWait
	}
	agentID, err := ResolveAgent(ctx, e.idx, "", name)
	if err != nil {
		return nil, err
	}
	var expired chan struct{}
	for {
		ch := e.waitChan(agentID) // before looking, so no change is missed
		na, err := e.nextAction(ctx, agentID)
		if err != nil || na != nil {
			return na, err
		}
		if wait <= 0 {
			return nil, ErrNoAction
		}
		if expired == nil {
			expired = make(chan struct{})
			t := e.clock.AfterFunc(wait, func() { close(expired) })
			defer t.Stop()
		}
		select {
		case <-ch:
		case <-expired:
			return nil, ErrNoAction
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// nextAction looks once, through the agent index.
func (e *Engine) nextAction(ctx context.Context, agentID string) (*NextAction, error) {
	objs, err := e.idx.ByIndex(ctx, model.KindWorkflow, store.IndexAgentID, agentID)
	if err != nil {
		return nil, err
	}
	var cands []*model.Workflow
	for _, o := range objs {
		w := o.(*model.Workflow) // shared: read only
		if w.Status.CancelRequested != nil {
			// Asking for work, the agent is not running the action the
			// cancellation waits for, if that is its: end it now.
			// (Asked of a copy: cancelInterrupted makes the change.)
			if st := w.Status.DeepCopy(); CancelInterrupted(&st, agentID, e.clock.Now()) {
				if err := e.cancelInterrupted(ctx, w.Namespace, w.Name, agentID); err != nil {
					return nil, err
				}
			}
			continue
		}
		switch w.Status.State {
		case model.StatePending, model.StateRunning:
		default:
			continue
		}
		if model.BoolValue(w.Spec.Disabled, false) || FindCondition(&w.Status, ConditionWaiting) != nil || NetbootJobPending(&w.Status) {
			continue
		}
		cands = append(cands, w)
	}
	if cands, err = e.ownWorkflows(ctx, agentID, cands); err != nil {
		return nil, err
	}
	if len(cands) > 1 {
		slices.SortFunc(cands, model.CompareActive)
	}
	now := e.clock.Now()
	for _, w := range cands {
		if na := NextActionFor(&w.Status, WorkflowID(w), agentID, now); na != nil {
			if fresh, err := e.confirm(ctx, w); err != nil || !fresh {
				return nil, err
			}
			return na, nil
		}
	}
	return nil, nil
}

// confirm reports whether w, as read from the store's cache, is still the
// stored version: with a store whose cache can lag (Kubernetes mode), the
// action this replica is about to hand out may have been reported done
// through another replica a moment ago, and the agent that reported it,
// having moved here, would run it again. When the cache is behind it
// answers false: nothing now; its watch brings the newer version within
// moments and wakes the waiting GetAction, which looks again. Without
// such a store (the embedded one) every read is current.
func (e *Engine) confirm(ctx context.Context, w *model.Workflow) (bool, error) {
	if e.live == nil {
		return true, nil
	}
	rv, err := e.live.StoredVersion(ctx, model.KindWorkflow, w.Namespace, w.Name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil // deleted meanwhile
	}
	if err != nil {
		return false, err
	}
	if rv != w.ResourceVersion {
		staleHandout.Inc()
		e.log.Debug("workflow: cache behind the store; not handing out an action from it", "workflow", w.Key(),
			"cached", w.ResourceVersion, "stored", rv)
		return false, nil
	}
	return true, nil
}

// ownWorkflows keeps the workflows of namespaces that have a Hardware
// agentID runs on. The others name a machine that is not theirs (rendered
// before admission checked workers, or the Hardware moved since): they get
// nothing, and are logged and counted, so that neither the machine nor
// its own organisation's workflows are captured.
func (e *Engine) ownWorkflows(ctx context.Context, agentID string, cands []*model.Workflow) ([]*model.Workflow, error) {
	if len(cands) == 0 {
		return cands, nil
	}
	nss, err := workerNamespaces(ctx, e.idx, agentID)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(cands, func(w *model.Workflow) bool {
		if nss[w.Namespace] {
			return false
		}
		foreignWorker.Inc()
		if e.warnOnce(w.Key() + "@" + w.ResourceVersion + " " + agentID) {
			e.log.Warn("workflow: not handing out an action to an agent of no Hardware in the workflow's namespace",
				"workflow", w.Key(), "agent", agentID)
		}
		return true
	}), nil
}

// maxWarned bounds the warnings warnOnce remembers; past it, it forgets
// them all (and may warn again), never grows.
const maxWarned = 1000

// warnOnce reports whether key has not been warned about yet, and
// remembers it: an agent polling every few seconds must not repeat the
// same warning each time.
func (e *Engine) warnOnce(key string) bool {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if e.warned[key] {
		return false
	}
	if len(e.warned) >= maxWarned {
		clear(e.warned)
	}
	e.warned[key] = true
	return true
}

// ReportActionStatus records an agent's report and returns the workflow's
// state after it. It returns only once the change is durable in the store.
// Errors: ErrUnknownWorkflow, ErrBadReport (wrapped with the reason), or the
// store's.
func (e *Engine) ReportActionStatus(ctx context.Context, r ActionReport) (model.State, error) {
	ns, name, ok := splitKey(r.WorkflowID)
	if !ok {
		return "", fmt.Errorf("%w: %q (want namespace/name)", ErrUnknownWorkflow, r.WorkflowID)
	}
	agent := r.Agent
	if agent.ID == "" {
		agent = ParseAgentName(r.AgentID)
	}
	agentID, err := ResolveAgent(ctx, e.idx, ns, agent)
	if err != nil {
		return "", err
	}
	r.AgentID = agentID
	select {
	case e.reportSlots <- struct{}{}:
		defer func() { <-e.reportSlots }()
	case <-ctx.Done():
		return "", ctx.Err()
	}
	for attempt := 0; ; attempt++ {
		obj, err := store.GetShared(ctx, e.store, model.KindWorkflow, ns, name)
		if errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("%w: %s", ErrUnknownWorkflow, r.WorkflowID)
		}
		if err != nil {
			return "", err
		}
		// Copy-on-write: the report changes the status only.
		wf := model.WithPrivateStatus(obj.(*model.Workflow))
		if c := FindCondition(&wf.Status, ConditionWaiting); c != nil && !wf.Status.State.IsFinal() {
			return wf.Status.State, fmt.Errorf("%w: %s", ErrBadReport, c.Message)
		}
		changed, err := ApplyReport(&wf.Status, r, e.clock.Now())
		if err != nil {
			return wf.Status.State, err
		}
		if !changed {
			return wf.Status.State, nil
		}
		obj, err = e.update(ctx, wf)
		if errors.Is(err, store.ErrConflict) && attempt < maxConflictRetries {
			continue
		}
		if err != nil {
			return "", err
		}
		wf = obj.(*model.Workflow)
		state := wf.Status.State
		e.notifyWorkflowAgents(wf)
		if e.offer(wf) {
			e.queue.add(wf.Key())
		}
		return state, nil
	}
}

// update writes obj, handing it to the store when it can take it without
// a copy (store.Sharer.UpdateShared): obj must be the caller's own (its
// status private; metadata and spec at most shared with a stored version)
// and is not to be used after. The result is shared: read only.
func (e *Engine) update(ctx context.Context, obj model.Object) (model.Object, error) {
	if e.shared != nil {
		return e.shared.UpdateShared(ctx, obj)
	}
	return e.store.Update(ctx, obj)
}

// CancelOptions says how Cancel stops a workflow.
type CancelOptions struct {
	// Force ends a workflow with a running action at once, without waiting
	// for the action's end (see the Cancel function).
	Force bool
	// Reason is recorded in the workflow's history, if not empty.
	Reason string
}

// Cancel cancels the workflow (id "namespace/name") as the Cancel function
// describes, durably, and returns it as stored. The agents of the workflow
// waiting in GetAction are woken. Errors: ErrUnknownWorkflow, ErrEnded, or
// the store's.
func (e *Engine) Cancel(ctx context.Context, workflowID string, opts CancelOptions) (*model.Workflow, error) {
	ns, name, ok := splitKey(workflowID)
	if !ok {
		return nil, fmt.Errorf("%w: %q (want namespace/name)", ErrUnknownWorkflow, workflowID)
	}
	return e.updateStatus(ctx, ns, name, func(wf *model.Workflow) (bool, error) {
		return Cancel(&wf.Status, e.clock.Now(), opts.Force, opts.Reason)
	})
}

// cancelInterrupted applies CancelInterrupted to a workflow for agentID,
// durably.
func (e *Engine) cancelInterrupted(ctx context.Context, ns, name, agentID string) error {
	_, err := e.updateStatus(ctx, ns, name, func(wf *model.Workflow) (bool, error) {
		return CancelInterrupted(&wf.Status, agentID, e.clock.Now()), nil
	})
	if errors.Is(err, ErrUnknownWorkflow) {
		return nil // deleted meanwhile: nothing to end
	}
	return err
}

// updateStatus reads a workflow, lets change modify it and, if it reports a
// change, writes it back, re-reading on conflict. The written workflow is
// offered to the controller and its agents are woken. It returns the
// workflow as stored.
func (e *Engine) updateStatus(ctx context.Context, ns, name string, change func(*model.Workflow) (bool, error)) (*model.Workflow, error) {
	for attempt := 0; ; attempt++ {
		obj, err := e.store.Get(ctx, model.KindWorkflow, ns, name)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s/%s", ErrUnknownWorkflow, ns, name)
		}
		if err != nil {
			return nil, err
		}
		wf := obj.(*model.Workflow)
		changed, err := change(wf)
		if err != nil || !changed {
			return wf, err
		}
		obj, err = e.store.Update(ctx, wf)
		if errors.Is(err, store.ErrConflict) && attempt < maxConflictRetries {
			continue
		}
		if err != nil {
			return nil, err
		}
		wf = obj.(*model.Workflow)
		e.notifyWorkflowAgents(wf)
		out := model.DeepCopy(wf) // offer hands wf to the controller
		if e.offer(wf) {
			e.queue.add(wf.Key())
		}
		return out, nil
	}
}

// ---------------------------------------------------------------------------
// Work queue

// workQueue is a de-duplicating FIFO of keys: a key is queued at most once,
// and a key added while it is being processed is queued again when done.
type workQueue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	items      []string
	queued     map[string]bool
	processing map[string]bool
	dirty      map[string]bool
	closed     bool
}

func newWorkQueue() *workQueue {
	q := &workQueue{queued: map[string]bool{}, processing: map[string]bool{}, dirty: map[string]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *workQueue) add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queued[key] {
		return
	}
	if q.processing[key] {
		q.dirty[key] = true
		return
	}
	q.queued[key] = true
	q.items = append(q.items, key)
	q.cond.Signal()
}

func (q *workQueue) get() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	key := q.items[0]
	q.items[0] = ""
	q.items = q.items[1:]
	delete(q.queued, key)
	q.processing[key] = true
	return key, true
}

func (q *workQueue) done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		delete(q.dirty, key)
		if !q.queued[key] {
			q.queued[key] = true
			q.items = append(q.items, key)
			q.cond.Signal()
		}
	}
}

func (q *workQueue) shutdown() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *workQueue) reopen() {
	q.mu.Lock()
	q.closed = false
	q.mu.Unlock()
}

// Len returns how many keys wait in the queue (for tests and metrics).
func (q *workQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// followRetry is how long Follow waits before watching again after the
// store refused a watch.
const followRetry = time.Second

// Follow wakes this replica's waiting GetAction calls on every change to
// a workflow, whichever replica made it, until ctx ends. Run does this
// too (from its own watch); Follow is for the replicas that serve agents
// without running the engine — Kubernetes mode's followers, where only
// the leader reconciles — so that an agent long-polling any replica hears
// of its next action as soon as the leader has rendered it.
func (e *Engine) Follow(ctx context.Context) error {
	for ctx.Err() == nil {
		ch, err := e.store.Watch(ctx, model.KindWorkflow, store.WatchOptions{Shared: true})
		if err != nil {
			e.log.Warn("workflow watch for waiting agents failed; retrying", "err", err, "in", followRetry)
			select {
			case <-e.clock.After(followRetry):
			case <-ctx.Done():
			}
			continue
		}
		for ev := range ch {
			if wf, ok := ev.Object.(*model.Workflow); ok {
				e.notifyWorkflowAgents(wf)
			}
		}
	}
	return nil
}
