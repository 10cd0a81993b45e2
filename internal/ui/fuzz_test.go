package ui

import (
	"strings"
	"testing"
)

// FuzzSafeNext: whatever the login form's next says, the redirect after
// login stays on a path of the UI (never another host, never a query
// that could carry anything).
func FuzzSafeNext(f *testing.F) {
	for _, seed := range []string{
		"/ui/hardware",            // a page of the UI: kept
		"//evil.example/ui/",      // scheme-relative: another host
		"/ui//evil.example",       // a doubled slash inside
		"https://evil.example/",   // absolute
		"/ui/\\evil",              // a backslash some browsers read as a slash
		"/ui/hardware?page=2#top", // a query and fragment: dropped
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if !strings.HasPrefix(got, basePath) || strings.HasPrefix(got, "//") || strings.ContainsAny(got, "\\?#") {
			t.Fatalf("safeNext(%q) = %q; want a path under %s", next, got, basePath)
		}
		if got != basePath && got != next {
			t.Fatalf("safeNext(%q) = %q; want it unchanged or %s", next, got, basePath)
		}
	})
}
