// Package bolt is Anvil's embedded store: it implements store.Store on a
// single bbolt file, with every object also held in memory so that reads,
// lists, index lookups and watches never touch disk.
//
// It owns the database file it is given (one bucket per kind, keyed
// "namespace/name", JSON values, and a "meta" bucket with the global revision
// counter) and nothing else: it must not import the API, engine or transport
// packages, and callers must never open the file themselves while a Store has
// it open.
//
// Durability and group commit: one committer goroutine takes every write
// queued at that moment, applies them in order inside a single bbolt
// read-write transaction and commits it (bbolt fsyncs on commit), and only
// then updates the in-memory cache, publishes watch events in revision order
// and answers the callers. While one batch is being fsynced the next one
// queues, so throughput grows with the number of concurrent writers without
// any artificial delay. The group commit is this committer rather than
// bbolt's DB.Batch, which waits up to MaxBatchDelay to fill a batch, may run
// a caller's function twice, and returns to its callers in no set order,
// so the cache and the watches could not be updated in revision order.
//
// Cached objects are immutable once published (a write replaces the key's
// entry). Get, List, ByIndex and ordinary watches hand out copies; the
// store.Sharer methods and shared watches (WatchOptions.Shared) hand out
// the cached objects themselves, and UpdateShared keeps the caller's
// object without copying it.
package bolt

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Clock stamps creationTimestamp on created objects. If nil,
	// clock.Real.
	Clock clock.Clock
	// WatchHistory is how many of the most recent events are remembered so
	// that a watch can resume from an older resource version. Default 20000.
	WatchHistory int
	// WatchBuffer is how many events may wait for each watcher before it
	// is considered too slow; it then gets an Error event (store.ErrGone)
	// and its channel is closed. Default 4096.
	WatchBuffer int
	// Logger receives operational messages. Default: discard.
	Logger *slog.Logger
	// LockTimeout is how long Open waits for the file's lock, which
	// another process (a running server) may hold. Default 10s.
	LockTimeout time.Duration
}

const (
	defaultWatchHistory = 20000
	defaultWatchBuffer  = 4096
	defaultLockTimeout  = 10 * time.Second
)

var (
	metaBucket  = []byte("meta")
	revisionKey = []byte("revision")
)

// Store is the bbolt-backed store.Store. Create it with Open.
type Store struct {
	db   *bolt.DB
	opts Options
	log  *slog.Logger

	// Write queue, drained by the committer.
	qmu     sync.Mutex
	queue   []*request
	qclosed bool
	wake    chan struct{} // capacity 1
	stop    chan struct{} // closed by Close to stop the committer
	done    chan struct{} // closed when the committer has returned
	closing chan struct{} // closed by Close to stop watcher pumps

	// mu guards everything below. Only the committer changes the cache, and
	// it does so under mu.Lock; readers take mu.RLock.
	mu       sync.RWMutex
	closed   bool
	rev      uint64 // revision of the last committed change
	kinds    map[string]*kindCache
	ring     []event // circular, capacity opts.WatchHistory
	ringHead int     // index of the oldest event
	ringLen  int
	minRV    uint64 // oldest version a watch may resume from
	watchers map[*watcher]struct{}

	closeOnce sync.Once
	closeErr  error
}

// entry is one cached object. obj is never modified: shared readers
// (store.Sharer, shared watches) get it as it is, the others a copy. raw is
// its JSON from the write until that write is published — persist writes
// it, the watch history keeps it — and nil after, so that the cache does
// not hold every object twice; entries loaded at Open have none.
type entry struct {
	obj      model.Object
	raw      []byte
	ns, name string
	rev      uint64
	gen      int64
	specSum  [32]byte
	idx      [][]string // values per store.Indexes(kind), same order
}

type kindCache struct {
	kind string
	objs map[string]*entry
	ix   *store.Index
}

func newKindCache(kind string) *kindCache {
	return &kindCache{kind: kind, objs: map[string]*entry{}, ix: store.NewIndex(kind)}
}

func (kc *kindCache) put(key string, e *entry) {
	if old := kc.objs[key]; old != nil {
		kc.ix.Remove(key, old.idx)
	}
	kc.objs[key] = e
	kc.ix.Add(key, e.idx)
}

func (kc *kindCache) remove(key string) {
	if old := kc.objs[key]; old != nil {
		kc.ix.Remove(key, old.idx)
		delete(kc.objs, key)
	}
}

