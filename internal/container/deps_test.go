package container_test

import (
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the runtime a leaf: system calls only. It must not
// know images, actions or the server.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		if path != "golang.org/x/sys/unix" {
			t.Errorf("%v import %s: internal/container may import only golang.org/x/sys/unix outside the standard library", files, path)
		}
	}
}
