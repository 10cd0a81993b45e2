package supervise

import (
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the supervisor a leaf on the standard library: it
// runs components, it does not know what they are, so no package of this
// module (nor any other) is imported, and any program may use it.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		t.Errorf("%v import %s; internal/supervise imports the standard library only", files, path)
	}
}
