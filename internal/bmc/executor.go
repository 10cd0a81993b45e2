package bmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Defaults of Config.
const (
	// DefaultTaskTimeout bounds one task: opening the session (for the
	// first), the BMC's calls, and waiting for the power state to follow.
	DefaultTaskTimeout = 60 * time.Second
	// DefaultPollInterval is how often the power state is read while
	// waiting for it to follow a power action.
	DefaultPollInterval = time.Second
	// DefaultWorkers bounds the Jobs run at once (on different BMCs).
	DefaultWorkers = 16
	// DefaultRefGrace is how long a Job waits for its Machine and the
	// Machine's Secret to exist. `anvil apply -f dir/` applies one file
	// at a time, in name order, so job.yaml can land before machine.yaml
	// and secret.yaml; Rufio's controller requeues such a Job, and so a
	// Job here waits this long before it fails.
	DefaultRefGrace = 15 * time.Second
)

// Config configures an Executor.
type Config struct {
	// Store holds the Jobs, Tasks, Machines and Secrets. Required.
	Store store.Store
	// Unseal opens a stored Secret's values (secrets.Sealer.Open).
	// Required.
	Unseal func(*model.Secret) (map[string][]byte, error)
	// Providers are the protocols the executor speaks, in the order it
	// prefers them. If empty, uses IPMI{}, Redfish{} and IntelAMT{}.
	Providers []Provider
	// TaskTimeout bounds one task. If 0, uses DefaultTaskTimeout.
	TaskTimeout time.Duration
	// PollInterval: see DefaultPollInterval. If 0, uses it.
	PollInterval time.Duration
	// Workers bounds the Jobs run at once. If 0, uses DefaultWorkers.
	Workers int
	// RefGrace: see DefaultRefGrace. If 0, uses it.
	RefGrace time.Duration
	// Clock stamps start and completion times and paces the waits for a
	// Machine or Secret and for a power state. If nil, clock.Real.
	Clock clock.Clock
	// Logger receives one line per Job started and finished. If nil,
	// uses slog.Default().
	Logger *slog.Logger
	// Events receives a Job's start, each task's end and the Job's end,
	// for the record of every machine whose Hardware names the Job's
	// Machine in spec.bmcRef (`anvil logs hardware/X`). If nil, none.
	Events machinelog.Sink
}

// Executor runs Jobs: each unfinished Job in the store, once, its tasks in
// order, one session per Job and never two sessions with one BMC at once.
// It is safe for concurrent use; Run is called once.
type Executor struct {
	cfg Config
	log *slog.Logger

	workers chan struct{}

	mu      sync.Mutex
	running map[string]bool          // Job keys being run
	bmcs    map[string]chan struct{} // host -> a one-slot lock (bmcLock)
}

// New returns an Executor for cfg.
func New(cfg Config) *Executor {
	if len(cfg.Providers) == 0 {
		cfg.Providers = []Provider{IPMI{}, Redfish{}, IntelAMT{}}
	}
	if cfg.TaskTimeout <= 0 {
		cfg.TaskTimeout = DefaultTaskTimeout
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.RefGrace <= 0 {
		cfg.RefGrace = DefaultRefGrace
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Executor{
		cfg: cfg, log: cfg.Logger,
		workers: make(chan struct{}, cfg.Workers),
		running: map[string]bool{},
		bmcs:    map[string]chan struct{}{},
	}
}

// Run follows the store's Jobs until ctx ends, starting each unfinished
// one. A Job found Running when Run starts was cut short by a stop of the
// server and is marked Failed, not run again: its tasks (a power cycle)
// are not safe to repeat blindly. Run returns when every Job it started
// has ended.
func (e *Executor) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	first := true
	for {
		objs, rv, err := e.cfg.Store.List(ctx, model.KindJob, store.ListOptions{})
		if err != nil {
			return fmt.Errorf("list jobs: %w", err)
		}
		for _, o := range objs {
			j := o.(*model.Job)
			if first && !j.Finished() && model.HasCondition(j.Status.Conditions, model.ConditionRunning) {
				e.interrupted(ctx, j)
				continue
			}
			e.start(ctx, &wg, j)
		}
		first = false
		ch, err := e.cfg.Store.Watch(ctx, model.KindJob, store.WatchOptions{ResourceVersion: rv})
		if err != nil {
			return fmt.Errorf("watch jobs: %w", err)
		}
		if err := e.follow(ctx, &wg, ch); err != nil {
			return err
		}
		// The watch fell behind: list again.
	}
}

// follow starts the Jobs ch reports until ctx ends (its error) or the
// watch must be restarted (nil).
func (e *Executor) follow(ctx context.Context, wg *sync.WaitGroup, ch <-chan store.Event) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("watch of jobs ended: the store closed")
			}
			switch ev.Type {
			case store.Added, store.Modified:
				e.start(ctx, wg, ev.Object.(*model.Job))
			case store.Error:
				return nil
			}
		}
	}
}

