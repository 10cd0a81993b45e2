package bmc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Defaults of PollConfig.
const (
	// DefaultPowerPollInterval is how often a Machine's power state is
	// read when its BMC answers. Rufio reads every 3 minutes; BMCs are
	// fragile and a power state rarely changes behind the operator's
	// back, so a little less often.
	DefaultPowerPollInterval = 5 * time.Minute
	// DefaultPollConcurrency bounds the BMC sessions polls hold at once.
	DefaultPollConcurrency = 32
	// DefaultPollTimeout bounds one poll: opening the session (IPMI
	// tries two cipher suites, each request resent twice after 2 s) and
	// reading the power state. Closing is bounded apart (closeTimeout).
	DefaultPollTimeout = 30 * time.Second
	// DefaultPollBackoff is the wait before the first retry after a
	// failed poll (or the interval, when shorter); each further failure
	// doubles it, up to PollConfig.MaxBackoff.
	DefaultPollBackoff = 30 * time.Second
	// DefaultPollJitter spreads every wait by up to ±10%, so that the
	// Machines applied together are not all polled in the same second
	// forever after.
	DefaultPollJitter = 0.1
	// DefaultInventoryInterval is how often a machine's inventory is
	// read from its BMC (besides at the first contact, when the
	// Machine's spec changes, and when asked by ReadInventoryAnnotation).
	// Hardware changes when someone opens the case, rarely; an
	// inventory is a few dozen requests a BMC answers slowly, under the
	// lock Jobs wait for. Once a day finds a swapped disk the same day.
	DefaultInventoryInterval = 24 * time.Hour
	// DefaultInventoryTimeout bounds reading one inventory: up to a few
	// hundred requests (the caps of model.OutOfBand), each a fraction of
	// a second on a BMC that answers.
	DefaultInventoryTimeout = 2 * time.Minute
)

// ReadInventoryAnnotation on a Machine asks the Poller to read the
// machine's inventory at once: each new value is one read (the value is
// anything, e.g. the date). Rufio has no such request; this is Anvil's,
// as cheap as `anvil apply` of the annotated Machine.
const ReadInventoryAnnotation = "bmc.anvil.dev/read-inventory"

// PollConfig configures a Poller.
type PollConfig struct {
	// Interval is the time between two polls of a Machine whose BMC
	// answered. If 0, uses DefaultPowerPollInterval.
	Interval time.Duration
	// Concurrency bounds the polls (BMC sessions) at once. If 0, uses
	// DefaultPollConcurrency.
	Concurrency int
	// Timeout bounds one poll. If 0, uses DefaultPollTimeout.
	Timeout time.Duration
	// Backoff is the wait after a first failure; it doubles with each
	// further one. If 0, uses the smaller of DefaultPollBackoff and
	// Interval.
	Backoff time.Duration
	// MaxBackoff caps the wait after failures. If 0, uses 8 × Interval:
	// a dead BMC is still tried a few times an hour at the default, and
	// found again soon enough once it is back.
	MaxBackoff time.Duration
	// BusyRetry is the wait when a Job holds the BMC (the Job writes the
	// power state itself). If 0, uses the smaller of 10 s and Interval.
	BusyRetry time.Duration
	// Jitter is the fraction by which every wait is spread, up or down.
	// If 0, uses DefaultPollJitter; negative means none.
	Jitter float64
	// InventoryInterval is the time between two reads of a machine's
	// inventory (InventorySession). If 0, uses DefaultInventoryInterval;
	// negative: never read.
	InventoryInterval time.Duration
	// InventoryTimeout bounds one inventory read. If 0, uses
	// DefaultInventoryTimeout.
	InventoryTimeout time.Duration
	// Clock schedules polls and stamps conditions. If nil, uses the
	// Executor's.
	Clock clock.Clock
	// Rand returns a number in [0, 1) for the jitter. If nil, uses
	// math/rand/v2.
	Rand func() float64
}

