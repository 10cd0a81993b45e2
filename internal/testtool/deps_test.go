package testtool

import (
	"maps"
	"slices"
	"testing"
)

const module = "github.com/anvilproj/anvil"

// TestModuleDeps checks the walk against what cmd/anvil is known to link:
// the server through internal/server, and internal/kmod only through the
// agent, two packages down.
func TestModuleDeps(t *testing.T) {
	deps := ModuleDeps(t, module+"/cmd/anvil")
	for _, pkg := range []string{"internal/server", "internal/store", "internal/cli", "internal/kmod"} {
		chain, ok := deps[module+"/"+pkg]
		if !ok {
			t.Errorf("cmd/anvil's deps miss %s; got %d packages", pkg, len(deps))
			continue
		}
		// A chain starts at the package asked about, ends at the
		// dependency, and each step is a real import (checked by
		// walking it from the next element).
		if chain[0] != module+"/cmd/anvil" || chain[len(chain)-1] != module+"/"+pkg {
			t.Errorf("chain to %s = %v", pkg, chain)
		}
		for i := 1; i < len(chain)-1; i++ {
			if _, ok := ModuleDeps(t, chain[i])[chain[i+1]]; !ok {
				t.Errorf("chain to %s: %s does not lead to %s", pkg, chain[i], chain[i+1])
			}
		}
	}
	if _, ok := deps[module+"/cmd/anvil"]; ok {
		t.Error("a package is listed among its own deps")
	}
	// A leaf of the standard library only: nothing of the module.
	if got := ModuleDeps(t, module+"/internal/clientip"); len(got) != 0 {
		t.Errorf("internal/clientip's module deps = %v; want none", slices.Collect(maps.Keys(got)))
	}
}