// Open opens (creating if needed) the database at path, brings its
// schema to SchemaVersion (checkSchema: a newer file is refused with
// ErrNewerSchema, an older one backed up next to it and migrated) and
// loads every object into memory.
func Open(path string, opts Options) (*Store, error) {
	opts.Clock = clock.Or(opts.Clock)
	if opts.WatchHistory <= 0 {
		opts.WatchHistory = defaultWatchHistory
	}
	if opts.WatchBuffer <= 0 {
		opts.WatchBuffer = defaultWatchBuffer
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	// Read first: opened for writing, bbolt scans the file on a
	// goroutine of its own that panics, out of reach, on a damaged one.
	if err := preflight(path, opts.LockTimeout); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      opts.LockTimeout,
		FreelistType: bolt.FreelistMapType,
		// The freelist is rebuilt by scanning at open instead of being
		// written on every commit (as etcd does); commits stay fsynced.
		NoFreelistSync: true,
	})
	if err != nil {
		return nil, openError(path, err)
	}
	// Before anything is loaded or written: a file from a newer Anvil is
	// refused untouched, an older one is backed up and migrated.
	if _, err := checkSchema(db, path, opts); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{
		db:       db,
		opts:     opts,
		log:      opts.Logger,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		closing:  make(chan struct{}),
		kinds:    map[string]*kindCache{},
		ring:     make([]event, opts.WatchHistory),
		watchers: map[*watcher]struct{}{},
	}
	for _, k := range model.Kinds {
		s.kinds[k] = newKindCache(k)
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s.minRV = s.rev
	go s.committer()
	return s, nil
}

func (s *Store) load() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		mb, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if v := mb.Get(revisionKey); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("meta/revision: %d bytes, want 8", len(v))
			}
			s.rev = binary.BigEndian.Uint64(v)
		}
		for _, kind := range model.Kinds {
			b, err := tx.CreateBucketIfNotExists([]byte(kind))
			if err != nil {
				return err
			}
			kc := s.kinds[kind]
			err = b.ForEach(func(k, v []byte) error {
				raw := slices.Clone(v)
				obj, err := model.Decode(kind, raw)
				if err != nil {
					return fmt.Errorf("%s %s: %w", kind, k, err)
				}
				m := obj.GetObjectMeta()
				rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
				if err != nil {
					return fmt.Errorf("%s %s: bad resourceVersion %q", kind, k, m.ResourceVersion)
				}
				if rv > s.rev {
					// Cannot happen with this package's writes (the
					// counter is written in the same transaction), but
					// never hand out a version twice.
					s.rev = rv
				}
				sum, err := specSum(obj)
				if err != nil {
					return err
				}
				kc.put(string(k), &entry{obj: obj, ns: m.Namespace, name: m.Name,
					rev: rv, gen: m.Generation, specSum: sum, idx: kc.ix.Values(obj)})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// openError explains why bbolt could not open path: a lock another
// process holds, or a file bbolt cannot read (torn by a crash of the disk
// or the file system, or not a store at all) — bbolt's own words are just
// "timeout" and "invalid database".
func openError(path string, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return fmt.Errorf("open store %s: another process holds its lock (is `anvil serve` running on this data directory? stop it first): %w", path, err)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum), errors.Is(err, bolterrors.ErrVersionMismatch),
		errors.Is(err, errDamaged):
		return fmt.Errorf("open store %s: the file is damaged or not a store (%w); nothing was changed. "+
			"Restore a backup over it (the damaged file is kept aside): `anvil restore FILE --data-dir %s`, "+
			"FILE one of your `anvil backup` copies or the copy an upgrade left in %s (docs/upgrades.md)",
			path, err, filepath.Dir(path), path+".*"+backupSuffix)
	}
	return fmt.Errorf("open store %s: %w", path, err)
}

func specSum(obj model.Object) ([32]byte, error) {
	var spec any
	switch o := obj.(type) {
	case *model.Hardware:
		spec = &o.Spec
	case *model.Template:
		spec = &o.Spec
	case *model.Workflow:
		spec = &o.Spec
	case *model.BootProfile:
		spec = &o.Spec
	case *model.Machine:
		spec = &o.Spec
	case *model.Job:
		spec = &o.Spec
	case *model.BMCTask:
		spec = &o.Spec
	case *model.WorkflowRuleSet:
		spec = &o.Spec
	case *model.Secret:
		// No spec: what the Secret holds (sealed) and its type.
		spec = []any{o.Type, o.Immutable, o.Sealed, o.Keys}
	default:
		return [32]byte{}, fmt.Errorf("%T: %w", obj, store.ErrInvalid)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// Close stops the committer (writes still queued fail with store.ErrClosed;
// the batch being committed completes), closes every watch and the database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.qmu.Lock()
		s.qclosed = true
		pending := s.queue
		s.queue = nil
		s.qmu.Unlock()
		for _, r := range pending {
			r.done <- response{err: store.ErrClosed}
		}
		close(s.stop)
		<-s.done

		s.mu.Lock()
		s.closed = true
		for w := range s.watchers {
			s.dropWatcherLocked(w, false)
		}
		s.mu.Unlock()
		close(s.closing)
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

func (s *Store) checkOpen() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	return nil
}