// Poller reads the power state of every Machine in the store on an
// interval and writes it, with the Contactable condition, to the
// Machine's status as Rufio's machine controller does: powerState on or
// off and Contactable True, or powerState unknown and Contactable False
// with the cause. It writes only what changed. Now and then it also reads
// the machine's inventory in the same session (InventorySession) into the
// status.attributes.outOfBand of the Hardware naming the Machine. It takes the Executor's
// per-BMC lock for each poll, so a poll never overlaps a Job's session on
// the same BMC, and it skips (and comes back to) a BMC a Job holds.
type Poller struct {
	e   *Executor
	cfg PollConfig

	mu    sync.Mutex
	sched map[string]*pollState // Machine "namespace/name" -> its schedule
	wake  chan struct{}         // a new or changed Machine, or a changed Secret
}

// pollState is one Machine's schedule.
type pollState struct {
	next     time.Time // due when not after now; zero: at once
	failures int       // consecutive failed polls
	gen      int64     // the Machine's generation it was scheduled for
	secret   string    // "namespace/name" of its authSecretRef
	// again: its Secret changed while it was being polled, with the old
	// one perhaps: poll it again at once, whatever this poll found.
	again bool
	// invNext is when its inventory is next read, at a poll (zero: at
	// the next); invAsked is the ReadInventoryAnnotation value obeyed.
	invNext  time.Time
	invAsked string
	// invNone: its last session had no inventory (IPMI, AMT).
	invNone bool
}

// pollResult is what one poll came to.
type pollResult int

const (
	pollOK pollResult = iota
	pollFailed
	pollBusy     // a Job held the BMC: not polled
	pollCanceled // the poller is stopping: nothing recorded
)

// Poller returns a power-state Poller that shares e's providers, store,
// credentials and per-BMC locks.
func (e *Executor) Poller(cfg PollConfig) *Poller {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPowerPollInterval
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultPollConcurrency
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultPollTimeout
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = min(DefaultPollBackoff, cfg.Interval)
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 8 * cfg.Interval
	}
	if cfg.BusyRetry <= 0 {
		cfg.BusyRetry = min(10*time.Second, cfg.Interval)
	}
	switch {
	case cfg.Jitter == 0:
		cfg.Jitter = DefaultPollJitter
	case cfg.Jitter < 0:
		cfg.Jitter = 0
	}
	if cfg.InventoryInterval == 0 {
		cfg.InventoryInterval = DefaultInventoryInterval
	}
	if cfg.InventoryTimeout <= 0 {
		cfg.InventoryTimeout = DefaultInventoryTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = e.cfg.Clock
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Poller{e: e, cfg: cfg, sched: map[string]*pollState{}, wake: make(chan struct{}, 1)}
}

// Run polls until ctx ends: a sweep of the Machines that are due, then a
// wait until the next is due or a Machine appears or changes (its spec:
// it is polled at once, its failures forgotten), or a Secret changes (the
// Machines using it are polled at once: a fixed password need not wait
// out the back-off, a wrong one shows at once), or a Hardware comes to
// name a Machine whose inventory it lacks (read at once).
func (p *Poller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	for _, kind := range []string{model.KindMachine, model.KindSecret, model.KindHardware} {
		wg.Add(1)
		go func() { defer wg.Done(); p.watch(wctx, kind) }()
	}
	for {
		next, err := p.Sweep(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			p.e.log.Warn("bmc poll: cannot list machines", "err", err)
			next = p.cfg.Clock.Now().Add(p.cfg.BusyRetry)
		}
		var due <-chan time.Time
		if !next.IsZero() {
			due = p.cfg.Clock.After(max(0, next.Sub(p.cfg.Clock.Now())))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-due:
		case <-p.wake:
		}
	}
}