// start runs j in the background unless it is finished, running, or was
// started before (a Running condition: this process's own write).
func (e *Executor) start(ctx context.Context, wg *sync.WaitGroup, j *model.Job) {
	if j.Finished() || model.HasCondition(j.Status.Conditions, model.ConditionRunning) {
		return
	}
	key := j.Namespace + "/" + j.Name
	e.mu.Lock()
	if e.running[key] {
		e.mu.Unlock()
		return
	}
	e.running[key] = true
	e.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			e.mu.Lock()
			delete(e.running, key)
			e.mu.Unlock()
		}()
		select {
		case e.workers <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-e.workers }()
		e.runJob(ctx, j.Namespace, j.Name)
	}()
}

// interrupted marks a Job that was running when the server stopped.
func (e *Executor) interrupted(ctx context.Context, j *model.Job) {
	msg := "interrupted: the server stopped while the job ran; its tasks may be half done (create a new Job to run them again)"
	if err := e.finishJob(ctx, j.Namespace, j.Name, false, msg); err != nil {
		e.log.Warn("bmc job: cannot mark an interrupted job failed", "job", j.Namespace+"/"+j.Name, "err", err)
	}
}

// jobRun is the state of one Job being run.
type jobRun struct {
	e        *Executor
	job      *model.Job
	machine  *model.Machine
	provider Provider
	password string // scrubbed from every message
	session  Session
	macs     []macaddr.MAC // the machines whose records get the Job's progress
}

// runJob runs the Job's tasks and writes its outcome.
func (e *Executor) runJob(ctx context.Context, ns, name string) {
	o, err := e.cfg.Store.Get(ctx, model.KindJob, ns, name)
	if err != nil {
		return // deleted meanwhile
	}
	job := o.(*model.Job)
	if job.Finished() {
		return
	}
	start := e.cfg.Clock.Now().UTC()
	if err := e.updateJob(ctx, ns, name, func(j *model.Job) {
		j.Status.StartTime = &start
		j.Status.CompletionTime = nil
		j.Status.Conditions = model.SetCondition(j.Status.Conditions, model.ConditionRunning, model.ConditionTrue, "")
	}); err != nil {
		e.log.Warn("bmc job: cannot record its start", "job", ns+"/"+name, "err", err)
		return
	}
	e.log.Info("bmc job started", "job", ns+"/"+name, "machine", job.Spec.MachineRef.Name, "tasks", len(job.Spec.Tasks))
	r := &jobRun{e: e, job: job, macs: e.machines(ctx, job)}
	r.record(outcomeStarted, fmt.Sprintf("job %s started: %d task(s) on machine/%s", name, len(job.Spec.Tasks), job.Spec.MachineRef.Name))
	msg, ok := r.run(ctx)
	if r.password != "" {
		msg = strings.ReplaceAll(msg, r.password, "[redacted]")
	}
	if ok {
		r.record(outcomeCompleted, fmt.Sprintf("job %s completed: %s", name, msg))
	} else {
		r.record(outcomeFailed, fmt.Sprintf("job %s failed: %s", name, msg))
	}
	// The outcome is written even when ctx ended (a shutdown): a Job left
	// Running would be reported as interrupted at the next start anyway,
	// but this says why.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	if err := e.finishJob(wctx, ns, name, ok, msg); err != nil {
		e.log.Warn("bmc job: cannot record its end", "job", ns+"/"+name, "err", err)
	}
}

