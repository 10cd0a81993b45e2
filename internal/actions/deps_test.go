package actions

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package a leaf that does not talk to the server:
// the agent reports for it (docs/actions.md, ARCHITECTURE.md). No package
// of this module may be imported, and outside the standard library only
// the decompressors and system calls.
func TestImports(t *testing.T) {
	allowed := map[string]string{
		"golang.org/x/sys/unix":              "mount, reboot, kexec_file_load, BLKRRPART, sync_file_range",
		"github.com/klauspost/compress/zstd": "zstd images",
		"github.com/klauspost/pgzip":         "gzip images, decoded ahead in parallel",
		"github.com/ulikunitz/xz":            "xz images",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.Contains(strings.Split(path, "/")[0], ".") {
				continue // standard library
			}
			if strings.HasPrefix(path, "github.com/anvilproj/anvil/") {
				t.Errorf("%s imports %s: internal/actions must not import the module's packages (it must not talk to the server; the agent reports for it)", name, path)
				continue
			}
			if _, ok := allowed[path]; !ok {
				t.Errorf("%s imports %s: internal/actions may import only %v", name, path, keys(allowed))
			}
		}
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
