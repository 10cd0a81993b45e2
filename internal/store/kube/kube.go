// Package kube is the store.Store on the Kubernetes API: Anvil's Kubernetes
// mode (`anvil serve --store kubernetes`). Objects live as custom resources
// of the CRDs in deploy/crds — Tinkerbell's Hardware, Template and Workflow
// (tinkerbell.org/v1alpha1), Rufio's Machine, Job and Task
// (bmc.tinkerbell.org/v1alpha1), Anvil's BootProfile (anvil.dev/v1alpha1) —
// and BMC credentials as core v1 Secrets, so that kubectl, GitOps tools and
// cluster-api-provider-tinkerbell see and drive the same objects.
//
// It owns the translation between internal/model objects and the API
// server's resources, and one watch-fed cache per kind: every read (Get,
// List, ByIndex, Watch) is answered from memory, never by polling the API
// server. A kind's cache is filled by a list and kept current by a watch
// (client-go's dynamic client), re-listed when the watch is too old. Each
// write goes to the API server and returns once this replica's cache has
// seen it, so a caller reads its own writes as with the embedded store.
// It must not decide anything about what objects mean; that is the callers'.
//
// Where Kubernetes differs from the store contract, and what this package
// does about it:
//
//   - Status is a subresource: the main resource's writes ignore it. Create
//     and Update write the spec and metadata first, then the status, each
//     as a JSON merge patch of what changed since the object Anvil read. So
//     a field Anvil does not model (set by another tool) is kept, and a
//     watcher may see the two halves as two events. A merge patch replaces
//     a list whole: a list of the metadata or spec is sent as stored, read
//     from the API server, with the caller's change made in it, so fields
//     of its elements Anvil does not model are kept too.
//   - Update without a resourceVersion sends the caller's changes without
//     a precondition; the API server applies them to the newest version.
//   - Apply of several objects is not one transaction: every object is
//     checked first, then written in order; if a write fails, the writes
//     before it are undone (created objects deleted, updated ones restored)
//     before Apply returns the error.
//   - Resource versions are etcd revisions: decimal, growing with every
//     write in the cluster, as the contract wants. Watches resume from this
//     replica's history of each kind (Config.WatchHistory events), so ErrGone
//     means that history, not etcd's compaction.
//   - Objects are created in namespaces that may not exist yet: a namespace
//     is created on first use, as the embedded store needs none.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

var (
	_ store.Store      = (*Store)(nil)
	_ store.LiveReader = (*Store)(nil)
)

// Config says which cluster to use and how.
type Config struct {
	// REST reaches the API server (from a kubeconfig or in-cluster).
	REST *rest.Config
	// Namespace limits the store to one namespace; empty means all.
	Namespace string
	// WatchHistory is how many of each kind's latest changes are kept for
	// watches that resume from an older version. Default 4096: each is a
	// whole decoded object, and a watcher that falls further behind
	// re-lists (the engine does) instead.
	WatchHistory int
	// SyncTimeout bounds the wait for a write to reach this replica's
	// cache (it normally takes milliseconds); after it the write is
	// returned anyway and a warning logged. Default 30s.
	SyncTimeout time.Duration
	// RequestTimeout bounds each write request to the API server (and the
	// reads a write makes first): a write to an API server that does not
	// answer fails with store.ErrUnavailable after it instead of hanging
	// its caller. Lists and watches are not bounded by it (a watch is
	// long-lived; a list of a large fleet may take longer); the
	// reflectors retry them. Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxRequests bounds the requests this replica has at the API server
	// at once for reads and writes (not its watches). A fleet's agents
	// report by the thousand; sent all at once they queue inside the API
	// server, where the Lease renewals of leader election wait behind
	// them until the leader loses its term (seen with 10,000 agents on
	// 3 replicas). Queued here instead, a request waits its turn in this
	// replica and the API server answers each in milliseconds. Default
	// DefaultMaxRequests.
	MaxRequests int
	// Waiting, if set, is told why Open is still waiting: each failure to
	// make a kind's first list (the API server unreachable, a CRD
	// missing). For a readiness probe to say why it is not ready. It is
	// called from the reflectors' goroutines.
	Waiting func(err error)
	// Log receives operational messages. Default: discard.
	Log *slog.Logger
}

// DefaultRequestTimeout is Config.RequestTimeout's default: far beyond a
// write's normal milliseconds, even on a loaded API server, and short
// enough that an agent's report or an operator's apply gets an answer
// while it still matters.
const DefaultRequestTimeout = 15 * time.Second

// DefaultMaxRequests is Config.MaxRequests's default: enough to keep an
// API server's cores busy (a write takes it a few milliseconds of CPU),
// few enough that a Lease renewal behind them waits well under a second.
const DefaultMaxRequests = 32

const (
	defaultWatchHistory = 4096
	defaultSyncTimeout  = 30 * time.Second
	// Back-off between attempts to list or watch a kind after an error.
	retryMin = 500 * time.Millisecond
	retryMax = 30 * time.Second
)