// finishJob writes a Job's final conditions.
func (e *Executor) finishJob(ctx context.Context, ns, name string, ok bool, msg string) error {
	now := e.cfg.Clock.Now().UTC()
	result := "failed"
	if ok {
		result = "completed"
	}
	bmcJobs.WithLabelValues(result).Inc()
	e.log.Info("bmc job "+result, "job", ns+"/"+name, "message", msg)
	return e.updateJob(ctx, ns, name, func(j *model.Job) {
		c := j.Status.Conditions
		c = model.SetCondition(c, model.ConditionRunning, model.ConditionFalse, "")
		if ok {
			c = model.SetCondition(c, model.ConditionCompleted, model.ConditionTrue, msg)
			j.Status.CompletionTime = &now
		} else {
			c = model.SetCondition(c, model.ConditionFailed, model.ConditionTrue, msg)
		}
		j.Status.Conditions = c
	})
}

// run carries out every task and returns the Job's message and whether it
// completed.
func (r *jobRun) run(ctx context.Context) (string, bool) {
	e, job := r.e, r.job
	if len(job.Spec.Tasks) == 0 {
		return "no tasks", true
	}
	first := job.Spec.Tasks[0].Describe()
	conn, err := r.resolve(ctx)
	if err != nil {
		return fmt.Sprintf("task 0 (%s): %v", first, err), false
	}
	unlock, err := e.lockBMC(ctx, conn.Host)
	if err != nil {
		return fmt.Sprintf("task 0 (%s), provider %s: waiting for another job on BMC %s: %v", first, r.provider.Name(), hostPort(conn.Host, conn.Port), err), false
	}
	defer unlock()
	defer func() {
		if r.session != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			defer cancel()
			if err := r.session.Close(cctx); err != nil {
				e.log.Warn("bmc: closing the session failed", "job", job.Namespace+"/"+job.Name, "err", r.scrub(err.Error()))
			}
		}
	}()
	for i, a := range job.Spec.Tasks {
		if err := r.runTask(ctx, i, a, conn); err != nil {
			return fmt.Sprintf("task %d (%s), provider %s: %v", i, a.Describe(), r.provider.Name(), err), false
		}
	}
	return fmt.Sprintf("%d tasks completed", len(job.Spec.Tasks)), true
}

// getWaiting reads an object the Job depends on; while it does not exist
// it reads again every PollInterval until deadline (see DefaultRefGrace).
func (r *jobRun) getWaiting(ctx context.Context, deadline time.Time, kind, ns, name string) (model.Object, error) {
	for {
		o, err := r.e.cfg.Store.Get(ctx, kind, ns, name)
		if !errors.Is(err, store.ErrNotFound) || !r.e.cfg.Clock.Now().Before(deadline) {
			return o, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-r.e.cfg.Clock.After(r.e.cfg.PollInterval):
		}
	}
}

