package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	bolt "go.etcd.io/bbolt"
)

// FileContents is what CheckFile read from a store file.
type FileContents struct {
	// Revision is the revision counter: the last revision handed out.
	Revision uint64
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