// resource is where the API server keeps one kind.
type resource struct {
	gvr schema.GroupVersionResource
	// status: the kind has a status subresource.
	status bool
}

// resources maps each stored kind to its API resource.
var resources = map[string]resource{
	model.KindHardware:    {schema.GroupVersionResource{Group: "tinkerbell.org", Version: "v1alpha1", Resource: "hardware"}, true},
	model.KindTemplate:    {schema.GroupVersionResource{Group: "tinkerbell.org", Version: "v1alpha1", Resource: "templates"}, true},
	model.KindWorkflow:    {schema.GroupVersionResource{Group: "tinkerbell.org", Version: "v1alpha1", Resource: "workflows"}, true},
	model.KindBootProfile: {schema.GroupVersionResource{Group: "anvil.dev", Version: "v1alpha1", Resource: "bootprofiles"}, true},
	model.KindMachine:     {schema.GroupVersionResource{Group: "bmc.tinkerbell.org", Version: "v1alpha1", Resource: "machines"}, true},
	model.KindJob:         {schema.GroupVersionResource{Group: "bmc.tinkerbell.org", Version: "v1alpha1", Resource: "jobs"}, true},
	model.KindTask:        {schema.GroupVersionResource{Group: "bmc.tinkerbell.org", Version: "v1alpha1", Resource: "tasks"}, true},
	model.KindSecret:      {schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, false},
	// Tinkerbell's CRD has the status subresource (an empty status).
	model.KindWorkflowRuleSet: {schema.GroupVersionResource{Group: "tinkerbell.org", Version: "v1alpha1", Resource: "workflowrulesets"}, true},
}

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// Store is a store.Store on a Kubernetes API server.
type Store struct {
	cfg  Config
	log  *slog.Logger
	dyn  dynamic.Interface // lists and watches: unbounded
	wdyn dynamic.Interface // writes and their reads: bounded by RequestTimeout
	// The same two as raw REST clients, for the agent path (raw.go).
	raw, rawWatch *rest.RESTClient
	turns         chan struct{} // see turn
	kinds         map[string]*kindCache

	ctx    context.Context // ends at Close: stops the reflectors
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closed    chan struct{}

	nsMu sync.Mutex
	nsOK map[string]bool // namespaces known to exist
}

// Open connects to the API server and starts one list-and-watch per kind.
// It returns once every kind's first list is in the cache, or with an
// error when ctx ends first (the API server unreachable, a CRD missing:
// the error names the kind and the last failure).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.REST == nil {
		return nil, errors.New("kube store: no API server configuration")
	}
	if cfg.WatchHistory <= 0 {
		cfg.WatchHistory = defaultWatchHistory
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = defaultSyncTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rc := rest.CopyConfig(cfg.REST)
	if rc.QPS == 0 {
		// client-go's default of 5 requests per second would make a
		// fleet's reports wait on the client, not on the API server.
		rc.QPS, rc.Burst = 500, 1000
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube store: %w", err)
	}
	// A second client whose every request has a deadline (the HTTP
	// client's timeout, which would also cut the watches short: hence
	// two). A context deadline per call would do the same, but every
	// call would have to remember it.
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	wrc := rest.CopyConfig(rc)
	wrc.Timeout = cfg.RequestTimeout
	wdyn, err := dynamic.NewForConfig(wrc)
	if err != nil {
		return nil, fmt.Errorf("kube store: %w", err)
	}
	raw, err := newRawClient(wrc)
	if err != nil {
		return nil, fmt.Errorf("kube store: %w", err)
	}
	rawWatch, err := newRawClient(rc)
	if err != nil {
		return nil, fmt.Errorf("kube store: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Store{cfg: cfg, log: log, dyn: dyn, wdyn: wdyn, raw: raw, rawWatch: rawWatch, turns: make(chan struct{}, cfg.MaxRequests), kinds: map[string]*kindCache{},
		ctx: sctx, cancel: cancel, closed: make(chan struct{}), nsOK: map[string]bool{}}
	for kind, res := range resources {
		s.kinds[kind] = newKindCache(kind, res, cfg.WatchHistory)
	}
	for _, kc := range s.kinds {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.reflect(kc)
		}()
	}
	for _, kind := range model.Kinds {
		if err := s.kinds[kind].waitSynced(ctx); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("kube store: first list of %s: %w", kind, err)
		}
	}
	return s, nil
}

