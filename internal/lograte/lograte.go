// Package lograte decides when a line about a repeated event — a malformed
// packet in a protocol server's loop — is logged: at most one per interval,
// the events in between only counted, their number reported with the next
// line that is logged. A flood of bad packets then cannot flood the log,
// while the server's metrics still count every packet.
//
// It decides only: it writes no log line and counts no metric itself.
package lograte

import (
	"sync"
	"time"
)

// DefaultEvery is the interval servers use for malformed packets: one line a
// second says a sender is broken as well as a thousand do.
const DefaultEvery = time.Second

// Limiter lets one event per interval through. It is safe for concurrent
// use.
type Limiter struct {
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	last    time.Time // of the last event let through; zero: none yet
	skipped int       // events held back since then
}

// New returns a Limiter letting one event through per every, on the clock
// now. If every is 0, uses DefaultEvery; if now is nil, uses time.Now.
func New(every time.Duration, now func() time.Time) *Limiter {
	if every <= 0 {
		every = DefaultEvery
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{every: every, now: now}
}

// Every returns the interval, for log lines that state the limit.
func (l *Limiter) Every() time.Duration { return l.every }

// Allow reports whether the event happening now is logged. When it is,
// skipped is how many events were held back since the last one logged (and
// the count starts again).
func (l *Limiter) Allow() (ok bool, skipped int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.skipped++
		return false, 0
	}
	l.last = now
	skipped, l.skipped = l.skipped, 0
	return true, skipped
}
