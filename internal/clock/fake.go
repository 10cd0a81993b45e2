package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that moves only when told: Advance (or Set) moves it and
// fires, in time order, every After, AfterFunc and ticker whose time has
// come. With Step set, every Now reading first moves it by Step, so two
// readings are never equal (a rate is never over zero seconds); with
// Instant set, After and AfterFunc fire at once, moving the clock by
// their duration: code that backs off or polls runs without anybody
// advancing it. Safe for concurrent use.
type Fake struct {
	// Step, if not zero, is how far each Now moves the clock first.
	Step time.Duration
	// Instant makes After and AfterFunc fire at once (see Fake).
	Instant bool

	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
}

// waiter is a pending After, AfterFunc or ticker.
type waiter struct {
	at     time.Time
	period time.Duration // a ticker's; 0 for one-shots
	ch     chan time.Time
	f      func()
	done   bool
}

// NewFake returns a Fake reading t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now implements Clock.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Step != 0 {
		c.now = c.now.Add(c.Step)
	}
	return c.now
}

// After implements Clock.
func (c *Fake) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.add(&waiter{ch: ch}, d)
	return ch
}

// AfterFunc implements Clock; f runs in its own goroutine, as with
// package time.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	w := &waiter{f: f}
	c.add(w, d)
	return fakeTimer{c: c, w: w}
}

// NewTicker implements Clock: its channel holds one tick, as package
// time's does; ticks a slow reader misses are dropped.
func (c *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	w := &waiter{period: d, ch: make(chan time.Time, 1)}
	c.add(w, d)
	return fakeTicker{c: c, w: w}
}

// Advance moves the clock by d, firing what falls due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.fireLocked()
	c.mu.Unlock()
}

// Set moves the clock to t (never backwards), firing what falls due.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	c.fireLocked()
	c.mu.Unlock()
}

// Tick fires every ticker at once, whatever its period, without moving
// the clock: for code that acts on each tick, not on the time.
func (c *Fake) Tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if w.period != 0 && !w.done {
			send(w.ch, c.now)
		}
	}
}

// Waiters reports how many Afters, AfterFuncs and tickers are pending: a
// test waits for the code under test to be waiting before it advances.
func (c *Fake) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// PendingAt reports whether an After, AfterFunc or ticker is due at
// exactly at: a test waits for the code to have armed the timer it is
// about to trip.
func (c *Fake) PendingAt(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if !w.done && w.at.Equal(at) {
			return true
		}
	}
	return false
}

func (c *Fake) add(w *waiter, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.at = c.now.Add(d)
	if c.Instant && w.period == 0 && w.at.After(c.now) {
		c.now = w.at
	}
	c.waiters = append(c.waiters, w)
	c.fireLocked()
}

// fireLocked fires the waiters due at c.now, earliest first, and keeps
// the rest; a ticker is rescheduled for its next period.
func (c *Fake) fireLocked() {
	sort.SliceStable(c.waiters, func(i, j int) bool { return c.waiters[i].at.Before(c.waiters[j].at) })
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		switch {
		case w.done:
			continue
		case w.at.After(c.now):
			kept = append(kept, w)
			continue
		case w.period != 0:
			send(w.ch, c.now)
			for !w.at.After(c.now) {
				w.at = w.at.Add(w.period)
			}
			kept = append(kept, w)
			continue
		}
		w.done = true
		if w.f != nil {
			go w.f()
		} else {
			send(w.ch, c.now)
		}
	}
	c.waiters = kept
}

// send delivers t unless the channel already holds a tick.
func send(ch chan time.Time, t time.Time) {
	select {
	case ch <- t:
	default:
	}
}

type fakeTimer struct {
	c *Fake
	w *waiter
}

func (t fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.w.done {
		return false
	}
	t.w.done = true
	t.c.fireLocked() // drops it
	return true
}

type fakeTicker struct {
	c *Fake
	w *waiter
}

func (t fakeTicker) C() <-chan time.Time { return t.w.ch }

// Stop stops the ticker and drops a tick not yet received: as with
// package time since Go 1.23, no tick arrives after Stop.
func (t fakeTicker) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.w.done = true
	select {
	case <-t.w.ch:
	default:
	}
	t.c.fireLocked()
}
