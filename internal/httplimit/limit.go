// Package httplimit limits the requests of a public, unauthenticated HTTP
// path — anvil's boot path: iPXE scripts and binaries, boot environment
// files, OS images and metadata — so that a boot storm or a misbehaving
// client cannot take the whole server.
//
// A Limiter has four limits, each off when 0: a token bucket for the rate
// of all requests (Rate, Burst), a bound on requests in flight (being
// served) at once (Concurrency), and the same two per client address
// (ClientRate, ClientBurst, ClientConcurrency). A request is admitted only
// when every limit has room, and then takes a token from both buckets;
// a refused request takes nothing. Per-client state is bounded: a client
// whose bucket is full again and that has nothing in flight is forgotten
// (it would be treated no differently), and past MaxClients tracked
// clients, new ones share one bucket — a flood from made-up addresses
// grows no memory and stays limited.
//
// Handler answers refused requests 429 Too Many Requests (rate limits and
// the per-client concurrency limit: the client asks too much) or 503
// Service Unavailable (the overall concurrency limit: the server is busy),
// both with Retry-After, which iPXE and anvil's own fetches honour.
//
// A Pacer (pace.go) keeps admitted responses moving: each write gets a
// deadline, and a response whose client stops reading, or reads under a
// minimum average rate after a grace period, is cut — ending the request,
// so its place in the limits is released.
//
// The Limiter is pure: time comes from Config.Clock, so tests step a clock
// instead of sleeping; the Pacer's rule is pure too, its deadlines the
// network's. It knows nothing of Prometheus or of anvil's routes.
package httplimit

import (
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
)

// Limit names the limit that refused a request. The values are the limit
// label of anvil_http_boot_limited_total.
type Limit string

// The limits.
const (
	LimitRate              Limit = "rate"               // Config.Rate, all clients together
	LimitConcurrency       Limit = "concurrency"        // Config.Concurrency, all clients together
	LimitClientRate        Limit = "client_rate"        // Config.ClientRate, per client
	LimitClientConcurrency Limit = "client_concurrency" // Config.ClientConcurrency, per client
)

// Limits lists every Limit, for metrics that start at zero.
var Limits = []Limit{LimitRate, LimitConcurrency, LimitClientRate, LimitClientConcurrency}

const (
	// DefaultMaxClients bounds the clients tracked one by one: about 150
	// bytes each, so 1.5 MB at most, and more machines than boot within
	// a few seconds of each other in any one site.
	DefaultMaxClients = 10000
	// sweepEvery is how often clients that would be treated as new are
	// forgotten. Between sweeps, they cost memory only (bounded).
	sweepEvery = 10 * time.Second
	// fullSweepEvery is how often a full table may be swept again when a
	// new client finds it full: a sweep walks every client, so a flood of
	// new addresses must not trigger one per request.
	fullSweepEvery = time.Second
	// concurrencyRetry is the Retry-After of a concurrency refusal: when a
	// request in flight ends is not known, and boot files take about
	// that long on a busy link.
	concurrencyRetry = time.Second
)

// Config configures a Limiter. Every limit is off when 0.
type Config struct {
	// Rate is how many requests per second all clients together are
	// admitted, in the long run. 0: no limit.
	Rate float64
	// Burst is how many requests above Rate may be admitted at once (the
	// bucket's size). If 0, uses one second of Rate (at least 1).
	Burst int
	// Concurrency bounds the requests being served at once, all clients
	// together. 0: no limit.
	Concurrency int
	// ClientRate, ClientBurst and ClientConcurrency are the same limits
	// for each client address.
	ClientRate        float64
	ClientBurst       int
	ClientConcurrency int
	// MaxClients bounds the client addresses tracked one by one; past it,
	// new addresses share one client's limits. If 0, uses
	// DefaultMaxClients.
	MaxClients int
	// Clock is the time the rates are measured on. If nil, clock.Real.
	Clock clock.Clock
}

// Limiter decides which requests are admitted. It is safe for concurrent
// use.
type Limiter struct {
	rate, burst             float64
	concurrency             int
	clientRate, clientBurst float64
	clientConcurrency       int
	maxClients              int
	now                     func() time.Time

	mu        sync.Mutex
	all       bucket
	inFlight  int
	clients   map[netip.Addr]*client
	overflow  client // shared by clients past maxClients
	lastSweep time.Time
	lastFull  time.Time
}

// bucket is a token bucket: tokens as of last.
type bucket struct {
	tokens float64
	last   time.Time
}

// refill brings b up to now at rate, up to burst.
func (b *bucket) refill(now time.Time, rate, burst float64) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*rate)
		b.last = now
	}
}

// wait is how long until b has a token at rate.
func (b *bucket) wait(rate float64) time.Duration {
	return time.Duration(math.Ceil((1 - b.tokens) / rate * float64(time.Second)))
}

// client is one client address's state.
type client struct {
	bucket
	inFlight int
}

