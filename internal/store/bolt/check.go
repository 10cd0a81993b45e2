package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	bolt "go.etcd.io/bbolt"
)

// FileContents is what CheckFile read from a store file.
type FileContents struct {
	// Revision is the revision counter: the last revision handed out.
	Revision uint64
	// Schema is the file's layout and last writer.
	Schema Schema
	// Objects holds every stored object, by kind, then by
	// "namespace/name".
	Objects map[string]map[string]model.Object
}

// CheckFile checks the store file at path without opening a Store on it:
// bbolt's own consistency check (every page reachable exactly once, the
// freelist), the revision counter, one bucket per kind, and every object,
// which must decode as its kind, sit under its own key and carry a
// resourceVersion no higher than the counter. It opens the file read-only
// and writes nothing, so it sees a file left by a crash exactly as it was
// left; it waits up to 10 s for a Store that has the file open. The
// durability tests run it on every file their crashes leave behind.
func CheckFile(path string) (*FileContents, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, fmt.Errorf("check store %s: %w", path, err)
	}
	defer db.Close()
	// Before bbolt's own check, which panics out of reach on some damage.
	if err := verify(db); err != nil {
		return nil, fmt.Errorf("check store %s: %w", path, err)
	}
	c := &FileContents{Objects: map[string]map[string]model.Object{}}
	err = db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return fmt.Errorf("bbolt check: %w", errors.Join(errs...))
		}
		mb := tx.Bucket(metaBucket)
		if mb == nil {
			return fmt.Errorf("no %s bucket", metaBucket)
		}
		var err error
		if c.Schema, err = readSchema(tx); err != nil {
			return err
		}
		if c.Schema.Version != currentSchema {
			// Its buckets may be other than this build's: only a build
			// of its schema can check them.
			return nil
		}
		v := mb.Get(revisionKey)
		if len(v) != 8 {
			return fmt.Errorf("%s/%s: %d bytes, want 8", metaBucket, revisionKey, len(v))
		}
		c.Revision = binary.BigEndian.Uint64(v)
		for _, kind := range model.Kinds {
			b := tx.Bucket([]byte(kind))
			if b == nil {
				return fmt.Errorf("no %s bucket", kind)
			}
			objs := map[string]model.Object{}
			c.Objects[kind] = objs
			err := b.ForEach(func(k, v []byte) error {
				obj, err := model.Decode(kind, v)
				if err != nil {
					return fmt.Errorf("%s %s: %w", kind, k, err)
				}
				m := obj.GetObjectMeta()
				if m.Key() != string(k) {
					return fmt.Errorf("%s %s holds %s", kind, k, m.Key())
				}
				rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
				if err != nil {
					return fmt.Errorf("%s %s: bad resourceVersion %q", kind, k, m.ResourceVersion)
				}
				if rv > c.Revision {
					return fmt.Errorf("%s %s: resourceVersion %d above the revision counter %d", kind, k, rv, c.Revision)
				}
				objs[string(k)] = obj
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check store %s: %w", path, err)
	}
	return c, nil
}

// verify reads every page of the file db holds, in a read transaction,
// before anything else does: the file must be as long as its last
// transaction says, and every bucket, key and value must be readable.
// bbolt trusts the file: on a damaged one (a lost tail, zeroed pages) its
// own reads panic, some on goroutines of its own, which no caller can
// recover, so a damaged file must be found here, where a panic (or a
// fault in the memory map) is turned into an error wrapping errDamaged.
func verify(db *bolt.DB) (err error) {
	fi, err := os.Stat(db.Path())
	if err != nil {
		return err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errDamaged, r)
		}
	}()
	return db.View(func(tx *bolt.Tx) error {
		if need := tx.Size(); need > fi.Size() {
			return fmt.Errorf("%w: the file is %d bytes but its last transaction spans %d: its tail is missing", errDamaged, fi.Size(), need)
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(b) })
	})
}

// walk reads every key and value of b and of the buckets inside it.
func walk(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				return walk(nb)
			}
		}
		return nil
	})
}

// preflight verifies the file at path, if there is one, opened read-only
// (a running server's lock makes it wait up to timeout, then fail).
func preflight(path string, timeout time.Duration) error {
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return nil // new: bbolt makes it
	}
	db, err := openReadOnly(path, timeout)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := verify(db); err != nil {
		return openError(path, err)
	}
	return nil
}
