package testtool

import (
	"fmt"
	"strings"
	"testing"
)

func TestInCI(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{
		{"", false},
		{"false", false},
		{"0", false},
		{"FALSE", false},
		{"true", true},
		{"1", true},
		{"TRUE", true},
		// Not a boolean: CI services set odd values; fail rather than skip.
		{"yes", true},
		{"github", true},
	} {
		t.Setenv("CI", tc.value)
		if got := InCI(); got != tc.want {
			t.Errorf("CI=%q: InCI() = %v; want %v", tc.value, got, tc.want)
		}
	}
}

// stopTB records how Need stopped a test. Its Fatalf and Skipf return
// (the real ones end the goroutine), so only the first call counts.
type stopTB struct {
	testing.TB
	how, msg string
}

func (s *stopTB) Helper() {}
func (s *stopTB) Fatalf(format string, args ...any) {
	if s.how == "" {
		s.how, s.msg = "fail", fmt.Sprintf(format, args...)
	}
}
func (s *stopTB) Skipf(format string, args ...any) {
	if s.how == "" {
		s.how, s.msg = "skip", fmt.Sprintf(format, args...)
	}
}

func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		ci, want string
	}{
		{"true", "fail"},
		{"", "skip"},
	} {
		t.Setenv("CI", tc.ci)
		s := &stopTB{TB: t}
		Need(s, "a %s", "thing")
		if s.how != tc.want || !strings.Contains(s.msg, "needs a thing") {
			t.Errorf("CI=%q: Need stopped the test with %s %q; want %s naming the need", tc.ci, s.how, s.msg, tc.want)
		}
		s = &stopTB{TB: t}
		RequireBinary(s, "anvil-no-such-program", "nothing")
		if s.how != tc.want || !strings.Contains(s.msg, "anvil-no-such-program (Debian package nothing") {
			t.Errorf("CI=%q: RequireBinary stopped the test with %s %q; want %s naming the program", tc.ci, s.how, s.msg, tc.want)
		}
	}
	t.Setenv("CI", "true")
	s := &stopTB{TB: t}
	if p := RequireBinary(s, "sh", "dash"); s.how != "" || p == "" {
		t.Errorf("RequireBinary(sh) = %q, stopped with %s %q; want its path", p, s.how, s.msg)
	}
}
