package tftp

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package a leaf: a protocol package that builds
// and tests alone (docs/tftp.md, ARCHITECTURE.md).
func TestImports(t *testing.T) {
	const module = "github.com/anvilproj/anvil/"
	allowed := map[string]string{
		module + "internal/machinelog":                            "the Event contract every service emits",
		"golang.org/x/sys/unix":                                   "sendmsg/sendmmsg with UDP_SEGMENT",
		"golang.org/x/net/ipv4":                                   "the destination address of requests on a wildcard socket",
		"golang.org/x/net/ipv6":                                   "the same for IPv6",
		"github.com/prometheus/client_golang/prometheus":          "metrics",
		"github.com/prometheus/client_golang/prometheus/promauto": "metrics",
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
			if _, ok := allowed[path]; !ok {
				t.Errorf("%s imports %s: internal/tftp may import only %v", name, path, keys(allowed))
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
