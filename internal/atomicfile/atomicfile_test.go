package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "new" {
		t.Fatalf("content %q, %v; want new", b, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d entries left in the directory; want only the file (no temporary)", len(entries))
	}
	// A directory that does not exist: an error naming the file, nothing written.
	if err := Write(filepath.Join(dir, "no", "such"), []byte("x"), 0o600); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}

func TestCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.key")
	if err := Create(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Create(path, []byte("second"), 0o600)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing file: %v; want fs.ErrExist", err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "first" {
		t.Errorf("content %q; want the first writer's", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries; want only the file", len(entries))
	}
}

// TestImports keeps the package on the standard library, so the leaf
// packages that use it (auth, tlsconf) stay leaves.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		t.Errorf("%v import %s: atomicfile uses the standard library only", files, path)
	}
}
