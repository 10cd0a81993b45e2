package actions

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the package a leaf that does not talk to the server:
// the agent reports for it (docs/actions.md, ARCHITECTURE.md). Of this
// module it may import only the leaves listed (none of them talks to the
// server either), and outside the standard library only the decompressors
// and system calls.
func TestImports(t *testing.T) {
	allowed := map[string]string{
		"github.com/anvilproj/anvil/internal/clock":     "the one source of time (a leaf)",
		"github.com/anvilproj/anvil/internal/untar":     "archive2disk's tar extraction, shared with the image cache",
		"github.com/anvilproj/anvil/internal/oci":       "the container path's images",
		"github.com/anvilproj/anvil/internal/container": "the container path's namespaces",
		"golang.org/x/sys/unix":                         "mount, reboot, kexec_file_load, BLKRRPART, sync_file_range",
		"github.com/klauspost/compress/zstd":            "zstd images",
		"github.com/klauspost/pgzip":                    "gzip images, decoded ahead in parallel",
		"github.com/ulikunitz/xz":                       "xz images",
	}
	for path, files := range testtool.NonStdImports(t) {
		if _, ok := allowed[path]; !ok && strings.HasPrefix(path, "github.com/anvilproj/anvil/") {
			t.Errorf("%v import %s: internal/actions must not import the module's packages but the leaves %v (it must not talk to the server; the agent reports for it)", files, path, slices.Sorted(maps.Keys(allowed)))
			continue
		}
		if _, ok := allowed[path]; !ok {
			t.Errorf("%v import %s: internal/actions may import only %v", files, path, slices.Sorted(maps.Keys(allowed)))
		}
	}
}
