package testtool

import (
	"os"
	"testing"
)

// RequireRoot fails (CI) or skips (elsewhere) t unless the test runs as
// root: mounts, namespaces, loop devices, cgroups.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatalf("this test needs root (%s); CI runs as root", why)
	}
	t.Skipf("this test needs root (%s)", why)
}