// watch wakes Run for the changes of kind that call for a poll before
// its time. It watches from the store's present version: the objects that
// exist already are the sweeps' business (seen as Added, every Secret
// would have its Machines polled twice at start). A watch that ends (fell
// behind, store restarted) is begun again; the Machines it missed are
// found by the next sweep's list.
func (p *Poller) watch(ctx context.Context, kind string) {
	for ctx.Err() == nil {
		_, rv, err := p.e.cfg.Store.List(ctx, kind, store.ListOptions{})
		var ch <-chan store.Event
		if err == nil {
			ch, err = p.e.cfg.Store.Watch(ctx, kind, store.WatchOptions{ResourceVersion: rv})
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		// What changed between Run's last list and this watch's is
		// found by one more sweep.
		p.wakeUp()
		for ev := range ch {
			if ev.Type != store.Added && ev.Type != store.Modified {
				continue
			}
			if p.changed(ev.Object) {
				p.wakeUp()
			}
		}
	}
}

// wakeUp makes Run sweep now.
func (p *Poller) wakeUp() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// changed says whether o, just added or modified, calls for a poll before
// its time, and makes the Machines it concerns due.
func (p *Poller) changed(o model.Object) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch o := o.(type) {
	case *model.Machine:
		// A status write (a poll's, a Job's) leaves the generation alone.
		s := p.sched[o.Key()]
		return s == nil || s.gen != o.Generation || o.Annotations[ReadInventoryAnnotation] != s.invAsked
	case *model.Hardware:
		// A Hardware that names a Machine whose inventory it lacks (new,
		// or re-pointed by its bmcRef) gets it at once, not at the
		// Machine's next inventory time — unless the Machine has none
		// to give or is backing off.
		if o.Spec.BMCRef == nil || p.cfg.InventoryInterval <= 0 {
			return false
		}
		a := o.Status.Attributes
		if a != nil && a.OutOfBand != nil && a.OutOfBand.Source.Machine == o.Spec.BMCRef.Name {
			return false
		}
		s := p.sched[o.Namespace+"/"+o.Spec.BMCRef.Name]
		if s == nil || s.invNone || s.failures > 0 || s.invNext.IsZero() {
			return false // unknown yet, none, failing, or due already
		}
		s.invNext, s.next = time.Time{}, time.Time{}
		return true
	case *model.Secret:
		hit := false
		for _, s := range p.sched {
			if s.secret == o.Key() {
				s.next, s.again, hit = time.Time{}, true, true
			}
		}
		return hit
	}
	return false
}

// Sweep polls every Machine that is due now (or within a second, or a
// twentieth of the interval when that is shorter), Concurrency at a time, and
// returns when they are done, with the time the next one is due (zero
// when there are no Machines). A Machine new to the poller, or whose spec
// changed, is due at once.
func (p *Poller) Sweep(ctx context.Context) (time.Time, error) {
	objs, _, err := p.e.cfg.Store.List(ctx, model.KindMachine, store.ListOptions{})
	if err != nil {
		return time.Time{}, err
	}
	now := p.cfg.Clock.Now()
	// Machines due within the slack are polled now too: with the jitter
	// spreading N Machines over the interval, waking for each one alone
	// would list the store N times a round.
	horizon := now.Add(min(time.Second, p.cfg.Interval/20))
	var due []*model.Machine
	var inv []bool // due[i]'s inventory is due too
	p.mu.Lock()
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		m := o.(*model.Machine)
		key := m.Key()
		seen[key] = true
		s := p.sched[key]
		if s == nil || s.gen != m.Generation {
			// New, or re-specified (perhaps another BMC): its
			// inventory is read at this poll too.
			s = &pollState{gen: m.Generation, secret: secretKey(m), invAsked: m.Annotations[ReadInventoryAnnotation]}
			p.sched[key] = s
		}
		if ask := m.Annotations[ReadInventoryAnnotation]; ask != s.invAsked {
			s.invAsked, s.invNext, s.next = ask, time.Time{}, time.Time{}
		}
		if !s.next.After(horizon) {
			s.again = false
			due = append(due, m)
			inv = append(inv, p.cfg.InventoryInterval > 0 && !s.invNext.After(horizon))
		}
	}
	for key := range p.sched {
		if !seen[key] {
			delete(p.sched, key)
		}
	}
	p.mu.Unlock()

	if len(due) > 0 {
		start := time.Now()
		sem := make(chan struct{}, p.cfg.Concurrency)
		var wg sync.WaitGroup
	loop:
		for i, m := range due {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break loop
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				r, io := p.poll(ctx, m, inv[i])
				p.reschedule(m.Key(), r, io)
			}()
		}
		wg.Wait()
		if ctx.Err() == nil {
			bmcPollSweep.Observe(time.Since(start).Seconds())
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	var next time.Time
	backingOff := 0
	for _, s := range p.sched {
		if next.IsZero() || s.next.Before(next) {
			next = s.next
		}
		if s.failures > 0 {
			backingOff++
		}
	}
	bmcPollBackingOff.Set(float64(backingOff))
	return next, nil
}

