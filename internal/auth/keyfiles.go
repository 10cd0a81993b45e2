package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// keyFileCheckInterval is how often, at most, key files are stat'ed for a
// change.
const keyFileCheckInterval = time.Second

// fileKeys are the keys of PEM and JWKS files, read again when a file's
// modification time or size changes.
type fileKeys struct {
	paths []string
	now   func() time.Time
	log   *slog.Logger

	keys atomic.Pointer[keySet] // all files' keys, merged

	mu     sync.Mutex // guards the fields below and serialises reloads
	next   time.Time  // no stat before then
	stamps []fileStamp
	sets   []*keySet // per path; nil for a file that is gone
}

// fileStamp identifies one version of a file.
type fileStamp struct {
	mod  time.Time
	size int64
}

func newFileKeys(paths []string, now func() time.Time, log *slog.Logger) *fileKeys {
	return &fileKeys{
		paths:  paths,
		now:    now,
		log:    log,
		stamps: make([]fileStamp, len(paths)),
		sets:   make([]*keySet, len(paths)),
	}
}

// current returns the files' keys, first re-reading the files that changed
// if the last check is more than keyFileCheckInterval old. A caller that
// finds a check under way does not wait for it.
func (f *fileKeys) current() *keySet {
	if f.mu.TryLock() {
		if now := f.now(); !now.Before(f.next) {
			f.next = now.Add(keyFileCheckInterval)
			if err := f.reloadLocked(false); err != nil {
				f.log.Warn("auth: key file reload failed; keeping its previous keys", "err", err)
			}
		}
		f.mu.Unlock()
	}
	return f.keys.Load()
}

// load reads every file; any error fails it. For the start.
func (f *fileKeys) load() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = f.now().Add(keyFileCheckInterval)
	return f.reloadLocked(true)
}

// reloadLocked re-reads the files whose stamp changed. When strict, the
// first error is returned at once. Otherwise a file that is gone loses its
// keys (its trust is withdrawn), while a file that fails to read or parse
// (half written, say) keeps its previous keys and is tried again at the
// next check; the errors are joined.
func (f *fileKeys) reloadLocked(strict bool) error {
	var errs []error
	changed := false
	for i, path := range f.paths {
		fi, err := os.Stat(path)
		if err != nil {
			if strict {
				return fmt.Errorf("key file: %w", err)
			}
			if errors.Is(err, fs.ErrNotExist) {
				// Logged once, when its keys go.
				if f.sets[i] != nil {
					f.log.Warn("auth: key file removed; its keys are no longer trusted", "path", path)
					f.sets[i], f.stamps[i], changed = nil, fileStamp{}, true
				}
				continue
			}
			errs = append(errs, fmt.Errorf("key file: %w", err))
			continue
		}
		st := fileStamp{mod: fi.ModTime(), size: fi.Size()}
		if f.sets[i] != nil && st == f.stamps[i] {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			if strict {
				return fmt.Errorf("key file: %w", err)
			}
			errs = append(errs, fmt.Errorf("key file: %w", err))
			continue
		}
		keys, skipped, err := parseKeys(data)
		if err != nil {
			err = fmt.Errorf("key file %s: %w", path, err)
			if strict {
				return err
			}
			errs = append(errs, err)
			continue
		}
		for _, s := range skipped {
			f.log.Warn("auth: key file entry skipped", "path", path, "key", s)
		}
		if f.sets[i] != nil {
			f.log.Info("auth: key file reloaded", "path", path, "keys", len(keys))
		}
		f.sets[i], f.stamps[i], changed = newKeySet(keys), st, true
	}
	if changed || f.keys.Load() == nil {
		f.keys.Store(mergeKeySets(f.sets...))
	}
	return errors.Join(errs...)
}
