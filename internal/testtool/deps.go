package testtool

import (
	"bufio"
	"errors"
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// depsGOOS are the systems ModuleDeps reads build constraints for: the
// union of what each imports, since a client built for any of them must
// keep its promises.
var depsGOOS = []string{"linux", "darwin", "windows"}

// ModuleDeps returns every package of this module that the package pkg
// (an import path of the module) imports, directly or through others
// (non-test files only, for linux, darwin and windows), each with one
// chain of imports that leads to it, starting at pkg. Only the module's
// own packages are followed: nothing outside the module can import an
// internal package of it. It reads the source with go/build, from the
// go.mod above the current directory, so it needs no go command: what a
// package's dependency test checks against the packages it must not link.
func ModuleDeps(t testing.TB, pkg string) map[string][]string {
	t.Helper()
	root, module := moduleRoot(t)
	if pkg != module && !strings.HasPrefix(pkg, module+"/") {
		t.Fatalf("ModuleDeps(%q): not a package of module %s", pkg, module)
	}
	chains := map[string][]string{pkg: {pkg}}
	queue := []string{pkg}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(cur, module), "/")))
		for _, imp := range moduleImports(t, dir, module) {
			if _, seen := chains[imp]; seen {
				continue
			}
			chains[imp] = append(append([]string(nil), chains[cur]...), imp)
			queue = append(queue, imp)
		}
	}
	delete(chains, pkg)
	return chains
}

// moduleImports returns the module's packages that the package in dir
// imports under any of depsGOOS.
func moduleImports(t testing.TB, dir, module string) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, goos := range depsGOOS {
		ctx := build.Default
		ctx.GOOS, ctx.CgoEnabled = goos, false
		p, err := ctx.ImportDir(dir, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			continue // every file is for other systems
		}
		if err != nil {
			t.Fatalf("read package in %s: %v", dir, err)
		}
		for _, imp := range p.Imports {
			if (imp == module || strings.HasPrefix(imp, module+"/")) && !seen[imp] {
				seen[imp] = true
				out = append(out, imp)
			}
		}
	}
	return out
}

// ModuleRoot returns the directory of this module's go.mod, found above the
// current directory (a test runs in its package's directory): where tests
// find the repository's files (examples/, deploy/) and its caches (.cache/).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, _ := moduleRoot(t)
	return dir
}

// moduleRoot returns the directory of the go.mod above the current
// directory and the module path it declares.
func moduleRoot(t testing.TB) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod declares no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the current directory")
		}
		dir = parent
	}
}