// reschedule sets when the Machine is next due after a poll, and its
// inventory when the poll read it (or its provider has none to read).
func (p *Poller) reschedule(key string, r pollResult, inv invOutcome) {
	if r == pollCanceled {
		return
	}
	bmcPolls.WithLabelValues([...]string{"ok", "failed", "busy"}[r]).Inc()
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sched[key]
	if s == nil {
		return // deleted meanwhile
	}
	switch r {
	case pollOK:
		s.failures = 0
		s.next = now.Add(p.jitter(p.cfg.Interval))
		if inv != invPending {
			s.invNext = now.Add(p.jitter(p.cfg.InventoryInterval))
			s.invNone = inv == invNone
		}
	case pollFailed:
		s.failures++
		s.next = now.Add(p.jitter(p.backoff(s.failures)))
	case pollBusy:
		s.next = now.Add(p.cfg.BusyRetry)
	}
	if s.again {
		s.next, s.again = time.Time{}, false
	}
}

// backoff is the wait after n consecutive failures: Backoff, doubled
// for each failure after the first, at most MaxBackoff.
func (p *Poller) backoff(n int) time.Duration {
	d := p.cfg.Backoff
	for i := 1; i < n && d < p.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.cfg.MaxBackoff)
}

// jitter spreads d by up to ±Jitter of itself.
func (p *Poller) jitter(d time.Duration) time.Duration {
	if p.cfg.Jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + p.cfg.Jitter*(2*p.cfg.Rand()-1)))
}

// invOutcome is what a poll did about the Machine's inventory.
type invOutcome int

const (
	invPending invOutcome = iota // not read, or not recorded: at the next poll
	invDone                      // read and recorded, or nowhere to record it
	invNone                      // the provider has none
)

// poll reads one Machine's power state in a session of its own and
// records it, and, when withInventory and the session can, the
// machine's inventory (recorded on its Hardware). It says what came of
// the inventory.
func (p *Poller) poll(ctx context.Context, m *model.Machine, withInventory bool) (pollResult, invOutcome) {
	e := p.e
	get := func(kind, ns, name string) (model.Object, error) { return e.cfg.Store.Get(ctx, kind, ns, name) }
	prov, conn, err := e.connect(m, get, "")
	scrub := func(s string) string {
		if conn.Password == "" {
			return s
		}
		return strings.ReplaceAll(s, conn.Password, "[redacted]")
	}
	if err != nil {
		if ctx.Err() != nil {
			return pollCanceled, invPending
		}
		p.record(ctx, m, model.PowerUnknown, false, scrub(err.Error()))
		return pollFailed, invPending
	}
	l := e.bmcLock(conn.Host)
	select {
	case l <- struct{}{}:
	default:
		return pollBusy, invPending
	}
	defer func() { <-l }()

	var hws []*model.Hardware
	noTargets := false
	if withInventory {
		// No Hardware names the Machine (yet): not worth the BMC's
		// time. One that comes to name it is seen by the watch. On an
		// error, the inventory waits for the next poll.
		var err error
		hws, err = p.inventoryTargets(ctx, m)
		if err != nil && ctx.Err() == nil {
			p.e.log.Warn("bmc poll: cannot list the machine's hardware", "machine", m.Key(), "err", err)
		}
		withInventory, noTargets = len(hws) > 0, err == nil && len(hws) == 0
	}
	pctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	var inv inventoryRead
	if withInventory {
		inv.timeout = p.cfg.InventoryTimeout
	}
	st, err := p.read(pctx, prov, conn, &inv)
	if ctx.Err() != nil {
		return pollCanceled, invPending
	}
	if err != nil {
		if pctx.Err() != nil {
			err = fmt.Errorf("%w (a poll's limit is %s)", err, p.cfg.Timeout)
		}
		p.record(ctx, m, model.PowerUnknown, false, fmt.Sprintf("provider %s: %s", prov.Name(), scrub(err.Error())))
		return pollFailed, invPending
	}
	p.record(ctx, m, st, true, "")
	if noTargets {
		return pollOK, invDone
	}
	if !withInventory {
		return pollOK, invPending
	}
	switch {
	case !inv.supported:
		return pollOK, invNone // nothing to read: not asked again until its time
	case inv.err != nil:
		// The power state stands; the inventory is tried again at the
		// next poll, and the last one read stays on the Hardware.
		p.e.log.Warn("bmc poll: cannot read the machine's inventory", "machine", m.Key(), "provider", prov.Name(), "err", scrub(inv.err.Error()))
		return pollOK, invPending
	}
	inv.got.Source = model.OutOfBandSource{Machine: m.Name, Provider: prov.Name(), ReadAt: p.cfg.Clock.Now().UTC()}
	inv.got.Bound()
	if !p.recordInventory(ctx, m, hws, inv.got) {
		return pollOK, invPending
	}
	return pollOK, invDone
}

