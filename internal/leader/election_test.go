package leader

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// The election's durations in these tests: short, so a takeover after a
// lost leader takes seconds; in the ratios of the defaults.
const (
	testLease = 2 * time.Second
	testRenew = time.Second
	testRetry = 250 * time.Millisecond
	testNS    = "anvil-leader-test"
)

// Bounds that keep a broken election from hanging a test; they measure
// nothing.
const (
	pollEvery = 20 * time.Millisecond
	waitBound = 60 * time.Second
)

// TestElection runs candidates against one real API server; each subtest
// has a Lease of its own.
func TestElection(t *testing.T) {
	c := kubetest.Start(t)
	c.JSON(t, http.MethodPost, "/api/v1/namespaces",
		map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": testNS}}, http.StatusCreated)

	t.Run("OneLeaderAndCleanHandover", func(t *testing.T) { testOneLeaderAndCleanHandover(t, c) })
	t.Run("PartitionedLeaderIsFencedAndReplaced", func(t *testing.T) { testPartitionedLeader(t, c) })
	t.Run("ReleaseWaitsForLead", func(t *testing.T) { testReleaseWaitsForLead(t, c) })
	t.Run("FailedLeadCampaignsAgain", func(t *testing.T) { testFailedLeadCampaignsAgain(t, c) })
	t.Run("LeaseTakenByAnother", func(t *testing.T) { testLeaseTakenByAnother(t, c) })
}

// testLeaseTakenByAnother: when the Lease is found held by another (here
// written by the test, as a replica that took it while this one was
// suspended would), the term ends at its next attempt to renew, long
// before its renew deadline, and the Lease is not released from under the
// other holder.
func testLeaseTakenByAnother(t *testing.T, c *kubetest.Cluster) {
	a := newArena(t)
	// A renew deadline far longer than the retry: the Fence must close
	// by what the renewal read, not by its deadline.
	a.leaseDuration, a.renewDeadline = 20*time.Second, 15*time.Second
	cands := a.start(c, "taken", "a")
	w := &leaseWatch{c: c, name: "taken"}
	id := "taken-a"
	w.until(t, "a leader", func(l lease) bool { return a.leads(l.Holder) })
	f := a.fence(id)

	path := "/apis/coordination.k8s.io/v1/namespaces/" + testNS + "/leases/taken"
	for {
		obj := c.JSON(t, http.MethodGet, path, nil, http.StatusOK)
		spec := obj["spec"].(map[string]any)
		spec["holderIdentity"] = "intruder"
		spec["leaseTransitions"] = spec["leaseTransitions"].(float64) + 1
		status, b := c.Do(t, http.MethodPut, path, obj, "application/json")
		if status == http.StatusOK {
			break
		}
		if status != http.StatusConflict { // the leader renewed meanwhile: read again
			t.Fatalf("PUT %s: status %d: %s", path, status, b)
		}
	}
	testtool.WaitFor(t, "the leader's Fence to close", func() bool { return f.Check() != nil })
	if err := f.Check(); !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), `the Lease is held by "intruder"`) {
		t.Errorf("the Fence: %v; want ErrNotLeader, held by \"intruder\"", err)
	}
	if cands[id].e.IsLeader() {
		t.Errorf("%s: IsLeader() while the Lease names another", id)
	}
	cands[id].stop(t)
	if l, _ := w.read(t); l.Holder != "intruder" {
		t.Errorf("the Lease's holder after %s stopped: %q; want the intruder's (not released from under it)", id, l.Holder)
	}
}

