// Package atomicfile replaces small files whole: keys, certificates,
// tokens and state files that a crash must leave either as they were or as
// they were meant to become, never half written.
//
// It owns only that write. It is standard library only, so leaf packages
// (internal/auth, internal/tlsconf) may use it; it must not learn about
// what the files hold.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data: written to a temporary file in the same
// directory with mode perm, synced, renamed over path, and the directory
// synced, so a reader sees the old content or the new one, and after a
// crash the file holds one of them.
func Write(path string, data []byte, perm os.FileMode) error {
	return WriteFrom(path, perm, bytesFill(data))
}

// WriteFrom is Write with the content streamed by fill, for files too
// large to hold in memory (a store's backup).
func WriteFrom(path string, perm os.FileMode, fill func(io.Writer) error) error {
	tmp, err := writeTemp(path, fill, perm)
	if err == nil {
		if err = os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(path)
}

// Create makes path with data only if it does not exist yet: the content
// is written and synced under a temporary name first, then linked into
// place, so path never exists half written. When path already exists it
// returns an error wrapping fs.ErrExist and leaves it alone: of two
// processes creating the same key, one wins and the other reads the
// winner's.
func Create(path string, data []byte, perm os.FileMode) error {
	return CreateFrom(path, perm, bytesFill(data))
}

// CreateFrom is Create with the content streamed by fill.
func CreateFrom(path string, perm os.FileMode, fill func(io.Writer) error) error {
	tmp, err := writeTemp(path, fill, perm)
	if err == nil {
		err = os.Link(tmp, path)
		os.Remove(tmp) // after the link, path keeps the content
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return syncDir(path)
}

func bytesFill(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

// writeTemp writes what fill writes, synced, to a new file of mode perm
// next to path and returns its name; on error nothing is left behind.
func writeTemp(path string, fill func(io.Writer) error, perm os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = f.Chmod(perm) // before any byte: a secret is never readable by others
	if err == nil {
		err = fill(f)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// syncDir makes a rename or link next to path durable.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}
