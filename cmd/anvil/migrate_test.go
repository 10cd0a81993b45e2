package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// anvil runs the command line args in-process and returns its standard
// error and error.
func anvil(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var stderr bytes.Buffer
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return stderr.String(), err
}

// TestExportRestoreCommands moves a site between two embedded stores
// through the commands: the flags reach the stores and the seal keys, the
// file is private, and a refused restore creates no store.
func TestExportRestoreCommands(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	site := filepath.Join("..", "..", "internal", "migrate", "testdata", "site.yaml")
	if out, err := anvil(t, "restore", site, "--data-dir", a); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(a, "secrets", "seal.key")); err != nil {
		t.Errorf("restore into an embedded store made no seal key: %v", err)
	}
	file := filepath.Join(t.TempDir(), "site.yaml")
	out, err := anvil(t, "export", "--data-dir", a, "--unseal", "-o", file)
	if err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if !strings.Contains(out, "exported 1 Secret, 1 Hardware, 1 Template, 1 BootProfile, 1 Machine, 1 Workflow, 1 Job, 1 Task") {
		t.Errorf("export said %q; want the counts", out)
	}
	if fi, err := os.Stat(file); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("export file mode %v; want 0600", fi.Mode().Perm())
	}
	if out, err := anvil(t, "restore", file, "--data-dir", b); err != nil {
		t.Fatalf("restore of the export: %v\n%s", err, out)
	}
	again := filepath.Join(t.TempDir(), "again.yaml")
	if out, err := anvil(t, "export", "--data-dir", b, "--unseal", "-o", again); err != nil {
		t.Fatalf("export of the copy: %v\n%s", err, out)
	}
	first, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	body := func(b []byte) string { _, rest, _ := strings.Cut(string(b), "\n"); return rest } // past the header
	if body(first) != body(second) {
		t.Errorf("the copy exports differently:\n%s\nfirst:\n%s", second, first)
	}

	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte("kind: Gizmo\nmetadata: {name: g}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "fresh")
	if _, err := anvil(t, "restore", broken, "--data-dir", fresh); err == nil || !strings.Contains(err.Error(), "document 1") {
		t.Errorf("restore of a broken file = %v; want refused, naming the document", err)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("a refused restore left %s behind (%v)", fresh, err)
	}
	if _, err := anvil(t, "export", "--data-dir", fresh); err == nil || !strings.Contains(err.Error(), "no store to read") {
		t.Errorf("export of a data directory without a store = %v; want refused", err)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("export of a missing store made %s (%v)", fresh, err)
	}
}
