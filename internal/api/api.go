// Package api implements every anvil.v1 service (Hardware, Template, Workflow,
// BootProfile, Machine, BmcJob, BmcTask, CredentialSecret, Manifest, Agent,
// Log, Audit, Secret, Job) and Tinkerbell's proto.WorkflowService (for
// tink-agent) as connect handlers over store.Store, the workflow engine and
// the log store.
//
// It owns the translation between the wire (proto messages, connect codes)
// and the model: converting objects (through internal/wire, which the
// client commands share), parsing selectors, mapping errors to codes,
// authenticating calls before their bodies are read and capping those
// bodies (gate.go), asking internal/auth whether the caller may
// (authz.go), checking a write against the objects it does not touch
// before making it (admit.go: the store's claim conflicts, the engine's
// worker rule), apply's warnings of what can only fail later
// (applycheck.go: images no registry has, a boot mode needing a BMC), and
// the few operations that are several store calls in one (Reprovision,
// ProvisionDevice, SetNetboot's read-modify-write). It must not hold state of its own
// beyond a lock, open listeners or decide policy — the store, the engine,
// the model's validation and internal/auth decide; internal/server mounts
// the handlers and serves them.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/api/proto/tinkprotoconnect"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/enroll"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// DefaultMaxWait caps GetAction's long poll when Config.MaxWait is 0.
const DefaultMaxWait = 30 * time.Second

// DefaultMaxRequestBytes caps a request body when Config.MaxRequestBytes
// is 0. The largest request anvil expects is ManifestService.Apply of a
// fleet's manifest: 10,000 Hardware like examples/hardware.yaml weigh
// 6.9 MB of YAML, 7.2 MB as a Connect JSON request; with a cloud-config
// of two SSH keys and a package list each, 11.9 MB and 12.3 MB. 32 MiB is
// 2.6 times the larger. This cap is the one limit on a manifest's size:
// the parser has none of its own (model.ParseManifests bounds objects and
// nodes, not bytes), so `--max-request-mib` is the knob for both. A
// request that large costs the server about four times its size while it
// is decoded (a 31 MiB Apply took the peak RSS from 27 to 158 MB).
const DefaultMaxRequestBytes = 32 << 20

// Engine is what the agent and job services need from the workflow
// engine. *workflow.Engine implements it.
type Engine interface {
	GetActionFor(ctx context.Context, agent workflow.AgentName, wait time.Duration) (*workflow.NextAction, error)
	ReportActionStatus(ctx context.Context, r workflow.ActionReport) (model.State, error)
	Cancel(ctx context.Context, workflowID string, opts workflow.CancelOptions) (*model.Workflow, error)
}

// LogStore is what the agent and log services need from the log store.
// *logstore.Store implements it.
type LogStore interface {
	Append(lines ...logstore.Line) error
	Read(workflowID, agentID string, tail int) ([]logstore.Line, error)
	// ReadHardware, ReadMachine and UnknownMachines read the machine
	// records (internal/bootlog writes them).
	ReadHardware(hardwareID string, tail int) ([]logstore.Line, error)
	ReadMachine(machine string, tail int) ([]logstore.Line, error)
	UnknownMachines(limit int) ([]logstore.Line, error)
	// ReadSelection reads several records merged by time (a machine's
	// view: logstore.MachineSelection).
	ReadSelection(sel logstore.Selection, tail int) ([]logstore.Line, error)
}

