// Package testtool finds the real programs that tests run against (curl,
// atftp, tftp-hpa, wrk, …). A missing one fails the test under CI=true —
// scripts/install-deps.sh installs them, so a CI runner without one is
// broken and must not pass by skipping — and skips it elsewhere.
//
// It is for _test.go files only; no command imports it.
package testtool

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true), where nothing that
// needs a tool may be skipped.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireBinary returns the path of the program name (from the Debian
// package pkg), or fails (CI) or skips (elsewhere) t when it is not on
// PATH.
func RequireBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if InCI() {
		t.Fatalf("%s not found (Debian package %s; scripts/install-deps.sh installs it)", name, pkg)
	}
	t.Skipf("%s not found (Debian package %s)", name, pkg)
	return ""
}
