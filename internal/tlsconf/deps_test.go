package tlsconf

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package on the standard library (and
// internal/atomicfile, itself standard library only): the server and the
// client commands both use it, and it must build and test alone.
const atomicfilePkg = "github.com/anvilproj/anvil/internal/atomicfile"

func TestImports(t *testing.T) {
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
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if path != atomicfilePkg && strings.Contains(strings.Split(path, "/")[0], ".") {
				t.Errorf("%s imports %s: internal/tlsconf uses the standard library only", name, path)
			}
		}
	}
}