// testFailedLeadCampaignsAgain: a lead that returns an error ends its
// term (its Fence closes, the Lease is released) and the replica
// campaigns again instead of stopping; alone, it is elected again.
func testFailedLeadCampaignsAgain(t *testing.T, c *kubetest.Cluster) {
	a := newArena(t)
	a.failTerms = 1
	cands := a.start(c, "fail", "a")
	w := &leaseWatch{c: c, name: "fail"}
	id := "fail-a"
	second := w.until(t, "a second term", func(l lease) bool { return len(a.terms()) == 2 && a.leads(l.Holder) })
	// The release between the terms cleared the holder, so the second
	// acquisition counts as a transition; a renewal would not.
	if second.Holder != id || second.Transitions != 1 {
		t.Errorf("the Lease after the failed term: holder %q, leaseTransitions %d; want %q, 1", second.Holder, second.Transitions, id)
	}
	select {
	case err := <-cands[id].done:
		t.Fatalf("Run returned (%v) after lead failed; it must campaign again", err)
	default:
	}
}

// testReleaseWaitsForLead: a lead that takes a while to return after its
// context ended (an engine finishing the step it was in) keeps the Lease
// until it has returned, and only then hands it over: the next lead
// begins after it returned (the arena), and sooner than an expiry would
// allow. The Fence is closed meanwhile.
func testReleaseWaitsForLead(t *testing.T, c *kubetest.Cluster) {
	a := newArena(t)
	// Well within RenewDeadline, the release's own deadline.
	a.linger = 600 * time.Millisecond
	cands := a.start(c, "linger", "a", "b")
	w := &leaseWatch{c: c, name: "linger"}

	first := w.until(t, "a first leader", func(l lease) bool { return a.leads(l.Holder) })
	old := first.Holder
	cands[old].stop(t)
	next := w.until(t, "the next leader", func(l lease) bool { return l.Holder != "" && l.Holder != old && a.leads(l.Holder) })
	last, _ := w.last(old)
	gap := next.Acquire.Sub(last.Renew)
	t.Logf("handover after a lead that lingered: %s acquired the Lease %v after %s's last renewal", next.Holder, gap, old)
	if gap >= testLease {
		t.Errorf("%s acquired the Lease %v after %s's last renewal; a released Lease is taken in less than the lease duration %v", next.Holder, gap, old, testLease)
	}
}

// testOneLeaderAndCleanHandover: of three candidates exactly one leads,
// as the Lease and every candidate's status say; a leader stopped
// cleanly releases the Lease, and the next takes over without waiting
// out the lease.
func testOneLeaderAndCleanHandover(t *testing.T, c *kubetest.Cluster) {
	gauge0, transitions0 := gauge(t), counter(t)
	a := newArena(t)
	cands := a.start(c, "handover", "a", "b", "c")
	w := &leaseWatch{c: c, name: "handover"}

	first := w.until(t, "a first leader", func(l lease) bool { return a.leads(l.Holder) })
	for id, cd := range cands {
		if got := cd.e.IsLeader(); got != (id == first.Holder) {
			t.Errorf("%s: IsLeader() = %v while the Lease names %s", id, got, first.Holder)
		}
	}
	// The others see who leads.
	testtool.WaitFor(t, "every candidate to see the leader", func() bool {
		for _, cd := range cands {
			if cd.e.Status().Holder != first.Holder {
				return false
			}
		}
		return true
	})
	if g := gauge(t); g != gauge0+1 {
		t.Errorf("anvil_leader = %v; want %v (one leader in this process)", g, gauge0+1)
	}
	// The leader renews and keeps the Lease: the others do not take it
	// while it does (the arena would see two leads).
	renewed := first
	for range 3 {
		renewed = w.until(t, "a renewal", func(l lease) bool { return l.Renew.After(renewed.Renew) || l.Holder != first.Holder })
		if renewed.Holder != first.Holder || !renewed.Acquire.Equal(first.Acquire) || renewed.Transitions != first.Transitions {
			t.Fatalf("the Lease changed hands while its leader ran: %+v after %+v", renewed, first)
		}
	}

	// A clean stop: the Lease is released once lead has returned, and
	// another candidate takes it at its next retry.
	old := first.Holder
	cands[old].stop(t)
	next := w.until(t, "the next leader", func(l lease) bool { return l.Holder != "" && l.Holder != old && a.leads(l.Holder) })
	last, ok := w.last(old)
	if !ok {
		t.Fatalf("no record of %s's Lease", old)
	}
	// Taking over an expired lease takes at least LeaseDuration after the
	// last renewal (testPartitionedLeader): a takeover sooner than that
	// was one of a released Lease.
	gap := next.Acquire.Sub(last.Renew)
	t.Logf("handover of a released Lease: %s acquired it %v after %s's last renewal", next.Holder, gap, old)
	if gap >= testLease {
		t.Errorf("%s acquired the Lease %v after %s's last renewal; a released Lease is taken in less than the lease duration %v", next.Holder, gap, old, testLease)
	}
	if next.Transitions != last.Transitions+1 {
		t.Errorf("leaseTransitions %d after %d; want one more", next.Transitions, last.Transitions)
	}
	if err := a.fence(old).Check(); !errors.Is(err, ErrNotLeader) {
		t.Errorf("%s's Fence after its clean stop: %v; want ErrNotLeader", old, err)
	}
	for _, cd := range cands {
		cd.stop(t)
	}
	if g := gauge(t); g != gauge0 {
		t.Errorf("anvil_leader = %v after every candidate stopped; want %v", g, gauge0)
	}
	// Each term began and ended once.
	if got, want := counter(t)-transitions0, float64(2*len(a.terms())); got != want {
		t.Errorf("anvil_leader_transitions_total grew by %v over terms %v; want %v", got, a.terms(), want)
	}
}

