package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// sampleJSON runs the real `go test -json` over testdata/sample (a module
// of its own: one package passing with skips and subtests, one failing,
// one without tests, one that does not build) and returns its output for
// the packages named (all with "./...").
var sampleJSON = func() func(t *testing.T, pattern string) []byte {
	var mu sync.Mutex
	cache := map[string][]byte{}
	return func(t *testing.T, pattern string) []byte {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if out, ok := cache[pattern]; ok {
			return out
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			t.Fatalf("the go command: %v", err)
		}
		cmd := exec.Command(goBin, "test", "-count=1", "-json", pattern)
		cmd.Dir = filepath.Join("testdata", "sample")
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if _, exit := err.(*exec.ExitError); err != nil && !exit {
			t.Fatalf("go test -json %s: %v\n%s", pattern, err, stderr.String())
		}
		if len(out) == 0 {
			t.Fatalf("go test -json %s printed nothing: %v\n%s", pattern, err, stderr.String())
		}
		cache[pattern] = out
		return out
	}
}()

func runSum(t *testing.T, in []byte, ci bool, args ...string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, bytes.NewReader(in), &out, &errOut, ci)
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), code
}

func writeAllowlist(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "allowed-skips")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWholeSample: the summary of a run with every kind of result, and
// what the console shows as it goes.
func TestWholeSample(t *testing.T) {
	in := sampleJSON(t, "./...")
	for _, verbose := range []bool{false, true} {
		var args []string
		if verbose {
			args = []string{"-v"}
		}
		out, code := runSum(t, in, false, args...)
		if code != 1 {
			t.Errorf("verbose=%v: exit %d; want 1 (a test and a build failed)\n%s", verbose, code, out)
		}
		for _, want := range []string{
			"ok  \tsample/a",
			"undefined: undefined", // the build error
			"FAIL\tsample/broken [build failed]",
			"the inner failure", // a failed test's output
			"--- FAIL: TestFails (",
			"FAIL\tsample/b",
			"?   \tsample/c\t[no test files]",
			"packages: 4 (1 ok, 2 failed, 1 without tests)\n",
			"tests (subtests included): 9 run, 4 passed, 2 failed, 3 skipped\n",
			"build failed: sample/broken [sample/broken.test]\n",
			"failed (2):\n  sample/b TestFails\n  sample/b TestFails/inner\n",
			"skipped (3):\n" +
				"  sample/a TestSkip: a_test.go:11: this test needs a tool this machine lacks\n" +
				"  sample/a TestSkipMultiline: a_test.go:14: first line second line\n" +
				"  sample/a TestSub/skips: a_test.go:18: skipped subtest 2\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("verbose=%v: output lacks %q:\n%s", verbose, want, out)
			}
		}
		// A passing test's output shows only with -v, like go test's.
		if got := strings.Contains(out, "quiet unless verbose"); got != verbose {
			t.Errorf("verbose=%v: a passing test's log shown: %v\n%s", verbose, got, out)
		}
		if !strings.HasSuffix(out, "\nFAIL\n") {
			t.Errorf("verbose=%v: output does not end in FAIL:\n%s", verbose, out)
		}
	}
}

// TestSkipsUnderCI: outside CI skips are listed and pass; under CI each
// one fails the run unless the allowlist names it with a reason.
func TestSkipsUnderCI(t *testing.T) {
	in := sampleJSON(t, "./a")
	all := `# comment
sample/a TestSkip        the machine has no such tool, by design
sample/a TestSkipMultiline  multi-line reasons are fine
sample/a TestSub/skips   a subtest can be listed
`
	tests := []struct {
		name     string
		ci       bool
		allow    string
		wantCode int
		want     []string
		notWant  []string
	}{
		{name: "outside CI", ci: false, wantCode: 0, want: []string{"3 skipped", "\nPASS\n"}, notWant: []string{"NOT ALLOWED"}},
		{name: "CI, no allowlist", ci: true, wantCode: 1, want: []string{
			"sample/a TestSkip: a_test.go:11: this test needs a tool this machine lacks [NOT ALLOWED under CI]",
			"FAIL: 3 tests skipped under CI",
			"\nFAIL\n",
		}},
		{name: "CI, one allowed", ci: true, allow: "sample/a TestSub/skips needs a GPU\n", wantCode: 1, want: []string{
			"sample/a TestSub/skips: a_test.go:18: skipped subtest 2 [allowed: needs a GPU]",
			"FAIL: 2 tests skipped under CI",
		}},
		{name: "CI, all allowed", ci: true, allow: all, wantCode: 0, want: []string{
			"[allowed: the machine has no such tool, by design]", "\nPASS\n",
		}, notWant: []string{"NOT ALLOWED"}},
		{name: "stale entry", ci: true, allow: all + "sample/a TestGone it was removed\n", wantCode: 0, want: []string{
			"lists sample/a TestGone, which did not skip: remove the entry",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.allow != "" {
				args = []string{"-allow", writeAllowlist(t, tc.allow)}
			}
			out, code := runSum(t, in, tc.ci, args...)
			if code != tc.wantCode {
				t.Errorf("exit %d; want %d\n%s", code, tc.wantCode, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestBadAllowlist: an entry without a reason, or twice, is refused.
func TestBadAllowlist(t *testing.T) {
	for _, text := range []string{
		"sample/a TestSkip\n",
		"sample/a TestSkip why\nsample/a TestSkip why again\n",
	} {
		_, code := runSum(t, nil, true, "-allow", writeAllowlist(t, text))
		if code != 2 {
			t.Errorf("allowlist %q: exit %d; want 2", text, code)
		}
	}
}

// TestCutStream: tests still running when the stream ends (go test killed)
// and a stream with no result at all are failures, and plain-text lines
// are passed through.
func TestCutStream(t *testing.T) {
	in := []byte(`go: warning: plain text from the go command
{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestDone"}
{"Action":"output","Package":"p","Test":"TestDone","Output":"--- PASS: TestDone (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestDone"}
{"Action":"run","Package":"p","Test":"TestHangs"}
{"Action":"output","Package":"p","Test":"TestHangs","Output":"=== RUN   TestHangs\n    p_test.go:3: last words\n"}
`)
	out, code := runSum(t, in, false)
	if code != 1 {
		t.Errorf("exit %d; want 1", code)
	}
	for _, w := range []string{"go: warning: plain text from the go command\n", "p TestHangs (never finished)", "2 run, 1 passed, 1 failed"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	out, code = runSum(t, nil, false)
	if code != 1 || !strings.Contains(out, "no package reported a result") {
		t.Errorf("empty stream: exit %d; want 1 and a complaint:\n%s", code, out)
	}
}

// TestTimeout: a test still running when its package fails (a panic, the
// -timeout) fails, and what it printed is shown.
func TestTimeout(t *testing.T) {
	in := []byte(`{"Action":"run","Package":"p","Test":"TestSlow"}
{"Action":"output","Package":"p","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"output","Package":"p","Test":"TestSlow","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t1.0s\n"}
{"Action":"fail","Package":"p","Elapsed":1}
`)
	out, code := runSum(t, in, false)
	if code != 1 {
		t.Errorf("exit %d; want 1", code)
	}
	for _, w := range []string{"panic: test timed out after 1s\n", "p TestSlow (never finished)", "packages: 1 (0 ok, 1 failed, 0 without tests)"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}