// resolve finds the Machine, its Secret and a provider.
func (r *jobRun) resolve(ctx context.Context) (Conn, error) {
	e, job := r.e, r.job
	mns := job.Spec.MachineRef.Namespace
	if mns == "" {
		mns = job.Namespace
	}
	if mns != job.Namespace { // refused at apply too; a Job stored before that rule stops here
		return Conn{}, fmt.Errorf("spec.machineRef: namespace %q: a Job drives the Machines of its own namespace (%q) only; no provider was tried", mns, job.Namespace)
	}
	deadline := e.cfg.Clock.Now().Add(e.cfg.RefGrace)
	o, err := r.getWaiting(ctx, deadline, model.KindMachine, mns, job.Spec.MachineRef.Name)
	if errors.Is(err, store.ErrNotFound) {
		return Conn{}, fmt.Errorf("spec.machineRef: Machine %s/%s does not exist (waited %s for it); no provider was tried", mns, job.Spec.MachineRef.Name, e.cfg.RefGrace)
	}
	if err != nil {
		return Conn{}, fmt.Errorf("read Machine %s/%s: %w", mns, job.Spec.MachineRef.Name, err)
	}
	r.machine = o.(*model.Machine)
	get := func(kind, ns, name string) (model.Object, error) { return r.getWaiting(ctx, deadline, kind, ns, name) }
	p, conn, err := e.connect(r.machine, get, fmt.Sprintf(" (waited %s for it)", e.cfg.RefGrace))
	r.provider, r.password = p, conn.Password
	return conn, err
}

// connect picks m's provider and reads its Secret through get, returning
// what the provider needs to reach the BMC; missing is appended to the
// message of a Secret that does not exist. Jobs and polls share it, so a
// Machine is reached the same way by both.
func (e *Executor) connect(m *model.Machine, get func(kind, ns, name string) (model.Object, error), missing string) (Provider, Conn, error) {
	mns := m.Namespace
	c := m.Spec.Connection
	p, err := e.choose(c.ProviderOptions)
	if err != nil {
		return nil, Conn{}, fmt.Errorf("providerOptions of Machine %s/%s: %w", mns, m.Name, err)
	}
	sns := c.AuthSecretRef.Namespace
	if sns == "" {
		sns = mns
	}
	what := fmt.Sprintf("Secret %s/%s (authSecretRef of Machine %s/%s)", sns, c.AuthSecretRef.Name, mns, m.Name)
	so, err := get(model.KindSecret, sns, c.AuthSecretRef.Name)
	if errors.Is(err, store.ErrNotFound) {
		return p, Conn{}, fmt.Errorf("provider %s: %s does not exist%s", p.Name(), what, missing)
	}
	if err != nil {
		return p, Conn{}, fmt.Errorf("provider %s: read %s: %w", p.Name(), what, err)
	}
	vals, err := e.cfg.Unseal(so.(*model.Secret))
	if err != nil {
		return p, Conn{}, fmt.Errorf("provider %s: %s: %w", p.Name(), what, err)
	}
	conn := Conn{Host: c.Host, Port: c.Port, InsecureTLS: c.InsecureTLS,
		Username: string(vals[model.SecretUsernameKey]), Password: string(vals[model.SecretPasswordKey])}
	for _, k := range []string{model.SecretUsernameKey, model.SecretPasswordKey} {
		if len(vals[k]) == 0 {
			return p, Conn{Password: conn.Password}, fmt.Errorf("provider %s: %s has no %s (it needs the keys username and password)", p.Name(), what, k)
		}
	}
	switch p.Name() {
	case model.ProviderRedfish:
		redfishConn(&conn, c.ProviderOptions)
		return p, conn, nil
	case model.ProviderIntelAMT:
		amtConn(&conn, c.ProviderOptions)
		return p, conn, nil
	}
	if o := c.ProviderOptions; o != nil && o.IPMITOOL != nil {
		conn.CipherSuite = o.IPMITOOL.CipherSuite
		if o.IPMITOOL.Port != 0 {
			conn.Port = o.IPMITOOL.Port
		}
	}
	if conn.Port == 0 {
		conn.Port = model.DefaultIPMIPort
	}
	return p, conn, nil
}

// choose picks the first provider of the Machine's preferred order that
// the executor has; with no order, its own first.
func (e *Executor) choose(o *model.ProviderOptions) (Provider, error) {
	if o == nil || len(o.PreferredOrder) == 0 {
		return e.cfg.Providers[0], nil
	}
	for _, name := range o.PreferredOrder {
		name, _ = model.CanonicalProvider(name)
		for _, p := range e.cfg.Providers {
			if p.Name() == name {
				return p, nil
			}
		}
	}
	var have []string
	for _, p := range e.cfg.Providers {
		have = append(have, p.Name())
	}
	return nil, fmt.Errorf("preferredOrder %v names no provider Anvil has (it has %v)",
		o.PreferredOrder, have)
}

