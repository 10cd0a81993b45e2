package auth_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps auth a leaf: it decides who a caller is and what it
// may do, so it must not reach for the store, the API or the server (they
// call it, not the other way round). internal/atomicfile, standard library
// only, writes its key files.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/anvilproj/anvil/") && imp != "github.com/anvilproj/anvil/internal/atomicfile" {
			t.Errorf("auth imports %s; it must import no other anvil package", imp)
		}
	}
}
