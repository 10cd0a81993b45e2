package tlsconf

import (
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the package on the standard library (and
// internal/atomicfile and internal/clock, themselves standard library
// only): the server and the
// client commands both use it, and it must build and test alone.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		if path != "github.com/anvilproj/anvil/internal/atomicfile" && path != "github.com/anvilproj/anvil/internal/clock" {
			t.Errorf("%v import %s: internal/tlsconf uses the standard library only", files, path)
		}
	}
}
