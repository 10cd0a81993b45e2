// Package store defines the Store interface through which everything in Anvil
// reads and writes every kind of internal/model (Hardware, Template, Workflow,
// BootProfile, Machine, Job, Task, Secret), and the indexes,
// selectors and watch events that go with it.
//
// The interface is Kubernetes-shaped on purpose — namespaced names, string
// resource versions with optimistic concurrency, label and field selectors,
// watches that resume from a version — so that store/bolt (embedded, the
// default) and a later store on the Kubernetes API (CRDs) are interchangeable
// without touching callers. Implementations live in sub-packages; this package
// holds no state and must not import any of them. Overlay (a view of a
// store as a write will leave it, for checking the write first) works
// through the interface, so with every implementation.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
)

// Errors returned by every implementation. Callers test with errors.Is; the
// wrapping error names the object.
var (
	// ErrNotFound: no object of that kind, namespace and name.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: Create of a name that is taken.
	ErrAlreadyExists = errors.New("already exists")
	// ErrConflict: Update or Delete with a resourceVersion that is no longer
	// current. Re-read and retry.
	ErrConflict = errors.New("conflict: the object has been modified; re-read it and retry")
	// ErrGone: Watch from a resourceVersion older than the store remembers.
	// List again and watch from the list's version.
	ErrGone = errors.New("resource version too old")
	// ErrInvalid: the object cannot be stored (bad name, wrong kind, …).
	ErrInvalid = errors.New("invalid object")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store closed")
	// ErrUnavailable: the store's server (the Kubernetes API server) did
	// not answer in time or could not be reached. A write that fails so
	// may or may not have been made: re-read, or retry it.
	ErrUnavailable = errors.New("store unavailable")
)

// Index names. Hardware is indexed by MAC, IP, agent ID and instance ID;
// Workflow by the hardware it runs on and the agent IDs of its tasks. Index
// values are compared exactly; MACs are in macaddr.MAC's canonical form
// (lower-case, colon-separated) whatever the Hardware's spelling.
const (
	IndexMAC         = "mac"         // Hardware: spec.interfaces[].dhcp.mac
	IndexIP          = "ip"          // Hardware: spec.interfaces[].dhcp.ip.address
	IndexAgentID     = "agentID"     // Hardware: Hardware.AgentIDs(); Workflow: status.tasks[].agentID
	IndexInstanceID  = "instanceID"  // Hardware: spec.metadata.instance.id
	IndexHardwareRef = "hardwareRef" // Workflow: spec.hardwareRef
)

// Reader reads objects. Returned objects are the caller's to modify.
type Reader interface {
	// Get returns one object, or an error wrapping ErrNotFound.
	Get(ctx context.Context, kind, namespace, name string) (model.Object, error)
	// List returns the objects that match opts, ordered by namespace then
	// name, and the store's resource version at the time of the list (watch
	// from it to see every later change exactly once).
	List(ctx context.Context, kind string, opts ListOptions) ([]model.Object, string, error)
}

// Writer changes objects. Every method returns only after the change is
// durable, and returns the object as stored (with its new resourceVersion).
type Writer interface {
	// Create stores a new object; its resourceVersion must be empty. The
	// namespace defaults to "default"; UID, creationTimestamp, generation and
	// resourceVersion are set by the store.
	Create(ctx context.Context, obj model.Object) (model.Object, error)
	// Update replaces an object. If obj's resourceVersion is set it must be
	// the current one (else ErrConflict); if empty, the update is
	// unconditional. UID and creationTimestamp are kept from the stored
	// object; generation increments when the spec changes.
	Update(ctx context.Context, obj model.Object) (model.Object, error)
	// Delete removes an object. A non-empty resourceVersion is a
	// precondition, as for Update.
	Delete(ctx context.Context, kind, namespace, name, resourceVersion string) error
	// Apply creates or updates every object in one atomic, durable step:
	// either all are stored or none is. An object that exists is updated
	// unconditionally (its status is kept unless the given one is non-zero).
	Apply(ctx context.Context, objs []model.Object) ([]model.Object, error)
}

// Watcher streams changes.
type Watcher interface {
	// Watch sends the changes to objects of kind that match opts. With
	// opts.ResourceVersion empty it first sends every current object as
	// Added, then live changes; with a version it sends every change after
	// that version (ErrGone if the store no longer remembers so far back).
	// The channel is closed when ctx ends or the store closes; a watcher
	// that falls too far behind receives an Error event (ErrGone) and the
	// channel is closed.
	Watch(ctx context.Context, kind string, opts WatchOptions) (<-chan Event, error)
}

// Indexer finds objects by an index value.
type Indexer interface {
	// ByIndex returns the objects of kind whose index holds value, ordered
	// by namespace then name. An unknown index is an error.
	ByIndex(ctx context.Context, kind, index, value string) ([]model.Object, error)
}

// Store is the whole storage interface.
type Store interface {
	Reader
	Writer
	Watcher
	Indexer
	// Close releases the store. Pending writes either complete or fail.
	Close() error
}

