package httplimit

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
)

// clock is a Config.Now that moves only when told.
func newClock() *clock.Fake { return clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// ipN is the i-th address of 10.0.0.0/8.
func ipN(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }

func (r Refusal) String() string { return fmt.Sprintf("%s after %s", r.Limit, r.RetryAfter) }

// outcome is "" for an admitted request, else the refusing limit.
func outcome(r Refusal, ok bool) Limit {
	if ok {
		return ""
	}
	return r.Limit
}

// step is one request (or a clock step, or releases) in a scenario.
type step struct {
	advance time.Duration // move the clock first
	from    string        // client address; "" means 10.0.0.1
	release int           // release this many held tickets (oldest first) instead of asking
	want    Limit         // "" admitted, else the refusing limit
	retry   time.Duration // the refusal's RetryAfter, when not 0
}

func TestAcquire(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name:  "no limits",
			cfg:   Config{},
			steps: []step{{}, {}, {}, {}, {}},
		},
		{
			name: "rate: burst, then one per 1/rate",
			cfg:  Config{Rate: 10, Burst: 3},
			steps: []step{
				{}, {}, {},
				{want: LimitRate, retry: 100 * time.Millisecond},
				{advance: 50 * time.Millisecond, want: LimitRate, retry: 50 * time.Millisecond},
				{advance: 50 * time.Millisecond},
				{want: LimitRate},
				{advance: time.Second}, {}, {}, // refilled to the burst, not beyond
				{want: LimitRate},
			},
		},
		{
			name: "rate: burst defaults to one second",
			cfg:  Config{Rate: 2},
			steps: []step{
				{}, {}, {want: LimitRate, retry: 500 * time.Millisecond},
			},
		},
		{
			name: "rate: fractional",
			cfg:  Config{Rate: 0.5},
			steps: []step{
				{}, {want: LimitRate, retry: 2 * time.Second},
				{advance: 2 * time.Second},
			},
		},
		{
			name: "rate is shared by all clients",
			cfg:  Config{Rate: 1, Burst: 2},
			steps: []step{
				{from: "10.0.0.1"}, {from: "10.0.0.2"}, {from: "10.0.0.3", want: LimitRate},
			},
		},
		{
			name: "concurrency",
			cfg:  Config{Concurrency: 2},
			steps: []step{
				{from: "10.0.0.1"}, {from: "10.0.0.2"},
				{from: "10.0.0.3", want: LimitConcurrency, retry: time.Second},
				{release: 1},
				{from: "10.0.0.3"},
				{from: "10.0.0.4", want: LimitConcurrency},
			},
		},
		{
			name: "a refusal takes no token",
			cfg:  Config{Rate: 1, Burst: 2, Concurrency: 1},
			steps: []step{
				{}, {want: LimitConcurrency}, {want: LimitConcurrency}, {release: 1},
				{}, // the second token is still there
				{release: 1},
				{want: LimitRate},
			},
		},
		{
			name: "client rate",
			cfg:  Config{ClientRate: 2, ClientBurst: 2},
			steps: []step{
				{from: "10.0.0.1"}, {from: "10.0.0.1"},
				{from: "10.0.0.1", want: LimitClientRate, retry: 500 * time.Millisecond},
				{from: "10.0.0.2"}, {from: "10.0.0.2"}, // another client has its own bucket
				{from: "10.0.0.2", want: LimitClientRate},
				{advance: 500 * time.Millisecond, from: "10.0.0.1"},
				{from: "10.0.0.1", want: LimitClientRate},
			},
		},
		{
			name: "client concurrency",
			cfg:  Config{ClientConcurrency: 2},
			steps: []step{
				{from: "10.0.0.1"}, {from: "10.0.0.1"},
				{from: "10.0.0.1", want: LimitClientConcurrency, retry: time.Second},
				{from: "10.0.0.2"},
				{release: 1},
				{from: "10.0.0.1"},
			},
		},
		{
			name: "the client's own limit is named first",
			cfg:  Config{Rate: 1, Burst: 1, ClientRate: 1, ClientBurst: 1},
			steps: []step{
				{from: "10.0.0.1"},
				{from: "10.0.0.1", want: LimitClientRate},
				{from: "10.0.0.2", want: LimitRate},
			},
		},
		{
			name: "a client refused by the overall rate keeps its token",
			cfg:  Config{Rate: 1, Burst: 1, ClientRate: 1, ClientBurst: 1},
			steps: []step{
				{from: "10.0.0.2"},
				{from: "10.0.0.1", want: LimitRate},
				{advance: time.Second, from: "10.0.0.1"},
			},
		},
		{
			name: "IPv6 and the zero address are clients too",
			cfg:  Config{ClientRate: 1, ClientBurst: 1},
			steps: []step{
				{from: "2001:db8::1"}, {from: "2001:db8::1", want: LimitClientRate},
				{from: "zero"}, {from: "zero", want: LimitClientRate},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			tc.cfg.Clock = clk
			l := New(tc.cfg)
			var held []Ticket
			for i, s := range tc.steps {
				clk.Advance(s.advance)
				if s.release > 0 {
					for range s.release {
						held[0].Release()
						held = held[1:]
					}
					continue
				}
				from := addr("10.0.0.1")
				switch s.from {
				case "":
				case "zero":
					from = netip.Addr{}
				default:
					from = addr(s.from)
				}
				tk, r, ok := l.Acquire(from)
				if got := outcome(r, ok); got != s.want {
					t.Fatalf("step %d: Acquire(%v) = %v, %v; want %q", i, from, r, ok, s.want)
				}
				if ok {
					held = append(held, tk)
				}
				if s.retry != 0 && r.RetryAfter != s.retry {
					t.Errorf("step %d: RetryAfter = %s; want %s", i, r.RetryAfter, s.retry)
				}
			}
			if got := l.InFlight(); got != len(held) {
				t.Errorf("InFlight = %d; want %d", got, len(held))
			}
			for _, tk := range held {
				tk.Release()
			}
			if got := l.InFlight(); got != 0 {
				t.Errorf("InFlight after releasing everything = %d; want 0", got)
			}
		})
	}
}

