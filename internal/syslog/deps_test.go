package syslog

import (
	goparser "go/parser"
	gotoken "go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package a protocol package: of this module it may
// import only machinelog (the events it emits). Who sent a line and where it
// is kept is the sink's business, so the store, the model and the log store
// stay out.
func TestImports(t *testing.T) {
	const module = "github.com/anvilproj/anvil/"
	allowed := map[string]bool{module + "internal/machinelog": true}
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
				t.Errorf("%s imports %s; internal/syslog may import only internal/machinelog of this module", name, path)
			}
		}
	}
}