// testPartitionedLeader: the leader loses the API server without
// releasing the Lease. Its Fence closes before another candidate leads
// (checked when each lead begins, by the arena); the next leader takes
// over once the lease has expired, not sooner, and within one lease
// duration and two retries; the old leader keeps running, sees the new
// holder once it reaches the API server again, and is elected again when
// the others stop.
func testPartitionedLeader(t *testing.T, c *kubetest.Cluster) {
	a := newArena(t)
	cands := a.start(c, "partition", "a", "b", "c")
	w := &leaseWatch{c: c, name: "partition"}

	first := w.until(t, "a first leader", func(l lease) bool { return a.leads(l.Holder) })
	old := first.Holder
	oldFence := a.fence(old)
	cands[old].cut.Store(true)

	next := w.until(t, "a leader after the partition", func(l lease) bool { return l.Holder != "" && l.Holder != old && a.leads(l.Holder) })
	last, ok := w.last(old)
	if !ok {
		t.Fatalf("no record of %s's Lease", old)
	}
	// The times are the candidates' own stamps in the Lease: the new
	// leader took the Lease no sooner than LeaseDuration after the old
	// leader's last renewal began (the API server keeps microseconds).
	gap := next.Acquire.Sub(last.Renew)
	t.Logf("takeover of an expired Lease: %s acquired it %v after %s's last renewal", next.Holder, gap, old)
	if gap < testLease-time.Microsecond {
		t.Errorf("%s acquired the Lease %v after %s's last renewal, before the lease duration %v", next.Holder, gap, old, testLease)
	}
	// And no later than the lease plus two attempts to acquire it: one
	// until the others saw that renewal, one after it expired; each waits
	// RetryPeriod plus client-go's jitter of up to RetryPeriod×1.2.
	// RenewDeadline more is room for the requests themselves on a busy
	// machine.
	if bound := testLease + 2*time.Duration((1+jitter)*float64(testRetry)) + testRenew; gap > bound {
		t.Errorf("%s acquired the Lease %v after %s's last renewal; want at most %v", next.Holder, gap, old, bound)
	}
	if next.Transitions != last.Transitions+1 {
		t.Errorf("leaseTransitions %d after %d; want one more", next.Transitions, last.Transitions)
	}
	err := oldFence.Check()
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("the partitioned leader's Fence: %v; want ErrNotLeader", err)
	}
	t.Logf("the partitioned leader's Fence: %v", err)
	if cands[old].e.IsLeader() {
		t.Errorf("%s: IsLeader() after losing the Lease", old)
	}
	select {
	case err := <-cands[old].done:
		t.Fatalf("%s's Run returned (%v) on losing the Lease; it must campaign again", old, err)
	default:
	}

	// Reconnected, it sees the new leader and stays a follower.
	cands[old].cut.Store(false)
	testtool.WaitFor(t, "the old leader to see the new one", func() bool { return cands[old].e.Status().Holder == next.Holder })
	if cands[old].e.IsLeader() {
		t.Errorf("%s: IsLeader() while %s holds the Lease", old, next.Holder)
	}

	// With the others gone it is elected again, in a new term.
	for id, cd := range cands {
		if id != old {
			cd.stop(t)
		}
	}
	w.until(t, "the old leader's new term", func(l lease) bool { return l.Holder == old && a.leads(old) })
	if a.fence(old) == oldFence {
		t.Error("the new term has the old term's Fence")
	}
	if err := oldFence.Check(); !errors.Is(err, ErrNotLeader) {
		t.Errorf("the old term's Fence reopened with the new term: %v", err)
	}
	if err := a.fence(old).Check(); err != nil {
		t.Errorf("the new term's Fence: %v", err)
	}
	cands[old].stop(t)
}

