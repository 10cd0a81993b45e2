package httpboot

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps the package a protocol package: it speaks HTTP and asks
// a Scripter; what a machine boots is decided elsewhere.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]string{
		"github.com/anvilproj/anvil/internal/clientip":   "the client's address behind trusted proxies",
		"github.com/anvilproj/anvil/internal/ipxe":       "binary names and URL paths",
		"github.com/anvilproj/anvil/internal/machinelog": "the per-machine record",
		"github.com/anvilproj/anvil/internal/macaddr":    "the one MAC type, parsed from the URL once",
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/anvilproj/anvil/") && allowed[imp] == "" {
			t.Errorf("httpboot imports %s; it must not know the store, the model or the boot policy", imp)
		}
	}
}