// inventoryRead asks read for the inventory (timeout > 0) and holds what
// came of it.
type inventoryRead struct {
	timeout   time.Duration
	supported bool
	got       *model.OutOfBand
	err       error
}

// read opens a session, reads the power state (and the inventory, when
// inv asks and the session can) and closes the session whatever happened
// (on a fresh context: the poll's may have expired). The inventory has a
// time limit of its own, from the poll's parent: it takes many requests.
func (p *Poller) read(ctx context.Context, prov Provider, conn Conn, inv *inventoryRead) (string, error) {
	s, err := openMeasured(ctx, prov, conn)
	if err != nil {
		return "", err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			p.e.log.Debug("bmc poll: closing the session failed", "host", conn.Host, "err", err)
		}
	}()
	st, err := s.PowerState(ctx)
	if err != nil {
		return "", fmt.Errorf("get power state: %w", err)
	}
	if read, ok := inventoryOf(s); ok && inv.timeout > 0 {
		inv.supported = true
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inv.timeout)
		defer cancel()
		stop := context.AfterFunc(ctx, func() {
			if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				cancel() // the poller stops: so does the read
			}
		})
		defer stop()
		inv.got, inv.err = read(ictx)
	}
	return st, nil
}

// record writes the power state and the Contactable condition to the
// Machine's status, unless they are what it holds already: a poll that
// finds nothing new writes nothing.
func (p *Poller) record(ctx context.Context, m *model.Machine, state string, ok bool, msg string) {
	now := p.cfg.Clock.Now().UTC()
	err := retryConflict(func() error {
		o, err := p.e.cfg.Store.Get(ctx, model.KindMachine, m.Namespace, m.Name)
		if err != nil {
			return err
		}
		cur := o.(*model.Machine)
		if cur.Generation != m.Generation {
			return nil // changed meanwhile: polled again at once
		}
		next := cur.Status
		next.Conditions = slices.Clone(cur.Status.Conditions)
		next.PowerState = state
		setContactable(&next, ok, msg, now)
		if reflect.DeepEqual(next, cur.Status) {
			return nil
		}
		if cur.Status.PowerState != state || contactableStatus(cur.Status) != contactableStatus(next) {
			p.e.log.Info("bmc poll: machine changed", "machine", m.Key(), "power", state, "contactable", ok, "message", msg)
		}
		cur.Status = next
		_, err = p.e.cfg.Store.Update(ctx, cur)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
		p.e.log.Warn("bmc poll: cannot record the machine's state", "machine", m.Key(), "err", err)
	}
}

// setContactable sets the Contactable condition of st, as Rufio does:
// True with no message when the BMC answered, False with the cause when
// not. Its time changes only when its status does.
func setContactable(st *model.MachineStatus, ok bool, msg string, now time.Time) {
	status := model.ConditionTrue
	if !ok {
		status = model.ConditionFalse
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == model.ConditionContactable {
			if c.Status != status {
				c.LastUpdateTime = &now
			}
			c.Status, c.Message = status, msg
			return
		}
	}
	st.Conditions = append(st.Conditions, model.MachineCondition{
		Type: model.ConditionContactable, Status: status, Message: msg, LastUpdateTime: &now})
}

// contactableStatus returns the status of st's Contactable condition, or "".
func contactableStatus(st model.MachineStatus) string {
	for _, c := range st.Conditions {
		if c.Type == model.ConditionContactable {
			return c.Status
		}
	}
	return ""
}

// secretKey is "namespace/name" of m's authSecretRef.
func secretKey(m *model.Machine) string {
	ref := m.Spec.Connection.AuthSecretRef
	ns := ref.Namespace
	if ns == "" {
		ns = m.Namespace
	}
	return ns + "/" + ref.Name
}
