package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

var restoreTime = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func TestBackupFileAndRestore(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 5)
	bk := filepath.Join(t.TempDir(), "site.backup")
	sc, err := BackupFile(p, bk, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Version != SchemaVersion || !sc.Recorded {
		t.Fatalf("backup schema %+v", sc)
	}
	if !IsStoreFile(bk) {
		t.Fatal("a backup is not a store file")
	}
	// Changed after the backup: the restore brings the backup's state.
	fill(t, p, 2)
	r, err := RestoreFile(bk, p, restoreTime)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Contents.Objects[model.KindHardware]); n != 5 {
		t.Fatalf("restored %d Hardware, want 5", n)
	}
	if want := p + ".replaced-by-restore.20261128T120000Z"; r.Replaced != want {
		t.Fatalf("replaced kept as %q, want %q", r.Replaced, want)
	}
	for file, want := range map[string]int{p: 5, r.Replaced: 7} {
		c, err := CheckFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(c.Objects[model.KindHardware]); n != want {
			t.Errorf("%s holds %d Hardware, want %d", file, n, want)
		}
	}
	// Into an empty data directory: nothing to keep.
	empty := filepath.Join(t.TempDir(), "new", "anvil.db")
	if r, err := RestoreFile(bk, empty, restoreTime); err != nil || r.Replaced != "" {
		t.Fatalf("restore into a new directory: %+v, %v", r, err)
	}
	s := openTest(t, empty, Options{})
	if n := len(s.kinds[model.KindHardware].objs); n != 5 {
		t.Fatalf("the restored store opens with %d Hardware", n)
	}
}

// A running server's store is neither restored over nor copied offline:
// both say what to do instead.
func TestRestoreRefusesOpenStore(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 1)
	bk := filepath.Join(t.TempDir(), "site.backup")
	if _, err := BackupFile(p, bk, time.Second); err != nil {
		t.Fatal(err)
	}
	openTest(t, p, Options{}) // the "server"
	_, err := RestoreFile(bk, p, restoreTime)
	if err == nil || !strings.Contains(err.Error(), "is open in another process") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("restore over an open store: %v", err)
	}
	if m, _ := filepath.Glob(p + ".replaced-by-restore.*"); len(m) != 0 {
		t.Errorf("a refused restore left %v", m)
	}
	_, err = BackupFile(p, filepath.Join(t.TempDir(), "x"), 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "another process holds its lock") {
		t.Fatalf("offline backup of an open store: %v", err)
	}
}

func TestRestoreRefusesNewerOrDamagedBackup(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 1)
	newer := filepath.Join(t.TempDir(), "newer.backup")
	if _, err := BackupFile(p, newer, time.Second); err != nil {
		t.Fatal(err)
	}
	setMeta(t, newer, map[string][]byte{"schema": []byte(fmt.Sprint(SchemaVersion + 1)), "writer": []byte("v9.0.0")})
	_, err := RestoreFile(newer, p, restoreTime)
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), "restore it with Anvil v9.0.0 or newer") {
		t.Fatalf("restore of a newer backup: %v", err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged.backup")
	fill(t, damaged, 300)
	fi, _ := os.Stat(damaged)
	if err := os.Truncate(damaged, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreFile(damaged, p, restoreTime); err == nil || !strings.Contains(err.Error(), "the backup is damaged, nothing was changed") {
		t.Fatalf("restore of a damaged backup: %v", err)
	}
	yaml := filepath.Join(t.TempDir(), "site.yaml")
	os.WriteFile(yaml, []byte("apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\n"), 0o600)
	if IsStoreFile(yaml) {
		t.Fatal("YAML taken for a store")
	}
	if m, _ := filepath.Glob(p + ".replaced-by-restore.*"); len(m) != 0 {
		t.Errorf("a refused restore left %v", m)
	}
	if c, err := CheckFile(p); err != nil || len(c.Objects[model.KindHardware]) != 1 {
		t.Errorf("the store after refused restores: %v", err)
	}
}

// The way out of a damaged store: restore the backup over it.
func TestRestoreOverDamagedStore(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 300)
	bk := filepath.Join(t.TempDir(), "site.backup")
	if _, err := BackupFile(p, bk, time.Second); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if err := os.Truncate(p, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(p, Options{}); err == nil {
		t.Fatal("the damaged store opened")
	}
	if _, err := RestoreFile(bk, p, restoreTime); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, p, Options{})
	if n := len(s.kinds[model.KindHardware].objs); n != 300 {
		t.Fatalf("%d Hardware after the restore, want 300", n)
	}
}