// LiveReader is a Store whose reads are answered from a cache that can be
// behind a write another process made and acknowledged: the Kubernetes
// store, where each replica's cache follows the API server through a
// watch. StoredVersion reads one object's resourceVersion from the source
// itself (an error wrapping ErrNotFound if it is not there). Who acts on a
// read that must not be stale (handing out an action) confirms with it
// that the version read is still the stored one.
type LiveReader interface {
	StoredVersion(ctx context.Context, kind, namespace, name string) (string, error)
}

// Backuper is a store that copies itself while it serves: the embedded
// one, whose copy is its file (`anvil backup`). The Kubernetes store is
// not one: the cluster's etcd is backed up by the cluster's tools.
type Backuper interface {
	// Backup writes a consistent copy of the store, as one read
	// transaction sees it while writes go on, to the writer open
	// returns; open is told the copy's size in bytes and its schema
	// version first.
	Backup(open func(size int64, schema int) (io.Writer, error)) error
}

// Sharer is a Store that can hand out the objects it caches instead of
// copies, and take over a caller's object instead of copying it: the agent
// path's reads and writes then cost no whole-object copy. Objects it
// returns are immutable and shared: who gets one must not modify it (to
// change one, copy what changes: model.WithPrivateStatus). The embedded
// store is one; the Kubernetes store is not (it copies).
type Sharer interface {
	// GetShared is Reader.Get without the copy.
	GetShared(ctx context.Context, kind, namespace, name string) (model.Object, error)
	// ByIndexShared is Indexer.ByIndex without the copies.
	ByIndexShared(ctx context.Context, kind, index, value string) ([]model.Object, error)
	// UpdateShared is Writer.Update that keeps obj itself, not a copy: the
	// caller must neither modify obj after the call nor keep a part of it
	// it will modify; parts shared with an object from GetShared are fine,
	// since those are never modified. It returns the object as stored,
	// shared (possibly obj itself).
	UpdateShared(ctx context.Context, obj model.Object) (model.Object, error)
}

// AsSharer returns st as a Sharer, or nil. It does not look through an
// Unwrapper: a wrapper adds checks or fencing to the writes that
// UpdateShared would skip.
func AsSharer(st Store) Sharer {
	sh, _ := st.(Sharer)
	return sh
}

// SharedIndexer returns an Indexer whose ByIndex answers with st's shared
// objects (Sharer.ByIndexShared) when st is a Sharer, else st itself: for
// readers that only read what they get.
func SharedIndexer(st Store) Indexer {
	if sh := AsSharer(st); sh != nil {
		return sharedIndexer{sh}
	}
	return st
}

// GetShared reads one object to read only: st's shared object when st is a
// Sharer, else a copy (Reader.Get).
func GetShared(ctx context.Context, st Store, kind, namespace, name string) (model.Object, error) {
	if sh := AsSharer(st); sh != nil {
		return sh.GetShared(ctx, kind, namespace, name)
	}
	return st.Get(ctx, kind, namespace, name)
}

type sharedIndexer struct{ sh Sharer }

func (s sharedIndexer) ByIndex(ctx context.Context, kind, index, value string) ([]model.Object, error) {
	return s.sh.ByIndexShared(ctx, kind, index, value)
}

// Unwrapper is a Store that wraps another (adding checks to its writes,
// say), so that AsLiveReader can look through it.
type Unwrapper interface {
	Unwrap() Store
}

// AsLiveReader returns st, or the store it wraps, as a LiveReader; nil if
// it has none (its reads are never stale, as the embedded store's).
func AsLiveReader(st Store) LiveReader {
	for st != nil {
		if lr, ok := st.(LiveReader); ok {
			return lr
		}
		u, ok := st.(Unwrapper)
		if !ok {
			return nil
		}
		st = u.Unwrap()
	}
	return nil
}

// ListOptions filters a List.
type ListOptions struct {
	// Namespace limits the list to one namespace; empty means all.
	Namespace string
	// Labels must match the object's labels; nil matches everything.
	Labels labels.Selector
	// Fields are "path=value" or "path!=value" terms on the fields
	// FieldValue knows; all must hold.
	Fields []FieldRequirement
}

// WatchOptions filters a Watch.
type WatchOptions struct {
	Namespace       string
	Labels          labels.Selector
	Fields          []FieldRequirement
	ResourceVersion string
	// Shared asks for events whose objects may be the store's own, shared
	// with its cache and with every other such watcher: the receiver must
	// not modify them (copy first, e.g. model.DeepCopy). A store that
	// cannot share (or does not) sends private copies, which the receiver
	// treats the same way. It saves a copy per event and watcher.
	Shared bool
}

// EventType says what happened to an object.
type EventType string

// Event types, as in Kubernetes.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Error    EventType = "ERROR"
)

// Event is one change. For Deleted, Object is the last stored state with the
// deletion's resourceVersion. For Error, Err says why the watch ended.
type Event struct {
	Type   EventType
	Object model.Object
	Err    error
}

// NotFoundError returns an error wrapping ErrNotFound that names the object.
func NotFoundError(kind, namespace, name string) error {
	return fmt.Errorf("%s %s/%s: %w", kind, namespace, name, ErrNotFound)
}