// arena runs the candidates of one subtest and checks, as each lead
// begins, that no other lead runs and every other candidate's Fence is
// closed.
type arena struct {
	t  *testing.T
	mu sync.Mutex
	// leading holds the candidates inside lead; fences each one's last
	// term; order the identities in the order their leads began.
	leading map[string]bool
	fences  map[string]*Fence
	order   []string
	// linger is how long lead goes on after its context ended, checking
	// its Fence, before it returns.
	linger time.Duration
	// failTerms is how many of the first terms fail: their lead returns
	// errLead at once.
	failTerms int
	// leaseDuration and renewDeadline, if set, replace testLease and
	// testRenew.
	leaseDuration, renewDeadline time.Duration
}

var errLead = errors.New("the leader's work failed (a test's lead)")

func newArena(t *testing.T) *arena {
	return &arena{t: t, leading: map[string]bool{}, fences: map[string]*Fence{}}
}

// candidate is one replica: an Elector whose requests fail while cut is
// set (a network partition between it and the API server).
type candidate struct {
	e      *Elector
	cut    atomic.Bool
	cancel context.CancelFunc
	done   chan error // Run's result
	once   sync.Once
}

// start starts a candidate per identity, campaigning for Lease name; each
// is stopped when t ends if the test has not stopped it.
func (a *arena) start(c *kubetest.Cluster, name string, ids ...string) map[string]*candidate {
	t := a.t
	cands := map[string]*candidate{}
	for _, id := range ids {
		cd := &candidate{done: make(chan error, 1)}
		rc := &rest.Config{
			Host:            c.URL,
			BearerToken:     c.Token,
			TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert},
			WrapTransport:   func(rt http.RoundTripper) http.RoundTripper { return cutter{rt, &cd.cut} },
		}
		e, err := New(Config{
			REST: rc, Namespace: testNS, Name: name, Identity: name + "-" + id,
			LeaseDuration: cmp.Or(a.leaseDuration, testLease), RenewDeadline: cmp.Or(a.renewDeadline, testRenew), RetryPeriod: testRetry,
			Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		cd.e = e
		ctx, cancel := context.WithCancel(context.Background())
		cd.cancel = cancel
		go func() { cd.done <- e.Run(ctx, a.lead(e.Identity())) }()
		cands[e.Identity()] = cd
		t.Cleanup(func() { cd.stop(t) })
	}
	return cands
}

// stop cancels the candidate's Run and waits for it to return nil.
func (cd *candidate) stop(t testing.TB) {
	t.Helper()
	cd.once.Do(func() {
		cd.cancel()
		if err := testtool.Receive(t, cd.done, cd.e.Identity()+"'s Run to return"); err != nil {
			t.Errorf("%s: Run = %v; want nil once its context ended", cd.e.Identity(), err)
		}
	})
}

// cutter fails every request while cut is set.
type cutter struct {
	next http.RoundTripper
	cut  *atomic.Bool
}

func (c cutter) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("partitioned from the API server by the test")
	}
	return c.next.RoundTrip(r)
}

