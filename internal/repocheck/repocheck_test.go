package repocheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the module's root, two levels up.
const root = "../.."

// skipDir reports whether the walk leaves a directory out: caches, build
// output, test data and hidden directories hold no packages of ours.
func skipDir(rel, name string) bool {
	switch {
	case rel == ".":
		return false
	case strings.HasPrefix(name, "."), name == "testdata", name == "node_modules", rel == "bin":
		return true
	}
	return false
}

// packages returns the directories (relative to root) holding Go files,
// with the parsed files of each.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if skipDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			out[filepath.Dir(rel)] = append(out[filepath.Dir(rel)], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// TestPackageDocs: every package has a doc comment in a non-test file
// ("Package x ..." for a library; any sentence for a command), or, for a
// package of tests only, in a test file. Generated packages are exempt.
func TestPackageDocs(t *testing.T) {
	for dir, files := range packages(t) {
		var docs, testDocs []string
		name, isGenerated := "", false
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if generated.Match(src) {
				isGenerated = true
				break
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if af.Doc == nil {
				continue
			}
			if strings.HasSuffix(f, "_test.go") {
				testDocs = append(testDocs, af.Doc.Text())
				continue
			}
			name = af.Name.Name
			docs = append(docs, af.Doc.Text())
		}
		if isGenerated {
			continue
		}
		onlyTests := true
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				onlyTests = false
			}
		}
		switch {
		case onlyTests && len(testDocs) == 0:
			t.Errorf("%s: a package of tests without a doc comment saying what it tests", dir)
		case !onlyTests && len(docs) == 0:
			t.Errorf("%s: no package doc comment: say what the package owns and what it must not touch", dir)
		case !onlyTests && name != "main" && !strings.HasPrefix(docs[0], "Package "+name+" "):
			t.Errorf("%s: the doc comment should start %q, not %.40q", dir, "Package "+name, docs[0])
		}
	}
}

// components are the packages that run a service of `anvil serve` and so
// have a README for operators.
var components = []string{"bmc", "bootlog", "bootpolicy", "console", "dhcp", "enroll", "httpboot", "metadata", "server", "syslog", "tftp"}

// sections are the fixed sections of a component README, each a pattern
// its heading must match.
var sections = []struct{ name, pattern string }{
	{"What it does", `(?m)^## What it does$`},
	{"Configuration", `(?m)^## Configuration$`},
	{"Metrics", `(?mi)^## .*metrics.*$`},
	{"Examples", `(?m)^## Examples?$`},
}

// TestComponentREADMEs: each component has a README with the fixed
// sections, and so has every other package that keeps one.
func TestComponentREADMEs(t *testing.T) {
	readmes, err := filepath.Glob(filepath.Join(root, "internal", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, r := range readmes {
		have[filepath.Base(filepath.Dir(r))] = true
		b, err := os.ReadFile(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sections {
			if !regexp.MustCompile(s.pattern).Match(b) {
				t.Errorf("%s: no %q section", strings.TrimPrefix(r, root+"/"), s.name)
			}
		}
	}
	for _, c := range components {
		if !have[c] {
			t.Errorf("internal/%s: a component of anvil serve without a README.md", c)
		}
	}
}

// TestLayoutNamesEveryPackage: README.md's Layout block names every
// directory of internal/ that holds a package, so a newcomer's map of the
// code is whole.
func TestLayoutNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	layout, _, _ := strings.Cut(after, "\n## ")
	for dir := range packages(t) {
		parts := strings.Split(filepath.ToSlash(dir), "/")
		if len(parts) < 2 || parts[0] != "internal" {
			continue
		}
		top := "internal/" + parts[1] + "/"
		if !strings.Contains(layout, top) {
			t.Errorf("README.md's layout does not name %s", top)
		}
	}
}
