package bolt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/anvilproj/anvil/internal/atomicfile"
	"github.com/anvilproj/anvil/internal/version"
)

// SchemaVersion is the layout of the store file this build reads and
// writes: the buckets, their keys and the form of their values. It goes
// up by one with each change a build older than it would misread; each
// step has its migration (migrations). Version 1 is v0.1.0's layout, the
// first release's, which carried no version: a file without one is
// version 1.
const SchemaVersion = 1

var (
	// schemaKey in the meta bucket holds the file's SchemaVersion, in
	// decimal, so that a person with bbolt's CLI can read it.
	schemaKey = []byte("schema")
	// writerKey in the meta bucket holds the Anvil version that last
	// opened the file for writing (version.Get), for the messages.
	writerKey = []byte("writer")
)

// unversioned names the writer of a file that records none: v0.1.0, or a
// build from before the version was kept.
const unversioned = "v0.1.0 or older (unversioned)"

// ErrNewerSchema is returned by Open for a file whose schema is newer
// than SchemaVersion: a data directory from a newer Anvil (a downgrade).
var ErrNewerSchema = errors.New("store written by a newer Anvil")

// migration turns a file of schema from into one of schema from+1,
// inside the read-write transaction that also records the new version:
// all the steps of an upgrade happen, or none does.
type migration struct {
	from int
	// what says what the step changes, for the log.
	what string
	run  func(tx *bolt.Tx) error
}

// migrations are the registered steps, one per schema version below
// SchemaVersion, in order. None yet: SchemaVersion is still v0.1.0's
// layout. A step is added with the change that needs it, with its test
// (schema_test.go shows how: a file of the old layout in, the new out).
// A variable so that the tests can register steps of their own.
var migrations []migration

// currentSchema is SchemaVersion, but for the tests, which move it to
// run migrations of their own.
var currentSchema = SchemaVersion

// Schema is what a store file records about its own layout.
type Schema struct {
	// Version is the file's schema version (1 when it records none).
	Version int
	// Recorded says the file carries its version: false for v0.1.0's
	// files and for a new, empty file.
	Recorded bool
	// Writer is the Anvil version that last wrote the file, or a phrase
	// saying it is unknown.
	Writer string
}

// readSchema reads the schema of the file tx belongs to.
func readSchema(tx *bolt.Tx) (Schema, error) {
	sc := Schema{Version: 1, Writer: unversioned}
	mb := tx.Bucket(metaBucket)
	if mb == nil {
		return sc, nil
	}
	v := mb.Get(schemaKey)
	if v == nil {
		return sc, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 1 {
		return sc, fmt.Errorf("%s/%s: %q is not a schema version", metaBucket, schemaKey, v)
	}
	sc.Version, sc.Recorded = n, true
	if w := mb.Get(writerKey); len(w) > 0 {
		sc.Writer = string(w)
	} else {
		sc.Writer = "an unknown version"
	}
	return sc, nil
}

// writeSchema records currentSchema and this build as the writer.
func writeSchema(tx *bolt.Tx) error {
	mb, err := tx.CreateBucketIfNotExists(metaBucket)
	if err != nil {
		return err
	}
	if err := mb.Put(schemaKey, []byte(strconv.Itoa(currentSchema))); err != nil {
		return err
	}
	return mb.Put(writerKey, []byte(version.Get().Version))
}

// newerSchemaError is the refusal of a file from a newer Anvil.
func newerSchemaError(path string, sc Schema) error {
	return fmt.Errorf("%w: %s has store schema %d, written by Anvil %s; this Anvil (%s) knows schema %d at most. "+
		"Run Anvil %s or newer on it, or restore the backup the upgrade made before it changed the file "+
		"(%s: `anvil restore FILE --data-dir %s`)",
		ErrNewerSchema, path, sc.Version, sc.Writer, version.Get().Version, currentSchema,
		sc.Writer, filepath.Join(filepath.Dir(path), filepath.Base(path)+".*"+backupSuffix), filepath.Dir(path))
}

// backupSuffix ends the name of the copy Open makes before it changes a
// file of an older schema.
const backupSuffix = ".backup"

// upgradeBackupName is the name of the copy of path made before an
// upgrade from sc: both versions and the time, so that repeated upgrades
// never overwrite an older copy.
func upgradeBackupName(path string, sc Schema, now time.Time) string {
	from := "unversioned"
	if sc.Recorded {
		from = sc.Writer
	}
	return fmt.Sprintf("%s.schema%d-%s.to.schema%d-%s.%s%s", path, sc.Version, safeName(from),
		currentSchema, safeName(version.Get().Version), now.UTC().Format("20060102T150405Z"), backupSuffix)
}

// safeName keeps a version string usable in a file name.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_' || c == '+') {
			b[i] = '_'
		}
	}
	return string(b)
}

