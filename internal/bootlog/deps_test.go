package bootlog

import (
	goparser "go/parser"
	gotoken "go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports: the recorder reads the store (to attribute) and writes the
// log store (to keep); it never reaches into the protocol packages, whose
// events arrive through machinelog, nor into the API or the engine.
func TestImports(t *testing.T) {
	const module = "github.com/anvilproj/anvil/"
	allowed := map[string]bool{}
	for _, p := range []string{"internal/store", "internal/model", "internal/logstore", "internal/machinelog", "internal/clock"} {
		allowed[module+p] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := gotoken.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := goparser.ParseFile(fset, name, src, goparser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) && !allowed[path] {
				t.Errorf("%s imports %s; bootlog may import only store, model, logstore, machinelog and clock of this module", name, path)
			}
		}
	}
}