// Close stops every reflector and ends every watch.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.cancel()
		s.wg.Wait()
		for _, kc := range s.kinds {
			kc.close()
		}
	})
	return nil
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// turn waits until fewer than Config.MaxRequests of this replica's
// requests are at the API server (or ctx ends) and returns the function
// that ends the turn. The wait is not part of the request's timeout,
// which is for the API server's answer.
func (s *Store) turn(ctx context.Context) (func(), error) {
	select {
	case s.turns <- struct{}{}:
		return func() { <-s.turns }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// client returns the resource interface of kind in namespace ns (all
// namespaces if empty), for lists and watches.
func (s *Store) client(kc *kindCache, ns string) dynamic.ResourceInterface {
	return namespaced(s.dyn.Resource(kc.res.gvr), ns)
}

// writer is client for writes, each request bounded by RequestTimeout.
func (s *Store) writer(kc *kindCache, ns string) dynamic.ResourceInterface {
	return namespaced(s.wdyn.Resource(kc.res.gvr), ns)
}

func namespaced(r dynamic.NamespaceableResourceInterface, ns string) dynamic.ResourceInterface {
	if ns == "" {
		return r
	}
	return r.Namespace(ns)
}

// ---- translation between model objects and API objects ----

// Annotations that carry a sealed Secret (one the embedded store's
// server encrypted, moved into a cluster): a core Secret has no field for
// the ciphertext, and the API server checks data against the type (a
// basic-auth Secret must hold a username or password in data), so a
// sealed Secret is stored as an Opaque one with its type beside it.
const (
	annSealed     = "anvil.dev/sealed"
	annSealedKeys = "anvil.dev/sealed-keys"
	annSealedType = "anvil.dev/sealed-type"
)

// encode returns obj as the API server's JSON object.
func encode(kind string, obj model.Object) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	if kind == model.KindSecret {
		sec := obj.(*model.Secret)
		delete(m, "sealed")
		delete(m, "keys")
		if sec.Sealed != "" {
			meta, _ := m["metadata"].(map[string]any)
			if meta == nil {
				meta = map[string]any{}
				m["metadata"] = meta
			}
			ann, _ := meta["annotations"].(map[string]any)
			if ann == nil {
				ann = map[string]any{}
				meta["annotations"] = ann
			}
			ann[annSealed] = sec.Sealed
			ann[annSealedKeys] = strings.Join(sec.Keys, ",")
			ann[annSealedType] = sec.Type
			m["type"] = "Opaque"
		}
	}
	return m, nil
}

// decode returns the model object of an API object.
func decode(kind string, u *unstructured.Unstructured) (model.Object, error) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	return decodeRaw(kind, b)
}

// unsealAnnotations moves a sealed Secret's ciphertext from the
// annotations that carry it in a cluster back to its fields.
func unsealAnnotations(sec *model.Secret) {
	v, ok := sec.Annotations[annSealed]
	if !ok {
		return
	}
	sec.Sealed = v
	if k := sec.Annotations[annSealedKeys]; k != "" {
		sec.Keys = strings.Split(k, ",")
	}
	sec.Type = sec.Annotations[annSealedType]
	for _, a := range []string{annSealed, annSealedKeys, annSealedType} {
		delete(sec.Annotations, a)
	}
	if len(sec.Annotations) == 0 {
		sec.Annotations = nil
	}
}

// apiError maps an API server error to the store's errors, naming the
// object; the server's message is kept.
func apiError(kind, ns, name string, err error) error {
	if err == nil {
		return nil
	}
	var target error
	switch {
	case apierrors.IsNotFound(err):
		target = store.ErrNotFound
	case apierrors.IsAlreadyExists(err):
		target = store.ErrAlreadyExists
	case apierrors.IsConflict(err):
		target = store.ErrConflict
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		target = store.ErrInvalid
	case apierrors.IsGone(err), apierrors.IsResourceExpired(err):
		target = store.ErrGone
	case unreachable(err):
		return fmt.Errorf("%s %s/%s: %w: the Kubernetes API server did not answer (%s); the write may or may not have been made", kind, ns, name, store.ErrUnavailable, err.Error())
	default:
		return fmt.Errorf("%s %s/%s: %w", kind, ns, name, err)
	}
	return fmt.Errorf("%s %s/%s: %w (%s)", kind, ns, name, target, err.Error())
}

// unreachable reports whether err says the API server could not be
// reached or did not answer in time (as opposed to an answer refusing
// the request): a connection refused or reset, a request timeout, or the
// server saying it is overloaded or unavailable.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false // the caller gave up; that is its own error
	}
	if apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsTooManyRequests(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF)
}

// ensureNamespace creates namespace ns if it does not exist yet.
func (s *Store) ensureNamespace(ctx context.Context, ns string) error {
	s.nsMu.Lock()
	ok := s.nsOK[ns]
	s.nsMu.Unlock()
	if ok {
		return nil
	}
	nc := s.wdyn.Resource(namespacesGVR)
	_, err := nc.Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": ns},
		}}
		_, err = nc.Create(ctx, u, metav1.CreateOptions{})
		if err == nil {
			s.log.Info("kube store: created namespace", "namespace", ns)
		}
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	s.nsMu.Lock()
	s.nsOK[ns] = true
	s.nsMu.Unlock()
	return nil
}

// Resource returns the API resource that holds kind, for tools and tests
// that reach the API server beside the store.
func Resource(kind string) schema.GroupVersionResource { return resources[kind].gvr }