// New returns a Limiter for cfg.
func New(cfg Config) *Limiter {
	l := &Limiter{
		rate:              max(cfg.Rate, 0),
		burst:             burstOf(cfg.Rate, cfg.Burst),
		concurrency:       max(cfg.Concurrency, 0),
		clientRate:        max(cfg.ClientRate, 0),
		clientBurst:       burstOf(cfg.ClientRate, cfg.ClientBurst),
		clientConcurrency: max(cfg.ClientConcurrency, 0),
		maxClients:        cfg.MaxClients,
		now:               clock.Or(cfg.Clock).Now,
		clients:           map[netip.Addr]*client{},
	}
	if l.maxClients <= 0 {
		l.maxClients = DefaultMaxClients
	}
	start := l.now()
	l.all = bucket{tokens: l.burst, last: start}
	l.overflow.bucket = bucket{tokens: l.clientBurst, last: start}
	l.lastSweep = start
	return l
}

func burstOf(rate float64, burst int) float64 {
	if burst > 0 {
		return float64(burst)
	}
	return max(1, math.Ceil(rate))
}

// Refusal says why a request was refused.
type Refusal struct {
	// Limit is the limit that refused it.
	Limit Limit
	// RetryAfter is when the request would be admitted at the earliest
	// (rate limits), or a guess (concurrency limits). At least 1 ns.
	RetryAfter time.Duration
}

// Ticket is an admitted request's hold on the limits. Release it exactly
// once, when the request ends.
type Ticket struct {
	l *Limiter
	c *client // nil when no per-client limit is set
}

// Release gives the request's place back. It is safe for concurrent use.
func (t Ticket) Release() {
	if t.l == nil {
		return
	}
	t.l.mu.Lock()
	t.l.inFlight--
	if t.c != nil {
		t.c.inFlight--
	}
	t.l.mu.Unlock()
}

// Acquire admits or refuses one request from addr (any address; the zero
// Addr is one client too). Admitted (ok), the caller must Release the
// ticket when the request ends. Refused, r says by which limit — a
// client's own limits are checked first, so a greedy client is named as
// such — and nothing was taken.
func (l *Limiter) Acquire(addr netip.Addr) (t Ticket, r Refusal, ok bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.client(addr, now)
	if c != nil {
		if l.clientConcurrency > 0 && c.inFlight >= l.clientConcurrency {
			return Ticket{}, Refusal{Limit: LimitClientConcurrency, RetryAfter: concurrencyRetry}, false
		}
		if l.clientRate > 0 {
			c.refill(now, l.clientRate, l.clientBurst)
			if c.tokens < 1 {
				return Ticket{}, Refusal{Limit: LimitClientRate, RetryAfter: c.wait(l.clientRate)}, false
			}
		}
	}
	if l.concurrency > 0 && l.inFlight >= l.concurrency {
		return Ticket{}, Refusal{Limit: LimitConcurrency, RetryAfter: concurrencyRetry}, false
	}
	if l.rate > 0 {
		l.all.refill(now, l.rate, l.burst)
		if l.all.tokens < 1 {
			return Ticket{}, Refusal{Limit: LimitRate, RetryAfter: l.all.wait(l.rate)}, false
		}
		l.all.tokens--
	}
	if c != nil && l.clientRate > 0 {
		c.tokens--
	}
	l.inFlight++
	if c != nil {
		c.inFlight++
	}
	return Ticket{l: l, c: c}, Refusal{}, true
}

// InFlight returns the number of admitted requests not yet released.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}

// Clients returns the number of client addresses tracked one by one.
func (l *Limiter) Clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// client returns addr's state, created full, or nil when no per-client
// limit is set. l.mu is held.
func (l *Limiter) client(addr netip.Addr, now time.Time) *client {
	if l.clientRate == 0 && l.clientConcurrency == 0 {
		return nil
	}
	if now.Sub(l.lastSweep) >= sweepEvery {
		l.sweep(now)
	}
	if c := l.clients[addr]; c != nil {
		return c
	}
	if len(l.clients) >= l.maxClients && now.Sub(l.lastFull) >= fullSweepEvery {
		l.lastFull = now
		l.sweep(now)
	}
	if len(l.clients) >= l.maxClients {
		return &l.overflow
	}
	c := &client{bucket: bucket{tokens: l.clientBurst, last: now}}
	l.clients[addr] = c
	return c
}

// sweep forgets every client that a new one would be no different from:
// nothing in flight and a full bucket. l.mu is held.
func (l *Limiter) sweep(now time.Time) {
	l.lastSweep = now
	for addr, c := range l.clients {
		if c.inFlight > 0 {
			continue
		}
		if l.clientRate > 0 {
			c.refill(now, l.clientRate, l.clientBurst)
			if c.tokens < l.clientBurst {
				continue
			}
		}
		delete(l.clients, addr)
	}
}