// TestLongRunRate checks the bucket's arithmetic over many steps: in T
// seconds at most burst + rate*T requests are admitted, and when asked
// often enough, exactly that many.
func TestLongRunRate(t *testing.T) {
	clk := newClock()
	l := New(Config{Rate: 500, Burst: 100, Clock: clk})
	admitted := 0
	for range 10000 { // 10,000 requests, one per 0.1 ms: 10,000 req/s for 1 s
		if tk, _, ok := l.Acquire(addr("10.0.0.1")); ok {
			admitted++
			tk.Release()
		}
		clk.Advance(100 * time.Microsecond)
	}
	if want := 100 + 500; admitted < want-1 || admitted > want {
		t.Errorf("admitted %d in 1 s at 500/s with a burst of 100; want %d", admitted, want)
	}
}

// TestForgetsIdleClients checks that client state is kept only while it
// matters: a client with a full bucket and nothing in flight is forgotten
// at the next sweep; one with a request in flight or a bucket still
// refilling is kept.
func TestForgetsIdleClients(t *testing.T) {
	clk := newClock()
	l := New(Config{ClientRate: 1, ClientBurst: 30, ClientConcurrency: 4, Clock: clk})
	busy, _, _ := l.Acquire(addr("10.0.0.1")) // held across the sweep
	for range 30 {
		if tk, _, ok := l.Acquire(addr("10.0.0.2")); ok { // empties its bucket
			tk.Release()
		}
	}
	tk, _, _ := l.Acquire(addr("10.0.0.3")) // one token short of full
	tk.Release()
	if got := l.Clients(); got != 3 {
		t.Fatalf("Clients = %d; want 3", got)
	}
	clk.Advance(sweepEvery)
	l.Acquire(addr("10.0.0.9")) // any request sweeps when it is time; held
	// 10.0.0.3 refilled its one token in 1 s: forgotten. 10.0.0.2 needs
	// 30 s: kept. 10.0.0.1 has a request in flight: kept.
	if got := l.Clients(); got != 3 {
		t.Errorf("Clients after a sweep = %d; want 3 (10.0.0.1 in flight, 10.0.0.2 refilling, 10.0.0.9 new)", got)
	}
	busy.Release()
	clk.Advance(sweepEvery)
	l.Acquire(addr("10.0.0.9"))
	if got := l.Clients(); got != 2 {
		t.Errorf("Clients after a second sweep = %d; want 2 (10.0.0.2 refilling, 10.0.0.9 in flight)", got)
	}
	// A forgotten client starts again as new: a full bucket, nothing in
	// flight.
	for i := range 4 {
		if _, r, ok := l.Acquire(addr("10.0.0.3")); !ok {
			t.Fatalf("request %d of a forgotten client refused: %s", i, r)
		}
	}
}