// checkSchema brings the file db holds to currentSchema before Open
// loads it: a new file or one of this schema is only stamped with this
// build (and, new, with the schema); an older one is copied to a backup
// next to it first, then migrated step by step in one transaction; a
// newer one is refused, untouched. It returns the backup's path, if one
// was made.
func checkSchema(db *bolt.DB, path string, opts Options) (string, error) {
	var sc Schema
	empty := false
	err := db.View(func(tx *bolt.Tx) error {
		var err error
		sc, err = readSchema(tx)
		// A file holding no bucket at all is new: nothing to keep.
		empty = tx.Bucket(metaBucket) == nil
		return err
	})
	if err != nil {
		return "", err
	}
	switch {
	case sc.Version > currentSchema:
		return "", newerSchemaError(path, sc)
	case empty || sc.Recorded && sc.Version == currentSchema:
		if sc.Recorded && sc.Writer == version.Get().Version {
			return "", nil // nothing to record
		}
		return "", db.Update(writeSchema)
	}
	// Older, or v0.1.0's unversioned file: a copy first.
	backup := upgradeBackupName(path, sc, opts.Clock.Now())
	if err := Backup(db, backup); err != nil {
		return "", fmt.Errorf("back up before upgrading the store from schema %d: %w", sc.Version, err)
	}
	opts.Logger.Warn("store: upgrading the store file; a copy of it as it was is kept",
		"path", path, "from_schema", sc.Version, "from_writer", sc.Writer, "to_schema", currentSchema,
		"to_writer", version.Get().Version, "backup", backup)
	err = db.Update(func(tx *bolt.Tx) error {
		for v := sc.Version; v < currentSchema; v++ {
			m, err := migrationFrom(v)
			if err != nil {
				return err
			}
			opts.Logger.Info("store: migrating", "from_schema", v, "to_schema", v+1, "change", m.what)
			if err := m.run(tx); err != nil {
				return fmt.Errorf("migrate the store from schema %d to %d (%s): %w", v, v+1, m.what, err)
			}
		}
		return writeSchema(tx)
	})
	if err != nil {
		return backup, fmt.Errorf("%w (the file is unchanged; a copy is also in %s)", err, backup)
	}
	return backup, nil
}

func migrationFrom(v int) (migration, error) {
	for _, m := range migrations {
		if m.from == v {
			return m, nil
		}
	}
	return migration{}, fmt.Errorf("no migration from store schema %d is registered (a bug of this build)", v)
}

// Backup writes a consistent copy of the store db to path, replacing it
// whole: a read transaction's view, written while writers go on,
// fsynced, then renamed into place, mode 0600.
func Backup(db *bolt.DB, path string) error {
	return db.View(func(tx *bolt.Tx) error { return atomicfile.WriteFrom(path, 0o600, writeTx(tx)) })
}

func writeTx(tx *bolt.Tx) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := tx.WriteTo(w)
		return err
	}
}

// Backup implements store.Backuper: the file as one read transaction
// sees it, written while writes go on.
func (s *Store) Backup(open func(size int64, schema int) (io.Writer, error)) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.db.View(func(tx *bolt.Tx) error {
		w, err := open(tx.Size(), currentSchema)
		if err != nil {
			return err
		}
		_, err = tx.WriteTo(w)
		return err
	})
}

// BackupFile writes a consistent copy of the store file at path (not
// open: its server stopped) to dst, fsynced. It waits up to timeout for
// the file's lock and says so when a running server holds it.
func BackupFile(path, dst string, timeout time.Duration) (Schema, error) {
	db, err := openReadOnly(path, timeout)
	if err != nil {
		return Schema{}, err
	}
	defer db.Close()
	var sc Schema
	err = db.View(func(tx *bolt.Tx) error {
		if sc, err = readSchema(tx); err != nil {
			return err
		}
		return atomicfile.WriteFrom(dst, 0o600, writeTx(tx))
	})
	return sc, err
}

// openReadOnly opens path for reading, with the messages of a missing
// file and of one a running server holds.
func openReadOnly(path string, timeout time.Duration) (*bolt.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, openError(path, err)
	}
	return db, nil
}

// errDamaged marks a file bbolt opened but whose pages are not whole.
var errDamaged = errors.New("damaged store file")
