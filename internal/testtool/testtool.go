// Package testtool holds what the tests share about their environment:
// whether they run in CI, and how a test that needs something the machine
// lacks (a real program such as curl, atftp or wrk; root; a kernel
// feature) stops; and how a test shows nothing was sent without sleeping
// (Queued). A missing need fails the test under CI — CI runs as root
// after scripts/install-deps.sh installed everything, so a CI runner
// without it is broken and must not pass by skipping — and skips it
// elsewhere, so a developer without root or QEMU still runs the rest. It
// also counts the bytes that cross a connection (netcount.go), for tests
// that prove a server read, or let a client send, next to nothing; makes
// clients that stop reading (stall.go); and waits for an event with a
// bound against hanging (wait.go).
//
// It is for tests and test helper packages only; no command imports it.
package testtool

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// InCI reports whether the tests run in CI, where nothing may be skipped
// for want of a tool or a privilege. CI is on when the environment
// variable CI is set to anything but a false boolean ("false", "0", …):
// CI=true is what .ci/run exports and what CI services set, and a
// misspelt value errs on the side of failing, not of skipping.
func InCI() bool {
	v := os.Getenv("CI")
	if v == "" {
		return false
	}
	on, err := strconv.ParseBool(v)
	return on || err != nil
}

// Need stops t because the machine lacks what the test needs, described
// by the format and args ("root", "atftp (Debian package atftp)"): it
// fails t under CI and skips it elsewhere. It never returns.
func Need(t testing.TB, format string, args ...any) {
	t.Helper()
	what := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("this test needs %s, and CI must run it: refusing to skip (run as root after scripts/install-deps.sh, as `make test` does)", what)
	}
	t.Skipf("this test needs %s", what)
}

// RequireBinary returns the path of the program name (from the Debian
// package pkg), or stops t with Need when it is not on PATH.
func RequireBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Need(t, "%s (Debian package %s; scripts/install-deps.sh installs it)", name, pkg)
	}
	return p
}

// RequireRoot stops t with Need unless the test runs as root (mounts, loop
// devices, network namespaces, ports below 1024).
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Need(t, "root (%s)", why)
	}
}

// Queued reads into buf a datagram that has already arrived on conn (a
// UDP socket), without waiting, and reports whether there was one. After
// an event the peer records only once it has dealt with a packet (a
// counter, a log entry), it proves that no answer was sent, with no sleep:
// a datagram sent on the loopback is queued at its receiver by the time
// the send returns. A read deadline cannot do it: once passed, Go does not
// look at the queue.
func Queued(t testing.TB, conn syscall.Conn, buf []byte) (int, bool) {
	t.Helper()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var rerr error
	// One read(2) of the non-blocking socket: EAGAIN when it is empty.
	if err := rc.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), buf)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if errors.Is(rerr, syscall.EAGAIN) {
		return 0, false
	}
	if rerr != nil {
		t.Fatalf("read: %v", rerr)
	}
	return n, true
}
