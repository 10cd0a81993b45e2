package metadata

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps the package a protocol package: it speaks HTTP and asks
// a Finder; the store and the boot policy are wired in by internal/server.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]string{
		"github.com/anvilproj/anvil/internal/clientip":   "the caller's address (X-Forwarded-For from trusted proxies)",
		"github.com/anvilproj/anvil/internal/machinelog": "the per-machine record",
		"github.com/anvilproj/anvil/internal/macaddr":    "the one MAC type (a leaf)",
		"github.com/anvilproj/anvil/internal/model":      "the Hardware it serves",
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/anvilproj/anvil/") && allowed[imp] == "" {
			t.Errorf("metadata imports %s; it must not know the store or the boot policy (a Finder answers)", imp)
		}
	}
}