// Config configures the services.
type Config struct {
	// Store holds the objects. Required.
	Store store.Store
	// Enroller runs the passes of WorkflowRuleSetService.Enroll. If nil,
	// one over Store, which records no machine events.
	Enroller *enroll.Enroller
	// Engine serves the agent service and cancels jobs. If nil,
	// AgentService answers UNAVAILABLE for GetAction and
	// ReportActionStatus, and JobService for CancelJob.
	Engine Engine
	// Logs keeps agent output and the machine records. If nil, StreamLogs,
	// GetLogs and ListUnknownMachines answer UNAVAILABLE.
	Logs LogStore
	// MaxWait caps the long poll of GetAction. If 0, uses DefaultMaxWait.
	MaxWait time.Duration
	// Logger receives internal errors (those answered as INTERNAL). If
	// nil, uses slog.Default().
	Logger *slog.Logger
	// Clock names reprovision workflows by default and stamps audit
	// records. If nil, clock.Real.
	Clock clock.Clock

	// Authenticate turns a management call's request headers into its
	// principal; an error answers UNAUTHENTICATED. If nil, every
	// management call is auth.Anonymous: authentication is off (the
	// server sets it unless told --insecure-no-auth).
	Authenticate func(ctx context.Context, h http.Header) (*auth.Principal, error)
	// AgentKey checks agent calls: the per-workflow token (header
	// v1.AgentTokenHeader) and the caller's address against its
	// Hardware's. If nil, agent calls are not checked.
	AgentKey *auth.AgentKey
	// Audit records every mutating management call. If nil, none is
	// recorded.
	Audit *audit.Log
	// Secrets are the generated secrets boot profile templates use,
	// shown to admins. If nil, the secret service answers UNAVAILABLE.
	Secrets SecretStore
	// Sealer encrypts the v1 Secrets a manifest applies before they are
	// stored. If nil, an Apply holding a Secret is refused
	// (FAILED_PRECONDITION): credentials are never stored in the clear.
	Sealer *secrets.Sealer
	// ClientIP returns the caller's address as the server's trusted-proxy
	// rule sees it, or "" to use the TCP peer's.
	ClientIP func(ctx context.Context) string
	// MaxRequestBytes caps the body of every request (see gate.go): a
	// larger one is refused RESOURCE_EXHAUSTED having read at most this
	// much, or nothing when its Content-Length says so. Client streams
	// (StreamLogs) are capped per message instead. If 0, uses
	// DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// Registries are the server's registry settings (normalized), under
	// each Hardware's anvil.dev/registries: how agents pull the images of
	// actions that run in containers. Zero: every registry directly,
	// anonymously.
	Registries oci.Settings
	// BootISO says the server serves its own boot ISO per MAC
	// (/iso/<mac>/anvil.iso): an isoboot Workflow without
	// bootOptions.isoURL boots it. Without it such a Workflow is refused at
	// apply, having nothing to boot.
	BootISO bool
	// ImageChecker looks up, at apply time, the action images of
	// Templates that no native action runs, under Registries: those it
	// cannot resolve are warned of (refused under strict). If nil, only
	// whether an image is native is checked.
	ImageChecker ImageChecker
	// ActionRuntime is the runtime of actions whose template gives none
	// (actions.RuntimeContainer runs every image itself, as Tinkerbell
	// would); "" lets the agent choose (native when it implements the
	// image).
	ActionRuntime string

	// Discovery, if set, makes Hardware for machines Anvil does not know
	// (anvil serve --discovery): Anvil's agent's Discover, and a
	// tink-agent's GetAction from an agent no Hardware has (discover.go).
	// If nil, Discover answers FAILED_PRECONDITION and unknown tink-agents
	// are refused, as without discovery.
	Discovery *DiscoveryConfig

	// Peers lists the other replicas of Kubernetes mode, whose machine
	// records and audit entries GetLogs, ListUnknownMachines and the
	// audit List merge into their answers (peers.go). If nil (the
	// embedded store: one server), they answer from local data.
	Peers Peers
	// PeerTimeout bounds each peer's answer. If 0, DefaultPeerTimeout.
	PeerTimeout time.Duration
	// PeerClient sends the requests to the peers. If nil, a client of
	// its own (HTTP/1.1 and h2c).
	PeerClient connect.HTTPClient
}

// Services implements every anvil.v1 service. It is safe for concurrent use.
type Services struct {
	cfg Config
	log *slog.Logger

	// stopping is cancelled by Stop: long-lived calls (watches, long
	// polls) end early so a graceful shutdown need not wait for them.
	stopping context.Context
	stop     context.CancelFunc

	// reprovisionMu makes Reprovision's check (no unfinished workflow on
	// the Hardware) and its writes one step for concurrent callers.
	reprovisionMu sync.Mutex
	// claimMu makes a Hardware write's claim check (no MAC, IP or agent
	// ID of another Hardware, see admit) and the write one step.
	claimMu sync.Mutex
	// disc is discovery's runtime; nil when discovery is off.
	disc *discoveryState
}

// New returns the services for cfg.
func New(cfg Config) *Services {
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = DefaultPeerTimeout
	}
	if cfg.PeerClient == nil {
		cfg.PeerClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}
	}
	stopping, stop := context.WithCancel(context.Background())
	return &Services{cfg: cfg, log: cfg.Logger, stopping: stopping, stop: stop, disc: newDiscoveryState(cfg.Discovery)}
}

// Stop ends every open Watch (UNAVAILABLE: watch again) and every waiting
// GetAction (NOT_FOUND: ask again), and makes new ones end at once. Unary
// calls are not affected. Call it when a graceful shutdown starts.
func (s *Services) Stop() { s.stop() }

// longLived returns a context that ends with ctx or when Stop is called.
func (s *Services) longLived(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(s.stopping, cancel)
	return ctx, func() { unhook(); cancel() }
}

// stopped reports whether Stop was called.
func (s *Services) stopped() bool { return s.stopping.Err() != nil }

