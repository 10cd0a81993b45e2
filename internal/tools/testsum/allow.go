package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// allowlist is the committed list of tests that may skip under CI, each
// with the reason it may.
type allowlist struct {
	source  string             // the file, for messages
	entries map[testKey]string // test → why it may skip
	order   []testKey
}

// readAllowlist reads the allowlist at path; a missing file is an empty
// list.
func readAllowlist(path string) (allowlist, error) {
	a := allowlist{source: path, entries: map[testKey]string{}}
	if path == "" {
		a.source = "the allowlist"
		return a, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return a, nil
	}
	if err != nil {
		return a, err
	}
	defer f.Close()
	return a, a.parse(f)
}

// parse reads lines of the form
//
//	PACKAGE TEST REASON...
//
// where TEST is the full name as go test prints it (TestX/sub_case) and
// REASON, required, says why skipping it in CI is acceptable. Blank lines
// and lines starting with # are comments.
func (a *allowlist) parse(r io.Reader) error {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return fmt.Errorf("%s:%d: want PACKAGE TEST REASON (the reason is required), got %q", a.source, n, line)
		}
		k := testKey{f[0], f[1]}
		if _, dup := a.entries[k]; dup {
			return fmt.Errorf("%s:%d: %s is listed twice", a.source, n, k)
		}
		a.entries[k] = strings.Join(f[2:], " ")
		a.order = append(a.order, k)
	}
	return sc.Err()
}
