// Package leader elects the one replica of `anvil serve` in Kubernetes
// mode that runs the work that must not run twice at once: the workflow
// engine and the BMC reconciler. Every replica campaigns for one
// coordination.k8s.io Lease (client-go's leaderelection with a
// resourcelock.LeaseLock); the replica that holds it runs the caller's
// lead function until it loses the Lease, then campaigns again. The
// replica keeps serving everything else while it does: nothing here exits
// the process.
//
// It owns that Lease (it creates, renews and releases it, and writes no
// other object), the leadership term of its replica with the term's Fence,
// and the metrics anvil_leader and anvil_leader_transitions_total. It
// knows nothing of what lead does and must not touch the store, the
// engine or any other package's state: lead is handed a context and a
// Fence, and what it writes, and how the writes are guarded, is its own.
//
// # Fencing
//
// client-go's election alone does not keep a deposed leader from writing:
// it cancels the leader's context only after its own renew deadline, which
// starts a retry period after the last renewal, and it cannot stop a
// goroutine that does not look at the context. Writers therefore check the
// term's Fence (FenceFrom(ctx).Check()) before every write. Check fails,
// with an error wrapping ErrNotLeader, once the lead context has ended or
// RenewDeadline has passed since the start of the last successful write of
// the Lease by this replica, whichever comes first; the term's context is
// cancelled at the same moment. A term that ended never opens again: a
// replica elected anew gets a new Fence.
//
// Why a deposed leader cannot write once another replica could hold the
// Lease: a renewal is an update of the Lease with the resourceVersion last
// seen, so it succeeds only if no other replica took the Lease in between.
// Another candidate sees that renewal only after the API server stored it,
// which is after the moment the renewal was sent (t0, read here, before
// sending), and client-go lets it take the Lease only once LeaseDuration has
// passed, on its own clock, without a further change of the record: not
// before t0 + LeaseDuration. This replica's Fence closed at
// t0 + RenewDeadline, and Config requires RenewDeadline < LeaseDuration.
// Both sides measure elapsed time on a monotonic clock (clock.Real's
// readings carry Go's monotonic reading; client-go compares its own
// observation times, never the timestamps written in the Lease), so the
// argument does not depend on the machines' clocks agreeing on the time of
// day. It assumes their clocks run at rates that differ by less than the
// ratio LeaseDuration/RenewDeadline (1.5 with the defaults), which NTP-kept
// machines meet by a wide margin.
//
// What it cannot guarantee: Check and the write that follows are not one
// atomic step. A write that passed Check and is in flight when the term
// ends (or a process paused between the two, by a stop signal, a frozen
// VM or a long GC pause) may land after another replica leads. The store
// layer guards those with resourceVersion preconditions: an update made
// from a stale read fails with a conflict instead of overwriting what the
// new leader wrote. Nor can the Fence count time during which the whole
// machine was suspended: Go's monotonic clock (CLOCK_MONOTONIC on Linux)
// stops then, so a resumed leader's Fence may stay open until its next
// attempt to renew (at most a RetryPeriod later) finds the Lease held by
// another, which ends the term at once; the same preconditions refuse its
// writes meanwhile.
//
// # Handing over
//
// ReleaseOnCancel is on: when Run's context ends, the term ends, its
// Fence closes, and once lead has returned the Lease is released (its
// holder cleared), so the next replica takes over at its next retry
// instead of waiting out the lease. If lead does not return within
// RenewDeadline the Lease is not released and expires as a crashed
// leader's would: releasing it while lead may still be writing would break
// the fencing above.
package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/anvilproj/anvil/internal/clock"
)

