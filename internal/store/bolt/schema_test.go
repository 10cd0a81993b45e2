package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/version"
)

// fill adds n Hardware to the store file at path (made if missing) and
// closes it.
func fill(t *testing.T, path string, n int) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	have := len(s.kinds[model.KindHardware].objs)
	for i := range n {
		h := &model.Hardware{ObjectMeta: model.ObjectMeta{Name: fmt.Sprintf("node-%d", have+i)}}
		if _, err := s.Create(t.Context(), h); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// setMeta changes the meta bucket of the closed file at path: each key of
// kv is set, or deleted when its value is nil.
func setMeta(t *testing.T, path string, kv map[string][]byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		mb := tx.Bucket(metaBucket)
		for k, v := range kv {
			var err error
			if v == nil {
				err = mb.Delete([]byte(k))
			} else {
				err = mb.Put([]byte(k), v)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// schemaOf reads the schema the closed file at path records.
func schemaOf(t *testing.T, path string) Schema {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var sc Schema
	if err := db.View(func(tx *bolt.Tx) error { sc, err = readSchema(tx); return err }); err != nil {
		t.Fatal(err)
	}
	return sc
}

func backups(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "anvil.db.*"+backupSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSchemaNewFileRecordsVersion(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 1)
	sc := schemaOf(t, p)
	if !sc.Recorded || sc.Version != SchemaVersion || sc.Writer != version.Get().Version {
		t.Fatalf("schema %+v, want version %d written by %s", sc, SchemaVersion, version.Get().Version)
	}
	if b := backups(t, dir); len(b) != 0 {
		t.Fatalf("a new store made backups: %v", b)
	}
	// Reopened by the same build: no backup either.
	fill(t, p, 2)
	if b := backups(t, dir); len(b) != 0 {
		t.Fatalf("reopening made backups: %v", b)
	}
}

// A file as v0.1.0 left it (no schema, no writer) is version 1: it is
// copied before it is stamped, and the copy holds what the file held.
func TestSchemaUnversionedFileBackedUpThenStamped(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 3)
	setMeta(t, p, map[string][]byte{"schema": nil, "writer": nil})
	if sc := schemaOf(t, p); sc.Recorded {
		t.Fatalf("setup: %+v", sc)
	}
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := openTest(t, p, Options{})
	if n := len(s.kinds[model.KindHardware].objs); n != 3 {
		t.Fatalf("%d Hardware after the upgrade, want 3", n)
	}
	s.Close()
	b := backups(t, dir)
	if len(b) != 1 {
		t.Fatalf("backups %v, want one", b)
	}
	want := fmt.Sprintf("anvil.db.schema1-unversioned.to.schema%d-%s.", SchemaVersion, safeName(version.Get().Version))
	if !strings.HasPrefix(filepath.Base(b[0]), want) {
		t.Errorf("backup named %s, want %s…", filepath.Base(b[0]), want)
	}
	fi, err := os.Stat(b[0])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("backup mode %v, want 0600", fi.Mode().Perm())
	}
	c, err := CheckFile(b[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Objects[model.KindHardware]) != 3 {
		t.Errorf("backup holds %d Hardware, want 3", len(c.Objects[model.KindHardware]))
	}
	if sc := schemaOf(t, b[0]); sc.Recorded {
		t.Errorf("the backup is not the file as it was: %+v", sc)
	}
	// The copy is a copy of the file's content: bbolt's WriteTo writes
	// the pages as they are.
	after, err := os.ReadFile(b[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(after) == 0 || len(after) > len(before) {
		t.Errorf("backup is %d bytes, the file was %d", len(after), len(before))
	}
	if sc := schemaOf(t, p); !sc.Recorded || sc.Version != SchemaVersion {
		t.Errorf("upgraded file's schema %+v", sc)
	}
}

func TestSchemaNewerFileRefusedUntouched(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 1)
	setMeta(t, p, map[string][]byte{"schema": []byte(fmt.Sprint(SchemaVersion + 1)), "writer": []byte("v9.0.0")})
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(p, Options{})
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open: %v, want ErrNewerSchema", err)
	}
	for _, want := range []string{fmt.Sprintf("schema %d, written by Anvil v9.0.0", SchemaVersion+1),
		fmt.Sprintf("this Anvil (%s) knows schema %d at most", version.Get().Version, SchemaVersion),
		"Run Anvil v9.0.0 or newer", "anvil restore FILE --data-dir " + dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	after, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("refusing the file changed it")
	}
	if b := backups(t, dir); len(b) != 0 {
		t.Errorf("a refusal made backups: %v", b)
	}
}

func TestSchemaBadVersionRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "anvil.db")
	fill(t, p, 1)
	setMeta(t, p, map[string][]byte{"schema": []byte("two")})
	if _, err := Open(p, Options{}); err == nil || !strings.Contains(err.Error(), `"two" is not a schema version`) {
		t.Fatalf("Open: %v", err)
	}
}

// withSchema makes the tests' build one of schema v with steps, as a
// later build that changes the layout will be.
// The returned func (also run at the test's end) makes it this build
// again.
func withSchema(t *testing.T, v int, steps []migration) func() {
	oldV, oldM := currentSchema, migrations
	currentSchema, migrations = v, steps
	undo := func() { currentSchema, migrations = oldV, oldM }
	t.Cleanup(undo)
	return undo
}

// The runner: steps run in order, from the file's version to the
// build's, after the backup, in one transaction with the new version.
func TestSchemaMigrationsRunInOrder(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 2)
	var ran []int
	step := func(from int) migration {
		return migration{from: from, what: fmt.Sprintf("step %d", from), run: func(tx *bolt.Tx) error {
			if len(backups(t, dir)) != 1 {
				return errors.New("no backup before the step")
			}
			ran = append(ran, from)
			return tx.Bucket(metaBucket).Put(fmt.Appendf(nil, "step-%d", from), []byte("done"))
		}}
	}
	withSchema(t, 4, []migration{step(3), step(1), step(2)})
	s := openTest(t, p, Options{})
	s.Close()
	if fmt.Sprint(ran) != "[1 2 3]" {
		t.Fatalf("steps ran %v, want [1 2 3]", ran)
	}
	if sc := schemaOf(t, p); sc.Version != 4 {
		t.Fatalf("schema %+v after the steps", sc)
	}
	b := backups(t, dir)
	if len(b) != 1 || !strings.Contains(b[0], ".schema1-"+safeName(version.Get().Version)+".to.schema4-") {
		t.Fatalf("backups %v", b)
	}
	// Opened again: nothing to do.
	ran = nil
	s = openTest(t, p, Options{})
	s.Close()
	if len(ran) != 0 || len(backups(t, dir)) != 1 {
		t.Fatalf("second open ran %v, backups %v", ran, backups(t, dir))
	}
}