// runTask writes the Task object, carries out the action and records the
// outcome on the Task and the Machine.
func (r *jobRun) runTask(ctx context.Context, i int, a model.BMCAction, conn Conn) error {
	e := r.e
	tctx, cancel := context.WithTimeout(ctx, e.cfg.TaskTimeout)
	defer cancel()
	name := model.TaskName(r.job.Name, i)
	start := e.cfg.Clock.Now().UTC()
	task := &model.BMCTask{
		ObjectMeta: model.ObjectMeta{Namespace: r.job.Namespace, Name: name, Labels: map[string]string{model.BMCJobLabel: r.job.Name}},
		Spec:       model.TaskSpec{Task: a, Connection: r.machine.Spec.Connection},
		Status:     model.TaskStatus{StartTime: &start},
	}
	if err := e.putTask(ctx, task); err != nil {
		return fmt.Errorf("write Task %s: %w", name, err)
	}
	err := r.act(tctx, a, conn)
	if err != nil && tctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (the task's limit is %s)", err, e.cfg.TaskTimeout)
	}
	now := e.cfg.Clock.Now().UTC()
	took := now.Sub(start).Round(time.Millisecond)
	if err != nil {
		msg := r.scrub(err.Error())
		task.Status.Conditions = model.SetCondition(nil, model.ConditionFailed, model.ConditionTrue, msg)
		err = errors.New(msg)
		r.record(outcomeFailed, fmt.Sprintf("job %s task %d (%s) failed after %s: %s", r.job.Name, i, a.Describe(), took, msg))
	} else {
		task.Status.Conditions = model.SetCondition(nil, model.ConditionCompleted, model.ConditionTrue, "")
		task.Status.CompletionTime = &now
		r.record(outcomeCompleted, fmt.Sprintf("job %s task %d (%s) completed in %s", r.job.Name, i, a.Describe(), took))
	}
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer wcancel()
	if perr := e.putTask(wctx, task); perr != nil && err == nil {
		return fmt.Errorf("write Task %s: %w", name, perr)
	}
	return err
}

// act carries out one action, opening the session first if need be.
func (r *jobRun) act(ctx context.Context, a model.BMCAction, conn Conn) error {
	if a.VirtualMediaAction != nil {
		if _, ok := r.provider.(MediaProvider); !ok {
			return fmt.Errorf("virtual media: %w by this provider (Redfish has it: put redfish first in the Machine's providerOptions.preferredOrder)", ErrUnsupported)
		}
	}
	if r.session == nil {
		s, err := openMeasured(ctx, r.provider, conn)
		if err != nil {
			r.contactable(ctx, false, r.scrub(err.Error()))
			return err
		}
		r.session = s
		r.contactable(ctx, true, "")
	}
	switch {
	case a.PowerAction != nil:
		return r.power(ctx, *a.PowerAction)
	case a.OneTimeBootDeviceAction != nil || a.BootDevice != nil:
		dev, efi, persistent, _ := a.BootDeviceOf()
		return r.session.SetBootDevice(ctx, dev, efi, persistent)
	case a.VirtualMediaAction != nil:
		m, ok := r.session.(MediaSession)
		if !ok {
			return fmt.Errorf("virtual media: %w by this session", ErrUnsupported)
		}
		if v := a.VirtualMediaAction; v.MediaURL != "" {
			return m.InsertMedia(ctx, v.Kind, v.MediaURL)
		}
		return m.EjectMedia(ctx, a.VirtualMediaAction.Kind)
	}
	return errors.New("empty task")
}

