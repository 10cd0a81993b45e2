package ipxe

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps the package a leaf: the boot policy and the protocol
// servers use it, so it must use none of them (nor the store or model);
// only macaddr, a leaf too, for the MAC its URL paths name.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/anvilproj/anvil/") && imp != "github.com/anvilproj/anvil/internal/macaddr" {
			t.Errorf("ipxe imports %s; it must import no package of this module but macaddr", imp)
		}
	}
}