// ServiceNames lists the fully-qualified names of the anvil.v1 services
// Mount serves (and its server reflection describes).
func ServiceNames() []string {
	return []string{
		anvilv1connect.HardwareServiceName,
		anvilv1connect.TemplateServiceName,
		anvilv1connect.WorkflowServiceName,
		anvilv1connect.BootProfileServiceName,
		anvilv1connect.ManifestServiceName,
		anvilv1connect.AgentServiceName,
		anvilv1connect.LogServiceName,
		anvilv1connect.AuditServiceName,
		anvilv1connect.BackupServiceName,
		anvilv1connect.SecretServiceName,
		anvilv1connect.JobServiceName,
		anvilv1connect.MachineServiceName,
		anvilv1connect.BmcJobServiceName,
		anvilv1connect.BmcTaskServiceName,
		anvilv1connect.CredentialSecretServiceName,
		anvilv1connect.WorkflowRuleSetServiceName,
		tinkprotoconnect.WorkflowServiceName,
	}
}

// Mount registers every service on mux, and gRPC server reflection
// (v1 and v1alpha) describing them. Each speaks gRPC, gRPC-Web and the
// Connect protocol (binary and JSON), connect's defaults.
//
// Every handler Mount registers sits behind the gate (gate.go): management
// calls are authenticated from their headers before a byte of the body is
// read, and every body is capped at Config.MaxRequestBytes. Behind it, the
// guard interceptor writes the audit log; opts' interceptors run outside
// the guard.
func (s *Services) Mount(mux *http.ServeMux, opts ...connect.HandlerOption) {
	maxMsg := connect.WithReadMaxBytes(int(min(s.cfg.MaxRequestBytes, math.MaxInt32)))
	opts = append(opts, connect.WithInterceptors(guard{s}), maxMsg)
	handle := func(prefix string, h http.Handler) { mux.Handle(prefix, s.gate(prefix, h)) }
	handle(anvilv1connect.NewHardwareServiceHandler(hardwareHandler{newHardwareService(s)}, opts...))
	handle(anvilv1connect.NewTemplateServiceHandler(templateHandler{newTemplateService(s)}, opts...))
	handle(anvilv1connect.NewWorkflowServiceHandler(workflowHandler{newWorkflowService(s), newHardwareService(s)}, opts...))
	handle(anvilv1connect.NewBootProfileServiceHandler(newBootProfileService(s), opts...))
	handle(anvilv1connect.NewMachineServiceHandler(newMachineService(s), opts...))
	handle(anvilv1connect.NewBmcJobServiceHandler(newBMCJobService(s), opts...))
	handle(anvilv1connect.NewBmcTaskServiceHandler(newBMCTaskService(s), opts...))
	handle(anvilv1connect.NewCredentialSecretServiceHandler(credentialService{s}, opts...))
	handle(anvilv1connect.NewWorkflowRuleSetServiceHandler(ruleSetHandler{newRuleSetService(s)}, opts...))
	handle(anvilv1connect.NewManifestServiceHandler(manifestService{s}, opts...))
	handle(anvilv1connect.NewAgentServiceHandler(agentService{s}, opts...))
	handle(anvilv1connect.NewLogServiceHandler(logService{s}, opts...))
	handle(anvilv1connect.NewAuditServiceHandler(auditService{s}, opts...))
	handle(anvilv1connect.NewBackupServiceHandler(backupService{s}, opts...))
	handle(anvilv1connect.NewSecretServiceHandler(secretService{s}, opts...))
	handle(anvilv1connect.NewJobServiceHandler(jobService{s}, opts...))
	handle(tinkprotoconnect.NewWorkflowServiceHandler(tinkService{s}, opts...))
	reflector := grpcreflect.NewStaticReflector(ServiceNames()...)
	handle(grpcreflect.NewHandlerV1(reflector, maxMsg))
	handle(grpcreflect.NewHandlerV1Alpha(reflector, maxMsg))
}

// toConnect maps an error from the store, the engine or the model to a
// connect error with the matching code, keeping the message (which names
// the object). Unexpected errors become INTERNAL and are logged.
func (s *Services) toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	var list model.ErrorList
	code := connect.CodeInternal
	switch {
	case errors.Is(err, store.ErrNotFound),
		errors.Is(err, workflow.ErrNoAction),
		errors.Is(err, workflow.ErrUnknownWorkflow):
		code = connect.CodeNotFound
	case errors.Is(err, store.ErrAlreadyExists):
		code = connect.CodeAlreadyExists
	case errors.Is(err, store.ErrConflict):
		code = connect.CodeAborted
	case errors.Is(err, store.ErrInvalid), errors.As(err, &list):
		code = connect.CodeInvalidArgument
	case errors.Is(err, store.ErrGone):
		code = connect.CodeOutOfRange
	case errors.Is(err, workflow.ErrBadReport), errors.Is(err, workflow.ErrEnded):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, store.ErrClosed), errors.Is(err, store.ErrUnavailable),
		errors.Is(err, logstore.ErrClosed), errors.Is(err, audit.ErrClosed):
		code = connect.CodeUnavailable
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	default:
		s.log.Error("api: internal error", "err", err)
	}
	return connect.NewError(code, err)
}

// invalid returns an INVALID_ARGUMENT error.
func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}
