package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, and
// the go command's BuildEvent, told apart by Action).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
	ImportPath  string // build events
}

// testKey names one test (subtests included) of one package.
type testKey struct{ pkg, test string }

func (k testKey) String() string { return k.pkg + " " + k.test }

// testResult is how one test ended, and what it printed.
type testResult struct {
	testKey
	outcome string // "pass", "fail", "skip"; "" if it never ended
	message string // a skip's reason
}

// summary follows a `go test -json` stream: it prints the human-readable
// output as it comes (every line with verbose, else as `go test` without
// -v prints it: package lines, and a test's output only if it failed) and
// keeps what the report needs.
type summary struct {
	out     io.Writer
	verbose bool

	pkgs     map[string]string   // package → "ok", "fail", "none" (no test files)
	running  map[testKey]*[]byte // output of tests not ended yet
	results  []testResult
	buildErr []string // packages whose build failed
}

func newSummary(out io.Writer, verbose bool) *summary {
	return &summary{out: out, verbose: verbose, pkgs: map[string]string{}, running: map[testKey]*[]byte{}}
}

// event takes one event of the stream.
func (s *summary) event(ev event) {
	switch ev.Action {
	case "build-output":
		fmt.Fprint(s.out, ev.Output)
		return
	case "build-fail":
		s.buildErr = append(s.buildErr, ev.ImportPath)
		return
	}
	if ev.Test == "" {
		s.packageEvent(ev)
		return
	}
	k := testKey{ev.Package, ev.Test}
	buf := s.running[k]
	if buf == nil {
		buf = new([]byte)
		s.running[k] = buf
	}
	switch ev.Action {
	case "output":
		if s.verbose {
			fmt.Fprint(s.out, ev.Output)
		}
		*buf = append(*buf, ev.Output...)
	case "pass", "fail", "skip":
		r := testResult{testKey: k, outcome: ev.Action}
		if ev.Action == "skip" {
			r.message = skipMessage(string(*buf))
		}
		if ev.Action == "fail" && !s.verbose {
			s.out.Write(*buf)
		}
		s.results = append(s.results, r)
		delete(s.running, k)
	}
}

// packageEvent handles an event of a package as a whole.
func (s *summary) packageEvent(ev event) {
	switch ev.Action {
	case "output":
		// Without -v, go test prints a passing package's "ok" line but
		// not the "PASS" before it.
		if s.verbose || strings.TrimSpace(ev.Output) != "PASS" {
			fmt.Fprint(s.out, ev.Output)
		}
	case "pass":
		s.pkgs[ev.Package] = "ok"
	case "skip":
		s.pkgs[ev.Package] = "none"
	case "fail":
		s.pkgs[ev.Package] = "fail"
		// Tests that never ended (a panic, the -timeout) failed with
		// their package: show what they printed.
		var open []testKey
		for k := range s.running {
			if k.pkg == ev.Package {
				open = append(open, k)
			}
		}
		slices.SortFunc(open, func(a, b testKey) int { return strings.Compare(a.test, b.test) })
		for _, k := range open {
			if !s.verbose {
				s.out.Write(*s.running[k])
			}
			s.results = append(s.results, testResult{testKey: k})
			delete(s.running, k)
		}
	}
}

// fileLine starts a line that t.Log, t.Skip and friends wrote.
var fileLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

// skipMessage returns the reason a skipped test gave: its last logged
// message (t.Skip logs it last) with the file and line it came from,
// continuation lines joined.
func skipMessage(output string) string {
	var msg []string
	for _, line := range strings.Split(output, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "", strings.HasPrefix(trimmed, "=== "), strings.HasPrefix(trimmed, "--- "):
		case fileLine.MatchString(line):
			msg = []string{trimmed}
		case len(msg) > 0:
			msg = append(msg, trimmed)
		}
	}
	if len(msg) == 0 {
		return "(no message)"
	}
	return strings.Join(msg, " ")
}

// counts are the report's numbers.
type counts struct {
	pkgs, pkgsOK, pkgsFailed, pkgsNone int
	run, passed, failed, skipped       int
}

func (s *summary) counts() counts {
	var c counts
	for _, st := range s.pkgs {
		c.pkgs++
		switch st {
		case "ok":
			c.pkgsOK++
		case "fail":
			c.pkgsFailed++
		case "none":
			c.pkgsNone++
		}
	}
	for _, r := range s.results {
		c.run++
		switch r.outcome {
		case "pass":
			c.passed++
		case "skip":
			c.skipped++
		default:
			c.failed++
		}
	}
	return c
}

// report prints the summary and returns whether the run passed: no
// package or test failed, no build failed, and — when strict (CI) — no
// test skipped unless allow lists it.
func (s *summary) report(allow allowlist, strict bool) bool {
	// Whatever is still open when the stream ends never finished (the go
	// command was killed, or the stream was cut).
	var open []testKey
	for k := range s.running {
		open = append(open, k)
	}
	slices.SortFunc(open, func(a, b testKey) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range open {
		s.results = append(s.results, testResult{testKey: k})
	}
	slices.SortStableFunc(s.results, func(a, b testResult) int { return strings.Compare(a.String(), b.String()) })

	c := s.counts()
	w := s.out
	fmt.Fprintf(w, "\n==== test summary ====\n")
	fmt.Fprintf(w, "packages: %d (%d ok, %d failed, %d without tests)\n", c.pkgs, c.pkgsOK, c.pkgsFailed, c.pkgsNone)
	fmt.Fprintf(w, "tests (subtests included): %d run, %d passed, %d failed, %d skipped\n", c.run, c.passed, c.failed, c.skipped)
	ok := c.failed == 0 && c.pkgsFailed == 0 && len(s.buildErr) == 0 && c.pkgs > 0
	if c.pkgs == 0 {
		fmt.Fprintf(w, "no package reported a result: did go test run?\n")
	}
	if len(s.buildErr) > 0 {
		fmt.Fprintf(w, "build failed: %s\n", strings.Join(s.buildErr, ", "))
	}
	if c.failed > 0 {
		fmt.Fprintf(w, "failed (%d):\n", c.failed)
		for _, r := range s.results {
			switch r.outcome {
			case "fail":
				fmt.Fprintf(w, "  %s\n", r)
			case "":
				fmt.Fprintf(w, "  %s (never finished)\n", r)
			}
		}
	}
	var refused []testResult
	used := map[testKey]bool{}
	if c.skipped > 0 {
		fmt.Fprintf(w, "skipped (%d):\n", c.skipped)
		for _, r := range s.results {
			if r.outcome != "skip" {
				continue
			}
			note := ""
			if why, listed := allow.entries[r.testKey]; listed {
				used[r.testKey] = true
				note = " [allowed: " + why + "]"
			} else if strict {
				refused = append(refused, r)
				note = " [NOT ALLOWED under CI]"
			}
			fmt.Fprintf(w, "  %s: %s%s\n", r, r.message, note)
		}
	}
	for _, k := range allow.order {
		if !used[k] {
			fmt.Fprintf(w, "note: %s lists %s, which did not skip: remove the entry\n", allow.source, k)
		}
	}
	if len(refused) > 0 {
		ok = false
		fmt.Fprintf(w, "FAIL: %d tests skipped under CI and are not in %s. A skip in CI is a broken environment (a tool, a privilege, a kernel feature missing: fix the machine or scripts/install-deps.sh) or a test that should not exist.\n",
			len(refused), allow.source)
	}
	if ok {
		fmt.Fprintf(w, "PASS\n")
	} else {
		fmt.Fprintf(w, "FAIL\n")
	}
	return ok
}