// Defaults of Config, those of Kubernetes' own controllers.
const (
	DefaultName          = "anvil-leader"
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ErrNotLeader is wrapped by every error of Fence.Check: this replica is
// not, or may no longer be, the leader, and must not write.
var ErrNotLeader = errors.New("not the leader")

// Config configures an Elector.
type Config struct {
	// REST reaches the API server (in-cluster config or a kubeconfig's).
	// Required. If its Timeout is 0, requests of the election time out
	// after RenewDeadline/2 (at least a second), so that one hung request
	// cannot use up the whole renew deadline.
	REST *rest.Config
	// Namespace is the Lease's namespace. Required.
	Namespace string
	// Name is the Lease's name. If empty, DefaultName.
	Name string
	// Identity names this replica in the Lease's holderIdentity. If empty,
	// $POD_NAME, else the host name (a pod's name, or its node's with
	// hostNetwork), followed by "-" and a random suffix: a restarted pod keeps its
	// name, and must not take the Lease for its own term while its
	// previous process may still be running.
	Identity string
	// LeaseDuration is how long the other replicas wait, after the last
	// change of the Lease they saw, before they take it over. A whole
	// number of seconds (the Lease records seconds). If 0,
	// DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewDeadline is how long after the start of its last successful
	// renewal the leader's term ends (its Fence closes and its context is
	// cancelled). Shorter than LeaseDuration. If 0, DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod is the wait between attempts to renew the Lease; a
	// candidate's attempts to acquire it wait RetryPeriod plus a random
	// jitter of up to 1.2×RetryPeriod (client-go's JitterFactor).
	// RetryPeriod×1.2 must be shorter than RenewDeadline, as client-go
	// requires. If 0, DefaultRetryPeriod.
	RetryPeriod time.Duration
	// Log receives the election's events and client-go's own messages.
	// If nil, slog.Default().
	Log *slog.Logger
}

// jitter is client-go's leaderelection.JitterFactor: an attempt to
// acquire the Lease waits RetryPeriod plus up to RetryPeriod×jitter.
const jitter = leaderelection.JitterFactor

// withDefaults returns c with its defaults applied, or an error naming
// what is wrong with it.
func (c Config) withDefaults() (Config, error) {
	if c.REST == nil {
		return c, errors.New("leader: Config.REST is nil: the election needs a client configuration for the API server")
	}
	if c.Namespace == "" {
		return c, errors.New("leader: Config.Namespace is empty: the Lease needs a namespace (the one anvil runs in)")
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return c, fmt.Errorf("leader: Config.Namespace %q is not a namespace name: %s", c.Namespace, errs[0])
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if errs := validation.IsDNS1123Subdomain(c.Name); len(errs) > 0 {
		return c, fmt.Errorf("leader: Config.Name %q is not a Lease name: %s", c.Name, errs[0])
	}
	if c.Identity == "" {
		id, err := defaultIdentity()
		if err != nil {
			return c, err
		}
		c.Identity = id
	}
	type duration struct {
		name string
		d    *time.Duration
		def  time.Duration
	}
	durations := []duration{
		{"LeaseDuration", &c.LeaseDuration, DefaultLeaseDuration},
		{"RenewDeadline", &c.RenewDeadline, DefaultRenewDeadline},
		{"RetryPeriod", &c.RetryPeriod, DefaultRetryPeriod},
	}
	// show names a duration with its value, marking a default so that an
	// error about a value the caller never set says where it came from.
	show := map[string]string{}
	for _, d := range durations {
		switch {
		case *d.d < 0:
			return c, fmt.Errorf("leader: Config.%s is negative (%v)", d.name, *d.d)
		case *d.d == 0:
			*d.d = d.def
			show[d.name] = fmt.Sprintf("%s %v (the default)", d.name, d.def)
		default:
			show[d.name] = fmt.Sprintf("%s %v", d.name, *d.d)
		}
	}
	if c.LeaseDuration%time.Second != 0 {
		return c, fmt.Errorf("leader: Config.LeaseDuration %v is not a whole number of seconds: the Lease records leaseDurationSeconds, and the other replicas wait that long", c.LeaseDuration)
	}
	if c.RenewDeadline >= c.LeaseDuration {
		return c, fmt.Errorf("leader: %s must be shorter than %s: the leader must stop writing before another replica may take the Lease",
			show["RenewDeadline"], show["LeaseDuration"])
	}
	if time.Duration(jitter*float64(c.RetryPeriod)) >= c.RenewDeadline {
		return c, fmt.Errorf("leader: %s ×%.1f must be shorter than %s: a failed renewal is retried every RetryPeriod until the deadline, and client-go wants room for more than one try",
			show["RetryPeriod"], jitter, show["RenewDeadline"])
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c, nil
}

// defaultIdentity is the pod's name ($POD_NAME, from the downward API:
// with hostNetwork the host name is the node's), else the host name, and
// a random suffix.
func defaultIdentity() (string, error) {
	host := os.Getenv("POD_NAME")
	if host == "" {
		var err error
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("leader: Config.Identity is empty and the host name is unknown: %w", err)
		}
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("leader: an identity's random suffix: %w", err)
	}
	return host + "-" + hex.EncodeToString(b), nil
}

// Elector campaigns for the Lease on behalf of one replica. Its methods
// are safe for concurrent use; Run runs once at a time.
type Elector struct {
	cfg    Config
	leases coordinationv1.LeasesGetter
	clock  clock.Clock // the Fence's; tests of the Fence alone step a fake
	log    *slog.Logger

	running atomic.Bool

	mu               sync.Mutex
	term             *Fence // the term whose lead is running, if any
	holder           string
	leaseTransitions int
}

// New returns an Elector for cfg, or an error naming what is wrong with
// cfg. It makes no request.
func New(cfg Config) (*Elector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rc := rest.CopyConfig(cfg.REST)
	if rc.Timeout == 0 {
		rc.Timeout = max(time.Second, cfg.RenewDeadline/2)
	}
	rc = rest.AddUserAgent(rc, "anvil-leader-election")
	leases, err := coordinationv1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("leader: a client for the Lease: %w", err)
	}
	return &Elector{
		cfg:    cfg,
		leases: leases,
		clock:  clock.Real,
		log:    cfg.Log.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity),
	}, nil
}

