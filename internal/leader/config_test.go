package leader

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/testtool"
)

// nowhere is a client configuration New accepts; New makes no request,
// and the tests that use it make none either.
var nowhere = &rest.Config{Host: "https://127.0.0.1:1"}

// TestConfigErrors: each bad Config is refused by New with an error that
// names the field and the reason.
func TestConfigErrors(t *testing.T) {
	ok := Config{REST: nowhere, Namespace: "anvil"}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no REST", with(func(c *Config) { c.REST = nil }), []string{"Config.REST is nil"}},
		{"no namespace", with(func(c *Config) { c.Namespace = "" }), []string{"Config.Namespace is empty"}},
		{"bad namespace", with(func(c *Config) { c.Namespace = "Anvil_NS" }), []string{`Config.Namespace "Anvil_NS" is not a namespace name`}},
		{"bad name", with(func(c *Config) { c.Name = "anvil leader" }), []string{`Config.Name "anvil leader" is not a Lease name`}},
		{"negative", with(func(c *Config) { c.RetryPeriod = -time.Second }), []string{"Config.RetryPeriod is negative (-1s)"}},
		{"fractional lease", with(func(c *Config) { c.LeaseDuration = 2500 * time.Millisecond }),
			[]string{"LeaseDuration 2.5s is not a whole number of seconds", "leaseDurationSeconds"}},
		{"deadline not shorter than the lease", with(func(c *Config) { c.LeaseDuration, c.RenewDeadline = 5*time.Second, 5*time.Second }),
			[]string{"RenewDeadline 5s must be shorter than LeaseDuration 5s", "before another replica may take the Lease"}},
		// The default deadline (10s) against a lease the caller shortened:
		// the error says which value was not the caller's.
		{"default deadline, short lease", with(func(c *Config) { c.LeaseDuration = 5 * time.Second }),
			[]string{"RenewDeadline 10s (the default) must be shorter than LeaseDuration 5s"}},
		{"retry does not fit the deadline", with(func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 3*time.Second, time.Second, 900*time.Millisecond
		}),
			[]string{"RetryPeriod 900ms ×1.2 must be shorter than RenewDeadline 1s", "more than one try"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.cfg)
			if err == nil {
				t.Fatalf("New = %+v, nil; want an error", e.cfg)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v; want it to say %q", err, w)
				}
			}
		})
	}
}

// TestConfigDefaults: zero fields get the documented defaults, and two
// replicas on one host get different identities.
func TestConfigDefaults(t *testing.T) {
	a, err := New(Config{REST: nowhere, Namespace: "anvil"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{REST: nowhere, Namespace: "anvil"})
	if err != nil {
		t.Fatal(err)
	}
	c := a.cfg
	if c.Name != DefaultName || c.LeaseDuration != DefaultLeaseDuration || c.RenewDeadline != DefaultRenewDeadline || c.RetryPeriod != DefaultRetryPeriod {
		t.Errorf("defaults: name %q, durations %v/%v/%v", c.Name, c.LeaseDuration, c.RenewDeadline, c.RetryPeriod)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.Identity(), host+"-") || a.Identity() == b.Identity() {
		t.Errorf("identities %q and %q; want %q and a suffix of each its own", a.Identity(), b.Identity(), host+"-")
	}
	if err := a.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "lead is nil") {
		t.Errorf("Run(nil lead) = %v; want an error saying lead is nil", err)
	}
}

// TestRunOnce: an Elector campaigns once at a time; a second Run while
// the first campaigns (here against an address that refuses) is refused.
func TestRunOnce(t *testing.T) {
	e, err := New(Config{REST: nowhere, Namespace: "anvil", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	idle := func(ctx context.Context) error { <-ctx.Done(); return nil }
	go func() { done <- e.Run(ctx, idle) }()
	testtool.WaitFor(t, "the first Run to start", e.running.Load)
	if err := e.Run(ctx, idle); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("a second Run = %v; want an error saying it is already running", err)
	}
	cancel()
	if err := testtool.Receive(t, done, "the first Run to return"); err != nil {
		t.Errorf("Run = %v once its context ended; want nil", err)
	}
}

// gauge reads the anvil_leader gauge.
func gauge(t testing.TB) float64 {
	t.Helper()
	var m dto.Metric
	if err := leaderGauge.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestFenceDeadline: on a fake clock, with no API server: a term's Fence
// is open until RenewDeadline after the start of its last successful
// renewal, and closes then on its own, cancelling the lead context,
// without client-go noticing anything; once closed it stays closed.
func TestFenceDeadline(t *testing.T) {
	const deadline = 10 * time.Second
	e, err := New(Config{REST: nowhere, Namespace: "anvil", Identity: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	e.clock = fake
	campaign, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &Fence{e: e, run: context.Background(), end: cancel, leadDone: make(chan struct{})}
	before := gauge(t)

	// The write that won the Lease was sent at the clock's time.
	f.renewedAt(fake.Now())
	if !f.open(campaign) {
		t.Fatal("open: the term ended before it began")
	}
	if err := f.Check(); err != nil {
		t.Fatalf("Check just after winning: %v", err)
	}
	if !e.IsLeader() || gauge(t) != before+1 {
		t.Fatalf("IsLeader %v, gauge %v (was %v); want true and one more", e.IsLeader(), gauge(t), before)
	}

	fake.Advance(deadline - time.Millisecond)
	if err := f.Check(); err != nil {
		t.Fatalf("Check 1ms before the deadline: %v", err)
	}
	// A renewal sent 2s ago and answered now moves the deadline to 8s
	// from now: its start counts, not its answer.
	f.renewedAt(fake.Now().Add(-2 * time.Second))
	fake.Advance(deadline - 2*time.Second - time.Millisecond)
	if err := f.Check(); err != nil {
		t.Fatalf("Check 1ms before the renewed deadline: %v", err)
	}
	fake.Advance(time.Millisecond)
	// The deadline's timer cancels the campaign, and so the lead
	// context, by itself.
	testtool.Receive(t, campaign.Done(), "the campaign's cancellation at the deadline")
	err = f.Check()
	if !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "not renewed for 10s, the renew deadline is 10s") {
		t.Fatalf("Check at the deadline: %v; want ErrNotLeader, not renewed for 10s", err)
	}
	if e.IsLeader() || gauge(t) != before {
		t.Errorf("after the deadline: IsLeader %v, gauge %v; want false, %v", e.IsLeader(), gauge(t), before)
	}

	// A renewal that succeeds after the term ended does not reopen it.
	f.renewedAt(fake.Now())
	if err := f.Check(); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Check after a late renewal: %v; want ErrNotLeader", err)
	}
}

// TestFenceSlowWin: a write of the Lease that took longer than the renew
// deadline wins the Lease with the term already over: lead is not called.
func TestFenceSlowWin(t *testing.T) {
	e, err := New(Config{REST: nowhere, Namespace: "anvil", Identity: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	e.clock = fake
	campaign, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &Fence{e: e, run: context.Background(), end: cancel, leadDone: make(chan struct{})}
	f.renewedAt(fake.Now().Add(-DefaultRenewDeadline))
	if f.open(campaign) {
		t.Error("open: a term won by a write sent a whole renew deadline ago began")
	}
	if err := f.Check(); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Check: %v; want ErrNotLeader", err)
	}
}

// TestNoFence: a context of no term carries no Fence, and a nil Fence
// refuses every write.
func TestNoFence(t *testing.T) {
	f := FenceFrom(context.Background())
	if err := f.Check(); !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "no leadership term") {
		t.Errorf("FenceFrom(Background).Check() = %v; want ErrNotLeader, no leadership term", err)
	}
}
