package untar_test

import (
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the extractor a leaf: the standard library and system
// calls (mknod) only, so both archive2disk and the image cache can use it.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		if path != "golang.org/x/sys/unix" {
			t.Errorf("%v import %s: internal/untar may import only golang.org/x/sys/unix outside the standard library", files, path)
		}
	}
}
