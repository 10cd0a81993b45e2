package testtool

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// NonStdImports returns the imports outside the standard library of the
// package in the current directory (its non-test files), each with the
// files that import it: what a package's TestImports checks against its
// allowed list to stay a leaf.
func NonStdImports(t testing.TB) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
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
			// The standard library's paths have no dot in their first
			// element.
			if strings.Contains(strings.Split(path, "/")[0], ".") && !slices.Contains(out[path], name) {
				out[path] = append(out[path], name)
			}
		}
	}
	return out
}
