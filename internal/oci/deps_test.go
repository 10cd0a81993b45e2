package oci

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the package about images only: go-containerregistry,
// the shared tar extractor and the clock leaf, nothing that runs, reports
// or serves.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		switch {
		case strings.HasPrefix(path, "github.com/google/go-containerregistry/"):
		case path == "github.com/anvilproj/anvil/internal/untar", path == "github.com/anvilproj/anvil/internal/clock":
		default:
			t.Errorf("%v import %s: internal/oci may import only go-containerregistry, internal/untar and internal/clock", files, path)
		}
	}
}
