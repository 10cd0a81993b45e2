// Package a passes, skips and has subtests: testsum's test runs go test
// -json on it.
package a

import "testing"

func TestPass(t *testing.T) { t.Log("some output of a passing test") }

func TestSkip(t *testing.T) {
	t.Log("logged before the skip")
	t.Skip("this test needs a tool this machine lacks")
}

func TestSkipMultiline(t *testing.T) { t.Skip("first line\nsecond line") }

func TestSub(t *testing.T) {
	t.Run("runs", func(t *testing.T) {})
	t.Run("skips", func(t *testing.T) { t.Skipf("skipped subtest %d", 2) })
}
