package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupRestoreCommands: an offline backup of a data directory, put
// back by restore (which keeps the store it replaces), and the refusals
// a user meets, with what they say to do.
func TestBackupRestoreCommands(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join("..", "..", "internal", "migrate", "testdata", "site.yaml")
	if out, err := anvil(t, "restore", site, "--data-dir", dir); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "anvil.backup")
	out, err := anvil(t, "backup", "--data-dir", dir, file)
	if err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	if !strings.Contains(out, "backed up 8 objects (store schema 1, last written by Anvil ") || !strings.Contains(out, " to "+file) {
		t.Errorf("backup said %q", out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v", fi, err)
	}
	// A restore into a fresh directory, and over the first one.
	fresh := filepath.Join(t.TempDir(), "fresh")
	if out, err := anvil(t, "restore", file, "--data-dir", fresh); err != nil || !strings.Contains(out, "restored 8 objects") {
		t.Fatalf("restore into a fresh directory: %v\n%s", err, out)
	}
	out, err = anvil(t, "restore", file, "--data-dir", dir)
	if err != nil || !strings.Contains(out, "the store it replaced is kept as "+filepath.Join(dir, "anvil.db.replaced-by-restore.")) {
		t.Fatalf("restore over a store: %v\n%s", err, out)
	}
	a, b := filepath.Join(t.TempDir(), "a.yaml"), filepath.Join(t.TempDir(), "b.yaml")
	if _, err := anvil(t, "export", "--data-dir", dir, "-o", a); err != nil {
		t.Fatal(err)
	}
	if _, err := anvil(t, "export", "--data-dir", fresh, "-o", b); err != nil {
		t.Fatal(err)
	}
	ea, _ := os.ReadFile(a)
	eb, _ := os.ReadFile(b)
	body := func(b []byte) string { _, rest, _ := strings.Cut(string(b), "\n"); return rest }
	if body(ea) != body(eb) || len(body(ea)) == 0 {
		t.Errorf("the restored stores differ:\n%s\n---\n%s", ea, eb)
	}
	if _, err := anvil(t, "restore", file, "--store", "kubernetes"); err == nil || !strings.Contains(err.Error(), "restores into --data-dir") {
		t.Errorf("restore of a backup into a cluster: %v", err)
	}
	if _, err := anvil(t, "backup", "--data-dir", filepath.Join(t.TempDir(), "none"), file); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("backup of a missing store: %v", err)
	}
}
