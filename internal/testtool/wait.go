package testtool

import (
	"testing"
	"time"
)

// waitBound is how long WaitFor and Receive wait before failing: a bound
// that keeps a broken test from hanging, never a measure of anything.
const waitBound = time.Minute

// WaitFor polls cond until it holds, failing t if it does not within a
// minute. What a test proves is that cond came to hold (an event, a
// counter reaching a value), not when.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitBound, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Receive returns the next value from ch, failing t if none comes within
// a minute.
func Receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitBound):
		t.Fatalf("waited %s for %s", waitBound, what)
		panic("unreachable")
	}
}
