// Command testsum reads `go test -json` on its standard input, prints the
// tests' human-readable output as `go test` would (with -v, every line;
// without, package lines and the output of failed tests), and ends with a
// summary: packages, tests run, passed, failed and skipped, and every
// skipped test with the reason it gave. `make unit` pipes the whole suite
// through it.
//
// In CI (testtool.InCI: CI=true) a skipped test fails the run unless the
// allowlist (-allow, .ci/allowed-skips) names it with a reason: under CI
// a skip is a broken environment or a test that should not exist, and a
// run that skips its lab tests must not look green.
//
// It exits 0 when everything passed, 1 when a test, package or build
// failed or a skip was refused, 2 on bad usage or a bad allowlist. It owns
// the summary only; it runs no tests itself.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/anvilproj/anvil/internal/testtool"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, testtool.InCI()))
}

// run is main with its inputs explicit.
func run(args []string, in io.Reader, out, errOut io.Writer, ci bool) int {
	fs := flag.NewFlagSet("testsum", flag.ContinueOnError)
	fs.SetOutput(errOut)
	verbose := fs.Bool("v", false, "print every line of the tests' output, as go test -v does")
	allowPath := fs.String("allow", "", "file of tests allowed to skip under CI: PACKAGE TEST REASON per line")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(errOut, "testsum: unexpected arguments %q (it reads go test -json on standard input)\n", fs.Args())
		return 2
	}
	allow, err := readAllowlist(*allowPath)
	if err != nil {
		fmt.Fprintf(errOut, "testsum: %v\n", err)
		return 2
	}
	s := newSummary(out, *verbose)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20) // a test may print long lines
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			// Not an event: go test prints early errors as plain text.
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		s.event(ev)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(errOut, "testsum: reading go test -json: %v\n", err)
		s.report(allow, ci)
		return 1
	}
	if !s.report(allow, ci) {
		return 1
	}
	return 0
}