// power carries out a power action and waits until the BMC reports the
// state it should lead to (on, or off), as Rufio's task controller checks.
func (r *jobRun) power(ctx context.Context, action string) error {
	s := r.session
	if action != model.PowerActionStatus {
		if err := s.SetPower(ctx, action); err != nil {
			return err
		}
	}
	want := ""
	switch action {
	case model.PowerActionOn, model.PowerActionCycle, model.PowerActionReset:
		want = model.PowerOn
	case model.PowerActionOff, model.PowerActionSoft:
		want = model.PowerOff
	}
	for {
		st, err := s.PowerState(ctx)
		if err != nil {
			return err
		}
		r.powerState(ctx, st)
		if want == "" || st == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("power %s sent, but the machine is still %s", action, st)
		case <-r.e.cfg.Clock.After(r.e.cfg.PollInterval):
		}
	}
}

func (r *jobRun) scrub(s string) string {
	if r.password == "" {
		return s
	}
	return strings.ReplaceAll(s, r.password, "[redacted]")
}

// powerState records the Machine's power state.
func (r *jobRun) powerState(ctx context.Context, st string) {
	r.updateMachine(ctx, func(m *model.Machine) { m.Status.PowerState = st })
}

// contactable records whether the BMC answered.
func (r *jobRun) contactable(ctx context.Context, ok bool, msg string) {
	now := r.e.cfg.Clock.Now().UTC()
	r.updateMachine(ctx, func(m *model.Machine) {
		if !ok {
			m.Status.PowerState = model.PowerUnknown
		}
		setContactable(&m.Status, ok, msg, now)
	})
}

// updateMachine changes the Machine's status; a failure is logged, not
// fatal to the task (the BMC did what it was asked).
func (r *jobRun) updateMachine(ctx context.Context, fn func(*model.Machine)) {
	m := r.machine
	err := retryConflict(func() error {
		o, err := r.e.cfg.Store.Get(ctx, model.KindMachine, m.Namespace, m.Name)
		if err != nil {
			return err
		}
		cur := o.(*model.Machine)
		fn(cur)
		_, err = r.e.cfg.Store.Update(ctx, cur)
		return err
	})
	if err != nil {
		r.e.log.Warn("bmc: cannot record the machine's state", "machine", m.Namespace+"/"+m.Name, "err", err)
	}
}

// updateJob changes a Job's status.
func (e *Executor) updateJob(ctx context.Context, ns, name string, fn func(*model.Job)) error {
	return retryConflict(func() error {
		o, err := e.cfg.Store.Get(ctx, model.KindJob, ns, name)
		if err != nil {
			return err
		}
		j := o.(*model.Job)
		fn(j)
		_, err = e.cfg.Store.Update(ctx, j)
		return err
	})
}

// putTask creates or replaces a Task.
func (e *Executor) putTask(ctx context.Context, t *model.BMCTask) error {
	_, err := e.cfg.Store.Create(ctx, model.DeepCopy(t))
	if !errors.Is(err, store.ErrAlreadyExists) {
		return err
	}
	c := model.DeepCopy(t)
	c.ResourceVersion = "" // unconditional: the executor owns its Tasks
	_, err = e.cfg.Store.Update(ctx, c)
	return err
}

// retryConflict retries fn while the store reports a concurrent change.
func retryConflict(fn func() error) error {
	var err error
	for range 5 {
		if err = fn(); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return err
}

// lockBMC takes the BMC's one-session lock, waiting for another Job or a
// power-state poll on it.
func (e *Executor) lockBMC(ctx context.Context, host string) (func(), error) {
	l := e.bmcLock(host)
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// bmcLock returns the one-slot lock of the BMC at host. It is keyed by
// the host alone, not host and port: a BMC is one device whatever
// protocol (IPMI on 623, Redfish on 443) reaches it, and two Machines
// naming the same host are two ways into one BMC.
func (e *Executor) bmcLock(host string) chan struct{} {
	key := strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	e.mu.Lock()
	defer e.mu.Unlock()
	l, ok := e.bmcs[key]
	if !ok {
		l = make(chan struct{}, 1)
		e.bmcs[key] = l
	}
	return l
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