// lead is the lead function of candidate id: it checks the arena's
// invariants, then leads until its context ends.
func (a *arena) lead(id string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		f := FenceFrom(ctx)
		a.mu.Lock()
		if err := f.Check(); err != nil {
			a.t.Errorf("%s: lead called with its Fence closed: %v", id, err)
		}
		if len(a.leading) > 0 {
			a.t.Errorf("%s leads while %v still lead", id, slices.Sorted(maps.Keys(a.leading)))
		}
		for other, of := range a.fences {
			if err := of.Check(); other != id && !errors.Is(err, ErrNotLeader) {
				a.t.Errorf("%s leads while %s's Fence is open (%v)", id, other, err)
			}
		}
		a.fences[id] = f
		a.order = append(a.order, id)
		if len(a.order) <= a.failTerms {
			a.mu.Unlock()
			return errLead
		}
		a.leading[id] = true
		a.mu.Unlock()

		<-ctx.Done()
		if err := f.Check(); !errors.Is(err, ErrNotLeader) {
			a.t.Errorf("%s: its lead context ended and its Fence is open (%v)", id, err)
		}
		time.Sleep(a.linger)
		a.mu.Lock()
		delete(a.leading, id)
		a.mu.Unlock()
		return nil
	}
}

// leads reports whether id is inside lead now.
func (a *arena) leads(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leading[id]
}

// fence returns id's last term's Fence.
func (a *arena) fence(id string) *Fence {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fences[id]
}

// terms returns the identities in the order their terms began.
func (a *arena) terms() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.order)
}

// lease is the part of a Lease the election writes.
type lease struct {
	Holder          string
	Acquire, Renew  time.Time
	Transitions     int
	DurationSeconds int
}

// leaseWatch reads one Lease over and over and keeps every distinct
// record it read.
type leaseWatch struct {
	c    *kubetest.Cluster
	name string
	seen []lease
}

// until reads the Lease until cond holds of it, and returns that record.
func (w *leaseWatch) until(t testing.TB, what string, cond func(lease) bool) lease {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		l, ok := w.read(t)
		if ok {
			if n := len(w.seen); n == 0 || w.seen[n-1] != l {
				w.seen = append(w.seen, l)
			}
			if cond(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; the Lease's records: %+v", waitBound, what, w.seen)
		}
		time.Sleep(pollEvery)
	}
}

// last returns the last record read that names holder.
func (w *leaseWatch) last(holder string) (lease, bool) {
	for i := len(w.seen) - 1; i >= 0; i-- {
		if w.seen[i].Holder == holder {
			return w.seen[i], true
		}
	}
	return lease{}, false
}

// read reads the Lease; ok is false if there is none yet.
func (w *leaseWatch) read(t testing.TB) (l lease, ok bool) {
	t.Helper()
	status, b := w.c.Do(t, http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/"+testNS+"/leases/"+w.name, nil, "application/json")
	switch status {
	case http.StatusNotFound:
		return lease{}, false
	case http.StatusOK:
	default:
		t.Fatalf("reading Lease %s: status %d: %s", w.name, status, b)
	}
	var obj struct {
		Spec struct {
			HolderIdentity       string    `json:"holderIdentity"`
			AcquireTime          time.Time `json:"acquireTime"`
			RenewTime            time.Time `json:"renewTime"`
			LeaseTransitions     int       `json:"leaseTransitions"`
			LeaseDurationSeconds int       `json:"leaseDurationSeconds"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatalf("reading Lease %s: %v in %s", w.name, err, b)
	}
	s := obj.Spec
	return lease{s.HolderIdentity, s.AcquireTime, s.RenewTime, s.LeaseTransitions, s.LeaseDurationSeconds}, true
}

// counter reads anvil_leader_transitions_total.
func counter(t testing.TB) float64 {
	t.Helper()
	var m dto.Metric
	if err := leaderTransitions.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