// Run is New and Elector.Run.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context) error) error {
	e, err := New(cfg)
	if err != nil {
		return err
	}
	return e.Run(ctx, lead)
}

// Run campaigns for the Lease until ctx ends. Whenever this replica is
// elected it calls lead with a context that carries the term's Fence
// (FenceFrom) and is cancelled the moment the term ends: the Lease lost or
// not renewed within RenewDeadline, or ctx ended. It waits for lead to
// return and campaigns again; if lead returned while the term was still
// on (an error, or nil), the Lease is released and the next campaign waits
// a RetryPeriod first, so that a lead that keeps failing lets the other
// replicas try. An error of lead is logged, not returned.
//
// Run returns nil once ctx has ended, lead has returned and the Lease has
// been released (or could not be); it returns an error only if it could
// not campaign at all.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	if lead == nil {
		return errors.New("leader: Run: lead is nil")
	}
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("leader: Run: this Elector is already running")
	}
	defer e.running.Store(false)
	// client-go's election logs through the context's logger.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(e.log.Handler()))
	e.log.Info("campaigning for leadership")
	for ctx.Err() == nil {
		pause, err := e.campaign(ctx, lead)
		if err != nil {
			return err
		}
		if pause {
			select {
			case <-ctx.Done():
			case <-e.clock.After(e.cfg.RetryPeriod):
			}
		}
	}
	return nil
}

// campaign runs one client-go LeaderElector: it acquires the Lease (or
// waits until ctx ends), leads, and returns once the term has ended and
// lead has returned. pause reports whether lead returned on its own.
func (e *Elector) campaign(ctx context.Context, lead func(ctx context.Context) error) (pause bool, err error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := &Fence{e: e, run: ctx, end: cancel, leadDone: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &fencedLock{
			LeaseLock: resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
				Client:     e.leases,
				LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
			},
			f: f,
		},
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { e.lead(lctx, f, lead) },
			// The term's end is seen by the Fence (the lead context's
			// cancellation); nothing more to do here.
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return false, fmt.Errorf("leader: %w", err)
	}
	le.Run(cctx)
	f.close(errCampaignOver)
	// client-go calls OnStartedLeading, in a goroutine of its own, after
	// every successful acquisition, even if it has already stopped
	// renewing by then: wait for it, so that no lead of an old term runs
	// into the next campaign.
	if f.wasAcquired() {
		<-f.leadDone
	}
	return f.returnedEarly(), nil
}

// lead runs the caller's lead for term f with the context client-go
// cancels when it stops renewing.
func (e *Elector) lead(lctx context.Context, f *Fence, lead func(ctx context.Context) error) {
	defer close(f.leadDone)
	if !f.open(lctx) {
		return // the term ended before it began (e.g. ctx ended meanwhile)
	}
	stop := context.AfterFunc(lctx, func() { f.close(f.contextEnded()) })
	defer stop()
	err := lead(context.WithValue(lctx, fenceKey{}, f))
	f.leadReturned(err)
}

// began and ended record the start and end of a term of this replica.
func (e *Elector) began(f *Fence) {
	e.mu.Lock()
	e.term = f
	e.mu.Unlock()
	leaderGauge.Inc()
	leaderTransitions.Inc()
	e.log.Info("leading: this replica won the election")
}

func (e *Elector) ended(f *Fence, why error) {
	e.mu.Lock()
	if e.term == f {
		e.term = nil
	}
	e.mu.Unlock()
	leaderGauge.Dec()
	leaderTransitions.Inc()
	e.log.Warn("leadership ended", "why", why)
}

// observed records the Lease's holder and transitions as last read or
// written by this replica.
func (e *Elector) observed(holder string, transitions int) {
	e.mu.Lock()
	changed := holder != e.holder
	e.holder, e.leaseTransitions = holder, transitions
	e.mu.Unlock()
	if changed {
		e.log.Info("leader observed", "holder", holder, "leaseTransitions", transitions)
	}
}

// Status is what a replica knows of the election, for logs and metrics.
type Status struct {
	// Identity is this replica's holderIdentity.
	Identity string
	// Leader reports whether this replica leads and its Fence is open.
	Leader bool
	// Holder is the Lease's holder as last read or written by this
	// replica: "" if none was seen yet or the last holder released it.
	Holder string
	// LeaseTransitions is the Lease's leaseTransitions as last seen: how
	// many times its holder changed since it was created.
	LeaseTransitions int
}

// Status returns what this replica knows of the election now.
func (e *Elector) Status() Status {
	e.mu.Lock()
	term := e.term
	s := Status{Identity: e.cfg.Identity, Holder: e.holder, LeaseTransitions: e.leaseTransitions}
	e.mu.Unlock()
	s.Leader = term != nil && term.Check() == nil
	return s
}

// IsLeader reports whether this replica leads and its Fence is open.
func (e *Elector) IsLeader() bool { return e.Status().Leader }

// Identity returns this replica's holderIdentity.
func (e *Elector) Identity() string { return e.cfg.Identity }
