package clock

import (
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func fired(ch <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-ch:
		return t, true
	default:
		return time.Time{}, false
	}
}

// TestFakeAdvance: After and tickers fire when the clock passes their
// time, in time order, and not before.
func TestFakeAdvance(t *testing.T) {
	c := NewFake(t0)
	late, early := c.After(2*time.Second), c.After(time.Second)
	if !c.PendingAt(t0.Add(time.Second)) || c.PendingAt(t0.Add(1500*time.Millisecond)) {
		t.Fatal("PendingAt does not see the waits armed")
	}
	tick := c.NewTicker(500 * time.Millisecond)
	c.Advance(999 * time.Millisecond)
	if _, ok := fired(early); ok {
		t.Fatal("After(1s) fired at 999ms")
	}
	if got, ok := fired(tick.C()); !ok || !got.Equal(t0.Add(999*time.Millisecond)) {
		t.Fatalf("ticker at 999ms: %v %v", got, ok)
	}
	c.Advance(time.Millisecond)
	if got, ok := fired(early); !ok || !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("After(1s) at 1s: %v %v", got, ok)
	}
	if _, ok := fired(late); ok {
		t.Fatal("After(2s) fired at 1s")
	}
	tick.Stop()
	c.Advance(5 * time.Second)
	if _, ok := fired(late); !ok {
		t.Fatal("After(2s) did not fire at 6s")
	}
	if _, ok := fired(tick.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
	if n := c.Waiters(); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

// TestFakeAfterFunc: f runs once its time comes; Stop before that keeps
// it from running and reports true, after it reports false.
func TestFakeAfterFunc(t *testing.T) {
	c := NewFake(t0)
	var ran atomic.Int32
	done := make(chan struct{})
	stopped := c.AfterFunc(time.Minute, func() { ran.Add(100) })
	c.AfterFunc(time.Minute, func() { ran.Add(1); close(done) })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending AfterFunc reported false")
	}
	c.Advance(time.Minute)
	<-done
	if got := ran.Load(); got != 1 {
		t.Fatalf("ran = %d, want 1 (the stopped one must not run)", got)
	}
	if stopped.Stop() {
		t.Fatal("a second Stop reported true")
	}
}

// TestFakeStepAndInstant: Step moves every reading; Instant fires waits
// at once, moving the clock by them.
func TestFakeStepAndInstant(t *testing.T) {
	c := NewFake(t0)
	c.Step = time.Millisecond
	if a, b := c.Now(), c.Now(); !b.After(a) {
		t.Fatalf("two readings %v %v", a, b)
	}
	c = NewFake(t0)
	c.Instant = true
	got, ok := fired(c.After(3 * time.Second))
	if !ok || !got.Equal(t0.Add(3*time.Second)) || !c.Now().Equal(t0.Add(3*time.Second)) {
		t.Fatalf("instant After: %v %v, now %v", got, ok, c.Now())
	}
	tick := c.NewTicker(time.Hour)
	c.Tick()
	if _, ok := fired(tick.C()); !ok {
		t.Fatal("Tick did not fire the ticker")
	}
	c.Set(t0) // never backwards
	if !c.Now().Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("Set moved the clock back to %v", c.Now())
	}
}

// TestReal: Or defaults to the wall clock, whose waits wait.
func TestReal(t *testing.T) {
	c := Or(nil)
	before := time.Now()
	<-c.After(time.Millisecond)
	if c.Now().Before(before) {
		t.Fatal("Real's Now went backwards")
	}
	tick := c.NewTicker(time.Millisecond)
	<-tick.C()
	tick.Stop()
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
}

// TestFunc: Func's Now is the function's; its waits are the wall clock's.
func TestFunc(t *testing.T) {
	c := Func(func() time.Time { return t0 })
	if !c.Now().Equal(t0) {
		t.Fatalf("Now = %v", c.Now())
	}
	<-c.After(time.Millisecond)
}
