package lograte

import (
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestAllow(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	l := New(time.Second, c.now)
	type step struct {
		advance time.Duration
		ok      bool
		skipped int
	}
	steps := []step{
		{0, true, 0}, // the first is logged
		{0, false, 0},
		{300 * time.Millisecond, false, 0},
		{699 * time.Millisecond, false, 0}, // 999 ms after the first
		{time.Millisecond, true, 3},        // a second after: logged, with the 3 held back
		{10 * time.Second, true, 0},        // a quiet spell: nothing was held back
	}
	for i, s := range steps {
		c.advance(s.advance)
		if ok, skipped := l.Allow(); ok != s.ok || skipped != s.skipped {
			t.Errorf("step %d: Allow() = %v, %d; want %v, %d", i, ok, skipped, s.ok, s.skipped)
		}
	}
}

// TestConcurrent: of many events at once, one is logged and every other is
// counted in the next line.
func TestConcurrent(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(0, c.now)
	const n = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	logged := 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := l.Allow(); ok {
				mu.Lock()
				logged++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if logged != 1 {
		t.Errorf("%d of %d simultaneous events were logged; want 1", logged, n)
	}
	c.advance(DefaultEvery)
	if ok, skipped := l.Allow(); !ok || skipped != n-1 {
		t.Errorf("Allow() after the interval = %v, %d; want true, %d", ok, skipped, n-1)
	}
}
