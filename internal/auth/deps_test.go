package auth_test

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps auth a leaf: it decides who a caller is and what it
// may do, so it must not reach for the store, the API or the server (they
// call it, not the other way round). internal/atomicfile, standard library
// only, writes its key files; internal/clock, a leaf too, tells the time.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		if strings.HasPrefix(path, "github.com/anvilproj/anvil/") && path != "github.com/anvilproj/anvil/internal/atomicfile" &&
			path != "github.com/anvilproj/anvil/internal/clock" {
			t.Errorf("%v import %s; auth must import no other anvil package", files, path)
		}
	}
}