// A step that fails leaves the file as it was (the transaction is rolled
// back) and says which step failed and where the backup is.
func TestSchemaFailedMigrationChangesNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "anvil.db")
	fill(t, p, 2)
	undo := withSchema(t, 3, []migration{
		{from: 1, what: "first", run: func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte(model.KindHardware)) }},
		{from: 2, what: "second", run: func(*bolt.Tx) error { return errors.New("cannot") }},
	})
	_, err := Open(p, Options{})
	if err == nil || !strings.Contains(err.Error(), "from schema 2 to 3 (second): cannot") || !strings.Contains(err.Error(), "the file is unchanged") {
		t.Fatalf("Open: %v", err)
	}
	undo() // CheckFile reads objects of its own build's schema
	c, err := CheckFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Objects[model.KindHardware]) != 2 {
		t.Fatalf("the failed upgrade changed the file: %d Hardware", len(c.Objects[model.KindHardware]))
	}
	if sc := schemaOf(t, p); sc.Version != 1 {
		t.Fatalf("schema %+v after a failed upgrade", sc)
	}
}

// A missing step is this build's bug, said so, not a half-upgraded file.
func TestSchemaMissingMigration(t *testing.T) {
	p := filepath.Join(t.TempDir(), "anvil.db")
	fill(t, p, 1)
	withSchema(t, 2, nil)
	if _, err := Open(p, Options{}); err == nil || !strings.Contains(err.Error(), "no migration from store schema 1") {
		t.Fatalf("Open: %v", err)
	}
}

// A torn or damaged file is refused with a message naming the cure, not
// a panic, and nothing is written to it.
func TestOpenDamagedFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(f *os.File, size int64) error
		want   string
	}{
		{"tail cut", func(f *os.File, size int64) error { return f.Truncate(size / 2) }, "its tail is missing"},
		{"meta pages zeroed", func(f *os.File, _ int64) error { _, err := f.WriteAt(make([]byte, 8192), 0); return err }, "invalid database"},
		{"data pages zeroed", func(f *os.File, size int64) error {
			_, err := f.WriteAt(make([]byte, size/2-4*4096), 4*4096)
			return err
		}, "damaged store file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "anvil.db")
			fill(t, p, 300)
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(f, fi.Size()); err != nil {
				t.Fatal(err)
			}
			f.Close()
			before, _ := os.ReadFile(p)
			_, err = Open(p, Options{})
			if err == nil {
				t.Fatal("a damaged file opened")
			}
			for _, want := range []string{tc.want, "the file is damaged or not a store", "anvil restore FILE --data-dir " + dir} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not say %q", err, want)
				}
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
				t.Error("opening the damaged file changed it")
			}
			if _, err := CheckFile(p); err == nil {
				t.Error("CheckFile passed a damaged file")
			}
		})
	}
}
