// Package clock is Anvil's one source of time for code that stamps, waits
// or schedules: the workflow engine's timeouts, the actions' progress and
// retry back-off, TFTP's retransmit deadlines, the boot path's rate
// limits, the BMC poller's schedule, and every record's timestamp. Code
// takes a Clock (nil meaning Real) so that tests step time instead of
// sleeping (Fake).
//
// It is a leaf: standard library only, so any package may use it. It owns
// no policy about time (no timeouts, no jitter); its users do.
package clock

import "time"

// Clock tells the time and waits on it.
type Clock interface {
	// Now is time.Now.
	Now() time.Time
	// After is time.After.
	After(d time.Duration) <-chan time.Time
	// AfterFunc is time.AfterFunc: f runs in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTicker is time.NewTicker.
	NewTicker(d time.Duration) Ticker
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop cancels it, reporting whether it had not fired yet.
	Stop() bool
}

// Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the wall clock of package time.
var Real Clock = realClock{}

// Or returns c, or Real when c is nil: the default of every Config's
// Clock field.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time    { return time.After(d) }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
func (realClock) NewTicker(d time.Duration) Ticker          { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Func is a Clock that reads the time from now and waits on the wall
// clock: a machine whose clock is off by some amount, or a test that sets
// the time it stamps without waiting on it.
func Func(now func() time.Time) Clock { return funcClock{realClock{}, now} }

type funcClock struct {
	realClock
	now func() time.Time
}

func (c funcClock) Now() time.Time { return c.now() }
