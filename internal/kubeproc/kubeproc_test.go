package kubeproc

import (
	"strings"
	"testing"
)

// TestStartRefusesBadAddress: an address the API server cannot be given
// is refused before anything starts, with an error naming it.
func TestStartRefusesBadAddress(t *testing.T) {
	for _, addr := range []string{"fd00::1", "10.0.0", "localhost"} {
		c, err := Start(Options{APIServer: "/nonexistent", Etcd: "/nonexistent", Dir: t.TempDir(), Address: addr})
		if err == nil {
			c.Stop()
			t.Fatalf("address %q: started", addr)
		}
		if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "IPv4") {
			t.Errorf("address %q: error %q does not name the address and what it must be", addr, err)
		}
	}
}
