package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/anvilproj/anvil/internal/atomicfile"
	"github.com/anvilproj/anvil/internal/version"
)

// bboltMagic is the number at byte 16 of a bbolt file's first page (its
// meta page), in the machine's byte order (little-endian on amd64 and
// arm64, all Anvil builds for).
const bboltMagic = 0xED0CDAED

// IsStoreFile reports whether the file at path starts like a bbolt file:
// a backup (`anvil backup`) rather than an export's YAML.
func IsStoreFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [20]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(head[16:]) == bboltMagic
}

// Restored is what RestoreFile did.
type Restored struct {
	// Contents is what the backup holds (checked).
	Contents *FileContents
	// Replaced is where the store file the backup replaced was kept
	// ("" when there was none).
	Replaced string
}

// RestoreFile puts the backup src in place of the store file at path.
// The backup is checked whole first (CheckFile) and refused when it is
// damaged or of a newer schema than this build's; a backup of an older
// schema is restored as it is and migrated by the next Open, as any
// older file. The file at path, if any, must not be open in another
// process (the lock a running server holds refuses the restore at
// once), is kept under a name saying when it was replaced, and is then
// replaced whole: a crash leaves either file in place, never a mix.
func RestoreFile(src, path string, now time.Time) (Restored, error) {
	var r Restored
	if !IsStoreFile(src) {
		return r, fmt.Errorf("restore %s: not a store backup (no bbolt file)", src)
	}
	c, err := CheckFile(src)
	if err != nil {
		return r, fmt.Errorf("restore: the backup is damaged, nothing was changed: %w", err)
	}
	r.Contents = c
	if c.Schema.Version > currentSchema {
		return r, fmt.Errorf("restore %s: %w: the backup has store schema %d, written by Anvil %s; this Anvil (%s) knows schema %d at most: restore it with Anvil %s or newer",
			src, ErrNewerSchema, c.Schema.Version, c.Schema.Writer, version.Get().Version, currentSchema, c.Schema.Writer)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return r, fmt.Errorf("restore: %w", err)
	}
	cur, err := os.OpenFile(path, os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return r, fmt.Errorf("restore: %w", err)
	default:
		defer cur.Close()
		// The lock bbolt takes (flock): held by a running server.
		if err := syscall.Flock(int(cur.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return r, fmt.Errorf("restore: %s is open in another process (is `anvil serve` running on this data directory? stop it first; "+
					"to copy a running server's store use `anvil backup --online`): nothing was changed", path)
			}
			return r, fmt.Errorf("restore: lock %s: %w", path, err)
		}
		r.Replaced = fmt.Sprintf("%s.replaced-by-restore.%s", path, now.UTC().Format("20060102T150405Z"))
		if err := os.Link(path, r.Replaced); err != nil {
			return r, fmt.Errorf("restore: keep the current store: %w", err)
		}
	}
	in, err := os.Open(src)
	if err != nil {
		return r, fmt.Errorf("restore: %w", err)
	}
	defer in.Close()
	err = atomicfile.WriteFrom(path, 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("restore: %w", err)
	}
	return r, nil
}
