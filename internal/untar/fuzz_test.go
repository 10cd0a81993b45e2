package untar_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/untar"
	"github.com/anvilproj/anvil/internal/untar/untartest"
)

// FuzzEntryPath: an accepted tar name is clean, relative, free of "..",
// stays under any directory it is joined to, and is accepted again as
// itself.
func FuzzEntryPath(f *testing.F) {
	for _, s := range []string{"./etc/passwd", "etc/", "../x", "/abs", "a/../../b", "a/./b//c", ".", "./", "..", "a/..", "...", "a\x00b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := untar.EntryPath(name)
		if err != nil {
			return
		}
		if path.IsAbs(p) || p != path.Clean(p) {
			t.Fatalf("untar.EntryPath(%q) = %q: not clean and relative", name, p)
		}
		for _, e := range strings.Split(p, "/") {
			if e == ".." {
				t.Fatalf("untar.EntryPath(%q) = %q: has ..", name, p)
			}
		}
		if j := filepath.Join("/dest", p); j != "/dest" && !strings.HasPrefix(j, "/dest/") {
			t.Fatalf("untar.EntryPath(%q) = %q: joins to %q, outside /dest", name, p, j)
		}
		if again, err := untar.EntryPath(p); err != nil || again != p {
			t.Fatalf("untar.EntryPath(%q) = %q, %v; want it unchanged", p, again, err)
		}
	})
}

// FuzzExtract: whatever a tar stream holds, extraction never writes
// outside its directory.
func FuzzExtract(f *testing.F) {
	// Seeds: a well-formed tree and the escapes TestArchive2DiskEscapes
	// refuses, so the fuzzer starts from link tricks.
	for _, entries := range [][]untartest.Entry{
		untartest.RootFS,
		{{Name: "link", Type: tar.TypeSymlink, Link: "/"}, {Name: "link/pwned", Body: "x"}},
		{{Name: "up", Type: tar.TypeSymlink, Link: "../.."}, {Name: "up/x/", Type: tar.TypeDir}},
		{{Name: "h", Type: tar.TypeLink, Link: "../sentinel"}},
		{{Name: "a", Type: tar.TypeSymlink, Link: "b"}, {Name: "b", Type: tar.TypeSymlink, Link: ".."}, {Name: "a/p", Body: "x"}},
	} {
		f.Add(untartest.Tar(f, entries))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		top := t.TempDir()
		if err := os.WriteFile(filepath.Join(top, "sentinel"), []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
		dest := filepath.Join(top, "dest")
		if err := os.Mkdir(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dest)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		x := &untar.Extractor{Root: root}
		x.Extract(context.Background(), bytes.NewReader(data)) // errors are fine; escapes are not
		var outside []string
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if p != top && p != filepath.Join(top, "sentinel") && p != dest && !strings.HasPrefix(p, dest+"/") {
				outside = append(outside, p)
			}
			return nil
		})
		if len(outside) > 0 {
			t.Fatalf("extraction wrote outside its directory: %v", outside)
		}
		if b, err := os.ReadFile(filepath.Join(top, "sentinel")); err != nil || string(b) != "s" {
			t.Fatalf("the sentinel outside changed: %q, %v", b, err)
		}
	})
}