// TestSpoofedFlood sends requests from 100,000 made-up addresses: the table
// never grows past MaxClients, the addresses past it share one client's
// limits (so the flood stays limited), and once the flood stops its state
// is forgotten and a real client is tracked again.
func TestSpoofedFlood(t *testing.T) {
	clk := newClock()
	const maxClients = 1000
	l := New(Config{ClientRate: 1, ClientBurst: 5, MaxClients: maxClients, Clock: clk})
	admitted := 0
	for i := range 100000 {
		if tk, _, ok := l.Acquire(ipN(i)); ok {
			admitted++
			tk.Release()
		}
		if n := l.Clients(); n > maxClients {
			t.Fatalf("after %d addresses: %d clients tracked; want at most %d", i+1, n, maxClients)
		}
		clk.Advance(10 * time.Microsecond) // 100,000 req/s, 1 s in all
	}
	// The first 1000 addresses each get a bucket of 5; the other 99,000
	// share one bucket of 5 that earns 1/s: a little over 1000 admitted,
	// nowhere near 100,000.
	if admitted < maxClients || admitted > maxClients+10 {
		t.Errorf("admitted %d of the flood; want about %d", admitted, maxClients+5)
	}
	clk.Advance(sweepEvery)
	tk, r, ok := l.Acquire(addr("192.0.2.1"))
	if !ok {
		t.Fatalf("a real client after the flood: %s; want admitted", r)
	}
	tk.Release()
	if n := l.Clients(); n != 1 {
		t.Errorf("after the flood stopped: %d clients tracked; want 1 (the flood's state forgotten)", n)
	}
}

// TestSweepWhenFull checks that a full table is swept when a new client
// comes (at most once a second), so a past burst of addresses does not
// push new clients into the shared bucket for long.
func TestSweepWhenFull(t *testing.T) {
	clk := newClock()
	l := New(Config{ClientRate: 100, ClientBurst: 1, MaxClients: 10, Clock: clk})
	for i := range 10 {
		tk, _, _ := l.Acquire(ipN(i))
		tk.Release()
	}
	clk.Advance(100 * time.Millisecond) // every bucket is full again
	for i := 10; i < 15; i++ {
		tk, r, ok := l.Acquire(ipN(i))
		if !ok {
			t.Fatalf("new client %v: %s; want admitted with its own bucket", ipN(i), r)
		}
		tk.Release()
	}
	if n := l.Clients(); n != 5 {
		t.Errorf("Clients = %d; want 5 (the idle 10 swept when the table was full)", n)
	}
}

func TestRefusalStatus(t *testing.T) {
	tests := []struct {
		r        Refusal
		wantCode int
		wantSecs int
	}{
		{Refusal{LimitRate, 2 * time.Millisecond}, 429, 1},
		{Refusal{LimitClientRate, 1500 * time.Millisecond}, 429, 2},
		{Refusal{LimitClientConcurrency, time.Second}, 429, 1},
		{Refusal{LimitConcurrency, time.Second}, 503, 1},
		{Refusal{LimitRate, 0}, 429, 1},
	}
	for _, tc := range tests {
		if got := tc.r.Status(); got != tc.wantCode {
			t.Errorf("%s: Status = %d; want %d", tc.r, got, tc.wantCode)
		}
		if got := tc.r.RetryAfterSeconds(); got != tc.wantSecs {
			t.Errorf("%s: RetryAfterSeconds = %d; want %d", tc.r, got, tc.wantSecs)
		}
	}
}
