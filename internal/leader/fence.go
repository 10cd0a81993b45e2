package leader

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/anvilproj/anvil/internal/clock"
)

// Fence is one leadership term of one replica, from the write of the
// Lease that won it to the first of: the lead context's end, RenewDeadline
// passed since the start of the last successful renewal, the campaign's
// end. Writers of the leader's work call Check before every write. Its
// methods are safe for concurrent use; a nil *Fence is closed.
type Fence struct {
	e        *Elector
	run      context.Context    // Run's: its end is the replica's shutdown
	end      context.CancelFunc // ends the campaign, and so the lead context
	leadDone chan struct{}      // closed once client-go's OnStartedLeading has returned

	mu       sync.Mutex
	acquired bool            // a write of the Lease naming this replica succeeded
	renewed  time.Time       // the start of the last such write
	timer    clock.Timer     // fires at renewed + RenewDeadline
	leading  bool            // lead was called
	lctx     context.Context // lead's context, once leading
	ended    error           // why the term ended, wrapping ErrNotLeader; nil while on
	early    bool            // lead returned before anything else ended the term
}

type fenceKey struct{}

// FenceFrom returns the Fence of the term whose lead context ctx is or
// derives from, or nil (a closed Fence) if ctx belongs to no term.
func FenceFrom(ctx context.Context) *Fence {
	f, _ := ctx.Value(fenceKey{}).(*Fence)
	return f
}

// errCampaignOver ends a term when its campaign has ended for any reason
// that did not end it first.
var errCampaignOver = fmt.Errorf("leader: the term ended: its campaign ended: %w", ErrNotLeader)

// Check returns nil while the term is on, and once it is not an error
// wrapping ErrNotLeader that says why. Once it has failed it fails for
// good.
func (f *Fence) Check() error {
	if f == nil {
		return fmt.Errorf("leader: no leadership term in this context: %w", ErrNotLeader)
	}
	f.mu.Lock()
	err, lctx := f.ended, f.lctx
	since := f.clock().Now().Sub(f.renewed)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	switch {
	case lctx != nil && lctx.Err() != nil:
		// client-go cancels the lead context when it stops renewing;
		// the AfterFunc that closes the Fence then may not have run yet.
		f.close(f.contextEnded())
	case since >= f.e.cfg.RenewDeadline:
		f.close(fmt.Errorf("leader: %s's term on Lease %s/%s ended: not renewed for %v, the renew deadline is %v: %w",
			f.e.cfg.Identity, f.e.cfg.Namespace, f.e.cfg.Name, since.Round(time.Millisecond), f.e.cfg.RenewDeadline, ErrNotLeader))
	default:
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended
}

func (f *Fence) clock() clock.Clock { return f.e.clock }

// renewedAt records a successful write of the Lease, naming this
// replica, sent at start: the term's deadline moves to start +
// RenewDeadline. A write that took longer than that leaves the term ended.
func (f *Fence) renewedAt(start time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquired = true
	if f.ended != nil {
		return
	}
	f.renewed = start
	if f.timer != nil {
		f.timer.Stop()
	}
	// The timer cancels the lead context on time; Check does not depend
	// on it, it reads the clock.
	f.timer = f.clock().AfterFunc(start.Add(f.e.cfg.RenewDeadline).Sub(f.clock().Now()), func() {
		if err := f.Check(); err != nil {
			f.e.log.Debug("renew deadline passed", "err", err)
		}
	})
}

// open begins the term when client-go starts leading with lctx: it
// reports false if the term already ended.
func (f *Fence) open(lctx context.Context) bool {
	f.mu.Lock()
	if f.ended != nil || lctx.Err() != nil {
		f.mu.Unlock()
		return false
	}
	f.leading, f.lctx = true, lctx
	f.mu.Unlock()
	f.e.began(f)
	// The deadline may have passed between the renewal and now.
	return f.Check() == nil
}

// close ends the term for the reason why, if it is still on: the Fence
// closes, then the campaign (and so the lead context) is cancelled.
func (f *Fence) close(why error) {
	f.mu.Lock()
	if f.ended != nil {
		f.mu.Unlock()
		return
	}
	f.ended = why
	leading := f.leading
	if f.timer != nil {
		f.timer.Stop()
	}
	f.mu.Unlock()
	f.end()
	if leading {
		f.e.ended(f, why)
	}
}

// contextEnded is why a term ends when its lead context does.
func (f *Fence) contextEnded() error {
	if f.run.Err() != nil {
		return fmt.Errorf("leader: the term ended: the replica is shutting down: %w", ErrNotLeader)
	}
	return fmt.Errorf("leader: the term ended: client-go stopped renewing the Lease: %w", ErrNotLeader)
}

// leadReturned ends the term when lead returns, with err.
func (f *Fence) leadReturned(err error) {
	f.mu.Lock()
	f.early = f.ended == nil
	f.mu.Unlock()
	if err != nil {
		f.e.log.Error("the leader's work failed", "err", err)
	}
	if err != nil {
		f.close(fmt.Errorf("leader: the term ended: lead returned an error (%v): %w", err, ErrNotLeader))
		return
	}
	f.close(fmt.Errorf("leader: the term ended: lead returned: %w", ErrNotLeader))
}

func (f *Fence) wasAcquired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acquired
}

func (f *Fence) returnedEarly() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.early
}

// fencedLock is the LeaseLock client-go's LeaderElector writes through;
// it moves the term's deadline on every successful write naming this
// replica, and ends the term before the Lease is released.
type fencedLock struct {
	resourcelock.LeaseLock
	f *Fence
}

// Get reads the Lease. Once this replica has won it, a record naming
// another holder ends the term at once: client-go would go on trying to
// renew until its deadline.
func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.LeaseLock.Get(ctx)
	if err != nil {
		return r, raw, err
	}
	l.f.e.observed(r.HolderIdentity, r.LeaderTransitions)
	if r.HolderIdentity != l.Identity() && l.f.wasAcquired() {
		l.f.close(fmt.Errorf("leader: the term ended: the Lease is held by %q: %w", r.HolderIdentity, ErrNotLeader))
	}
	return r, raw, nil
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, r, l.LeaseLock.Create)
}

// Update renews, takes or releases the Lease. client-go releases by
// writing a record without a holder: the term ends first, and the Lease
// is released only once lead has returned, or not at all if lead does not
// return before the release's own deadline (RenewDeadline).
func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if r.HolderIdentity != l.Identity() {
		l.f.close(fmt.Errorf("leader: the term ended: the replica is handing over the Lease: %w", ErrNotLeader))
		select {
		case <-l.f.leadDone:
		case <-ctx.Done():
			return fmt.Errorf("leader: not releasing Lease %s: the leader's work did not return in time: %w", l.Describe(), ctx.Err())
		}
	}
	return l.write(ctx, r, l.LeaseLock.Update)
}

func (l *fencedLock) write(ctx context.Context, r resourcelock.LeaderElectionRecord, w func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	start := l.f.clock().Now()
	if err := w(ctx, r); err != nil {
		return err
	}
	if r.HolderIdentity == l.Identity() {
		l.f.renewedAt(start)
	}
	l.f.e.observed(r.HolderIdentity, r.LeaderTransitions)
	return nil
}
