// Package server runs `anvil serve`: it opens the store and the log store in
// the data directory, runs the workflow engine, and serves the API over HTTP
// (HTTP/1.1 and h2c: gRPC, gRPC-Web, Connect JSON, plus /healthz, /readyz and
// /metrics), over HTTPS (the same, with TLS on) and over a gRPC port (h2c, or
// TLS), the network boot services and the metadata service (on the HTTP port
// and its own), then shuts all of it down gracefully when its context ends.
//
// It owns the wiring only — what is opened, in which order, and which
// long-lived components run in which stage (Run), and when it is ready
// and alive for systemd (notify.go); the lifecycle of those
// components, their ordered start and stop, is internal/supervise's. It
// must not implement request handling (internal/api), workflow logic
// (internal/workflow), storage (internal/store) or a protocol (dhcp, tftp,
// …); a new long-lived service is one more component in a stage.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/bootlog"
	"github.com/anvilproj/anvil/internal/clientip"
	"github.com/anvilproj/anvil/internal/enroll"
	"github.com/anvilproj/anvil/internal/leader"
	"github.com/anvilproj/anvil/internal/metadata"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/supervise"
	"github.com/anvilproj/anvil/internal/systemd"
	"github.com/anvilproj/anvil/internal/ui"
	"github.com/anvilproj/anvil/internal/version"
	"github.com/anvilproj/anvil/internal/workflow"
)

// Defaults for the zero values of Config.
const (
	DefaultBind            = "0.0.0.0"
	DefaultHTTPPort        = 7080
	DefaultGRPCPort        = 42113
	DefaultHTTPSPort       = 7443
	DefaultShutdownTimeout = 10 * time.Second
	DefaultDHCPMode        = "reservation"
	DefaultDHCPPort        = 67
	DefaultTFTPPort        = 69
	DefaultSyslogPort      = 514

	// readHeaderTimeout bounds a slow client's request headers. There is
	// no WriteTimeout: watches and log streams are long-lived.
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
)

// File names inside Config.DataDir.
const (
	secretsDir = "secrets" // generated secrets for boot profile templates
	logsDir    = "logs"
)

// Config configures Run.
type Config struct {
	// Store chooses the store: the embedded one in DataDir (default) or
	// the Kubernetes API. Its DataDir and Logger are this Config's.
	Store backend.Config
	// Leader is the leader election of Kubernetes mode.
	Leader LeaderConfig
	// PeerURL is where the other replicas of Kubernetes mode reach this
	// one's API to read its machine records and audit entries
	// (internal/peers). If empty, http://PUBLIC_IP:HTTP_PORT.
	PeerURL string
	// DataDir holds the store and the logs; it is created if missing.
	// Required.
	DataDir string
	// Bind is the one IP address every listener uses. If empty, uses
	// DefaultBind (every IPv4 address of the machine).
	Bind string
	// HTTPPort serves the API (HTTP/1.1 and h2c), health and metrics. If 0,
	// uses DefaultHTTPPort.
	HTTPPort int
	// GRPCPort serves the API over h2c only, for gRPC clients. If 0, uses
	// DefaultGRPCPort.
	GRPCPort int
	// DisableHTTP and DisableGRPC switch the listeners off.
	DisableHTTP bool
	DisableGRPC bool
	// Listeners are listeners the caller opened, served instead of
	// listening on Bind and the port; the port is then the listener's. A
	// test listens on port 0 and hands the listener over, so no other
	// program can take the port between its choice and its use. Run closes
	// them when it returns.
	Listeners Listeners
	// ShutdownTimeout bounds how long in-flight calls may run after
	// shutdown starts. If 0, uses DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives one line per listener and lifecycle events. If nil,
	// uses slog.Default().
	Logger *slog.Logger

	// PublicIP is the address machines reach this server at: DHCP's
	// server identifier and next-server, and the host of every URL in
	// boot scripts. If empty, uses Bind, or when Bind is 0.0.0.0 the
	// address of the interface of the default route.
	PublicIP string
	// DHCPMode is "reservation", "proxy", "auto-proxy" or "off". If empty,
	// uses DefaultDHCPMode.
	DHCPMode string
	// DisableDHCP is the same as DHCPMode "off".
	DisableDHCP bool
	// DHCPPort is the DHCP server port. If 0, uses DefaultDHCPPort.
	DHCPPort int
	// DisableTFTP switches the TFTP server off.
	DisableTFTP bool
	// TFTPPort is the TFTP port. If 0, uses DefaultTFTPPort.
	TFTPPort int
	// TFTPDir, if set, is served over TFTP and at /ipxe/binary/ on top of
	// the bundled iPXE binaries (its files win).
	TFTPDir string
	// DisableSyslog switches the syslog receiver off.
	DisableSyslog bool
	// SyslogPort is the syslog port (UDP). If 0, uses DefaultSyslogPort.
	SyslogPort int
	// BootEnvDir holds the boot environment files served at /bootenv/. If
	// empty, uses DataDir/bootenv.
	BootEnvDir string
	// BootEnvModules, if set, makes Run build the boot environment into
	// BootEnvDir before the boot services start (nothing to do when it is
	// up to date): a module directory, a root containing one, or a
	// linux-image .deb (see internal/bootenv).
	BootEnvModules string
	// BootEnvKernel is the kernel image for that build. If empty, the
	// .deb's (or the root's boot/vmlinuz-RELEASE).
	BootEnvKernel string
	// BootEnvAnvil is the binary that becomes the boot environment's
	// /init. If empty, uses this executable.
	BootEnvAnvil string
	// ImagesDir holds OS images served at /images/ for workflows to
	// stream to disk. If empty, uses DATA_DIR/images.
	ImagesDir string
	// AssetsDir holds the files boot profiles use (kernels, initrds,
	// images, sysext .raw and .conf), served at /assets/ with their
	// checksums. If empty, uses DATA_DIR/assets.
	AssetsDir string
	// BootISO is the ISO served to every machine at /iso/<mac>/anvil.iso,
	// which isoboot Workflows without bootOptions.isoURL boot from virtual
	// media. If empty, none is served and such Workflows are refused.
	BootISO string
	// KernelArgs are extra kernel arguments for the boot environment.
	KernelArgs []string

	// Discovery boots machines no Hardware knows into the boot
	// environment's discovery mode and makes their Hardware of the
	// inventory their agent reports (docs/discovery.md). Off by default.
	// In proxy mode it makes the DHCP server answer unknown PXE clients
	// (as auto-proxy does).
	Discovery bool
	// DiscoveryNamespace is where discovered Hardware goes. If empty,
	// api.DefaultDiscoveryNamespace.
	DiscoveryNamespace string
	// DiscoveryMax caps the discovered Hardware. If 0,
	// api.DefaultDiscoveryMax.
	DiscoveryMax int
	// DiscoveryPools are the lease pools for unknown machines in
	// reservation mode ("10.0.0.100-10.0.0.199" or ".../24", one per
	// subnet or relay: internal/dhcp/pool). Empty: in reservation mode
	// unknown machines get no address from Anvil (another DHCP server, or
	// a proxy mode, must give them one).
	DiscoveryPools []string

	// How agents pull the images of actions that run in containers
	// (docs/actions.md), under each Hardware's anvil.dev/registries:
	// RegistryMirrors are REGISTRY=URL ("quay.io=http://10.0.0.2:5000"),
	// RegistryPlainHTTP registries reached over plain HTTP, RegistryCAs
	// REGISTRY=FILE (PEM), RegistryAuthFile a docker config.json of
	// credentials. All empty: every registry directly, anonymously.
	RegistryMirrors   []string
	RegistryPlainHTTP []string
	RegistryCAs       []string
	RegistryAuthFile  string
	// NoApplyImageCheck stops apply from looking up the action images
	// of Templates in their registries (a HEAD through the settings
	// above, for its warnings): for a server that must not make outbound
	// requests on a writer's say-so, or that cannot reach the agents'
	// registries at all.
	NoApplyImageCheck bool
	// ActionRuntime is the runtime of actions whose template names none:
	// "" (the agent runs natively what it implements), container (every
	// image runs itself, as under Tinkerbell) or native.
	ActionRuntime string

	// MetadataPort is the metadata service's own listener (Hegel's port,
	// where Tinkerbell's actions look). The metadata routes are also
	// served on the HTTP port, whatever this says. If 0, uses
	// metadata.DefaultPort.
	MetadataPort int
	// DisableMetadata switches the metadata listener off (not the routes
	// on the HTTP port).
	DisableMetadata bool
	// SealKeyFile is the key that encrypts the v1 Secrets (BMC
	// credentials) in the store; it is made (0600) when missing. If
	// empty, uses DataDir/secrets/seal.key. Keep it apart from the store's
	// backups.
	SealKeyFile string
	// DisableBMC switches the BMC job executor off: Jobs are stored but
	// nothing runs them.
	DisableBMC bool
	// DisableEnroll switches the enrolment controller off: discovered
	// Hardware gets workflows from WorkflowRuleSets only when `anvil
	// enroll` asks.
	DisableEnroll bool
	// CommissionTemplate names a Template of commissioning actions that a
	// discovered machine runs (Workflow commission-<hardware>) before any
	// rule enrols it; a failed machine is never enrolled
	// (docs/commissioning.md). Empty: no commissioning.
	CommissionTemplate string
	// BMCCAFile is a PEM file of the CAs that sign BMCs' HTTPS
	// certificates (Redfish, Intel AMT over TLS). If empty, the system's CAs; a Machine with
	// insecureTLS verifies nothing.
	BMCCAFile string
	// BMCPollInterval (`anvil serve --bmc-poll-interval`, default
	// DefaultBMCPollInterval) is how often every Machine's power state is read
	// (docs/bmc.md); 0 reads none.
	BMCPollInterval time.Duration
	// BMCInventoryInterval (`anvil serve --bmc-inventory-interval`,
	// default DefaultBMCInventoryInterval) is how often the poller reads
	// each machine's inventory from a BMC that has one (Redfish) into
	// its Hardware's status.attributes.outOfBand, besides at its first
	// contact and when asked (docs/bmc.md); 0 reads none.
	BMCInventoryInterval time.Duration
	// BMCPollConcurrency bounds the power-state polls at once; 0 uses
	// bmc.DefaultPollConcurrency.
	BMCPollConcurrency int
	// ConsolePort is the serial console's SSH port (`ssh -p 2222
	// node1@anvil`, docs/bmc.md); 0 opens none. `anvil serve` defaults it
	// to console.DefaultPort. The console needs the BMC executor: with
	// DisableBMC there is none.
	ConsolePort int
	// ConsoleHostKeyFile is the console's SSH host key, made (Ed25519)
	// when missing. If empty, uses DataDir/console/ssh_host_ed25519_key.
	ConsoleHostKeyFile string
	// InsecureNoAuth switches authentication off: every management call
	// is an anonymous admin and agent calls are not checked. Run says so
	// loudly in the log.
	InsecureNoAuth bool
	// Auth configures bearer token verification (identity provider JWKS,
	// key files, claims). With neither JWKSURL nor KeyFiles, the local
	// issuer in DATA_DIR/auth is trusted and an admin token is written to
	// DATA_DIR/auth/admin.token at each start.
	Auth auth.Config
	// UIOIDC, if set, lets the web UI log in through an OpenID Connect
	// provider whose tokens Auth verifies (docs/ui.md).
	UIOIDC *ui.OIDC

	// TrustedProxies are the addresses or CIDR prefixes of proxies whose
	// X-Forwarded-For is believed, on every listener (internal/clientip):
	// for the metadata service, the boot path's per-client limits, the
	// script by source address and what the context of each request
	// says. If empty, a caller is always its TCP peer.
	TrustedProxies []string
	// PathPrefix, if set (e.g. "/tink-stack/"), serves every HTTP route of
	// every listener under that prefix too; the unprefixed routes keep
	// working, so an ingress may forward with or without the prefix.
	// Leading and trailing slashes are optional. If empty, none.
	PathPrefix string

	// The public boot path's limits (iPXE scripts and binaries, boot
	// environment files, OS images and the metadata routes, on the HTTP
	// and the metadata port; not the API, /healthz, /readyz or /metrics).
	// Each is off when 0; `anvil serve`'s flags default to the
	// DefaultBoot* constants. See internal/httplimit.
	//
	// BootRate is requests/s for all clients together; BootBurst the
	// bucket size (if 0, one second of BootRate); BootConcurrency the
	// requests served at once.
	BootRate        float64
	BootBurst       int
	BootConcurrency int
	// BootClientRate, BootClientBurst and BootClientConcurrency are the
	// same per client address.
	BootClientRate        float64
	BootClientBurst       int
	BootClientConcurrency int
	// BootStallTimeout cuts a boot path response whose client takes
	// nothing for this long; BootMinSendRate (bytes/s) one that averages
	// less once BootSendGrace has passed since its first write. A cut
	// frees the response's place in the limits. Each is off when 0;
	// `anvil serve`'s flags default to DefaultBootStallTimeout,
	// DefaultBootMinSendRate and DefaultBootSendGrace. See
	// httplimit.Pacer.
	BootStallTimeout time.Duration
	BootMinSendRate  int64
	BootSendGrace    time.Duration

	// MaxRequestBytes caps the body of every API request (gRPC, gRPC-Web
	// and Connect, on every port): larger ones are refused
	// RESOURCE_EXHAUSTED having read at most this much. The boot and
	// metadata routes read no body. If 0, uses api.DefaultMaxRequestBytes;
	// `anvil serve --max-request-mib` sets it.
	MaxRequestBytes int64

	// TLS switches TLS on for the API (see tls.go): an HTTPS listener on
	// HTTPSPort serving what the HTTP port serves, and TLS on the gRPC
	// port unless GRPCPlaintext. The HTTP port stays plain either way
	// (firmware cannot do TLS). If false (the zero value), nothing speaks
	// TLS and the TLS fields below are unused; `anvil serve` sets it
	// unless --no-tls.
	TLS bool
	// HTTPSPort serves the HTTP port's routes over TLS (HTTP/1.1 and
	// HTTP/2). If 0, uses DefaultHTTPSPort.
	HTTPSPort int
	// DisableHTTPS switches the HTTPS listener off (the gRPC port still
	// speaks TLS).
	DisableHTTPS bool
	// GRPCPlaintext keeps the gRPC port on h2c with TLS on.
	GRPCPlaintext bool
	// TLSCertFile and TLSKeyFile name the PEM certificate (and chain) and
	// key to serve, reloaded when they change. If both are empty, a
	// certificate is issued by a CA generated in DATA_DIR/tls.
	TLSCertFile string
	TLSKeyFile  string
	// TLSSANs are extra DNS names and IP addresses for the generated
	// certificate, besides the public IP, the bind address, the machine's
	// addresses, localhost and the hostname.
	TLSSANs []string

	// Notify, if not nil, is told of the server's lifecycle as systemd's
	// Type=notify wants it (docs/systemd.md): STATUS= lines while it
	// starts, READY=1 once every stage is up — every listener bound and
	// served, the store open — and STOPPING=1 when the shutdown starts.
	Notify *systemd.Notifier
	// WatchdogEvery, with Notify, pings systemd's watchdog this often
	// while the server is alive: its stages up and its store answering a
	// read. 0: no pings.
	WatchdogEvery time.Duration
	// Reloader, if not nil, is filled in by Run with what a reload
	// (SIGHUP) can reload in the running server.
	Reloader *Reloader
}

// Listeners are the TCP listeners a caller may open for Run (see
// Config.Listeners); a nil one is opened by Run on Bind and its port.
type Listeners struct {
	HTTP, HTTPS, GRPC, Metadata net.Listener
}

// close closes the listeners given, used or not.
func (l Listeners) close() {
	for _, ln := range []net.Listener{l.HTTP, l.HTTPS, l.GRPC, l.Metadata} {
		if ln != nil {
			ln.Close()
		}
	}
}

// Run serves until ctx ends, then shuts down gracefully and returns nil; or
// returns the error that kept it from starting or that ended a listener or
// the engine early (after shutting the rest down).
//
// It is the wiring: it opens what the components need, in the order of
// the stages below, so that a bad flag or a busy port fails before
// anything runs; then a supervisor (internal/supervise) starts the
// components stage by stage and, when ctx ends or one fails, stops them in
// the reverse order: the transports (listeners stop accepting, in-flight
// calls get ShutdownTimeout), the boot policy, the BMC executor, poller
// and console, the engine, the machine record writer (it writes what is
// queued); then what was opened closes, the stores last.
func Run(ctx context.Context, cfg Config) (err error) {
	defer cfg.Listeners.close() // serving or not; closing twice is harmless
	set, err := settle(&cfg)
	if err != nil {
		return err
	}
	log := cfg.Logger
	var res closers
	defer func() { err = errors.Join(err, res.close()) }()
	sup := &supervise.Supervisor{Logger: log}

	// The sockets come first, so that a busy port fails before anything
	// waits, and so that the HTTP port answers the probes while the rest
	// opens (probes.go).
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	lns, err := openListeners(ctx, &cfg, cfg.TLS, &res)
	if err != nil {
		return err
	}
	early := serveEarly(lns)
	res.add(early.close)
	cfg.Store.Waiting = early.waiting
	phase := func(doing string) {
		early.phase(doing)
		cfg.Notify.Status(doing)
	}

	// Stage 1: storage, and the writer of machine records into it.
	phase("opening the store")
	st, logs, err := openStores(ctx, cfg, &res)
	if err != nil {
		return err
	}
	recorder := bootlog.New(bootlog.Config{Store: st, Logs: logs, Logger: log})
	sup.Stage("machine records", supervise.Component{Name: "machine record writer",
		Run: bestEffort(log, "machine record writer stopped", recorder.Run)})

	// Stage 2: the keys the replicas share (the generated CA among
	// them), the certificate the listeners serve, what the API and the
	// boot scripts need; all before anything runs.
	phase("sharing keys with the other replicas")
	if err := shareKeys(ctx, cfg); err != nil {
		return err
	}
	tlsConf, err := newTLSConfig(cfg, log)
	if err != nil {
		return err
	}
	phase("building the boot environment")
	if err := buildBootEnv(ctx, cfg, log); err != nil {
		return err
	}
	phase("starting")
	sec, err := setupSecurity(ctx, cfg, log)
	if err != nil {
		return err
	}
	res.add(sec.close)
	secretStore, sealer, err := openSecrets(cfg, st)
	if err != nil {
		return err
	}
	// Kubernetes mode's election and replica registry, built (not run)
	// here: the boot scripts list the replicas.
	el, err := elector(cfg)
	if err != nil {
		return err
	}
	registry, err := replicaRegistry(cfg, el)
	if err != nil {
		return err
	}
	boot, err := newBootServices(cfg, set.trusted, st, recorder, sec.agentKey, registry, log)
	if err != nil {
		return err
	}
	res.add(boot.close)

	// Stage 3: the core: the workflow engine, then the BMC executor, its
	// poller and the serial console (stopped before the engine). In
	// Kubernetes mode the engine's reconciler, the executor and the poller
	// run on the elected leader only, writing through a fenced store;
	// every replica answers agents and wakes their long polls.
	leaderStore := st
	if el != nil {
		leaderStore = leader.Fenced(st)
	}
	wcfg := workflow.Config{Store: leaderStore, Logger: log, ISOURL: boot.isoURL}
	if cfg.Store.IsKubernetes() {
		// Each kind has its own watch there: a Workflow may be seen
		// before the Template or Hardware created just before it.
		wcfg.MissingGrace = kubeMissingGrace
	}
	engine := workflow.New(wcfg)
	bmcLeader, bmcAll, err := bmcComponents(cfg, leaderStore, sealer, recorder, &res)
	if err != nil {
		return err
	}
	engineComponent := supervise.Component{Name: "workflow engine", Run: engine.Run}
	// The enrolment controller creates workflows for discovered
	// machines (internal/enroll): on the leader, like the engine.
	enrollLeader := enrollComponents(cfg, leaderStore, recorder)
	if el == nil {
		sup.Stage("workflow engine", engineComponent)
		sup.Stage("bmc", append(bmcLeader, bmcAll...)...)
		sup.Stage("enrolment", enrollLeader...)
	} else {
		leaderOnly := append(append([]supervise.Component{engineComponent}, bmcLeader...), enrollLeader...)
		sup.Stage("workflow engine", supervise.Component{Name: "agent wake-ups", Run: engine.Follow},
			leaderComponent(el, leaderOnly))
		sup.Stage("bmc", bmcAll...)
	}

	// Stage 4: the transports: the API and the boot services over HTTP,
	// DHCP, TFTP and syslog, with the boot policy's views under them. In
	// Kubernetes mode the API merges the machine records and audit
	// entries of the peer replicas into its reads, and (stage 5, so it
	// is withdrawn first on the way down) this replica's Lease in the
	// replica registry tells them where to ask it.
	var apiPeers api.Peers
	if registry != nil {
		apiPeers = registry
	}
	services := api.New(api.Config{Store: st, Engine: engine, Logs: logs, Logger: log, Peers: apiPeers,
		Discovery:    boot.discovery(cfg, recorder),
		Authenticate: sec.authenticate, AgentKey: sec.agentKey, Audit: sec.audit, Secrets: secretStore, Sealer: sealer,
		MaxRequestBytes: cfg.MaxRequestBytes, Registries: set.registries, BootISO: boot.isoURL != nil,
		ImageChecker: imageChecker(cfg), ActionRuntime: cfg.ActionRuntime, ClientIP: requestClientIP,
		Enroller: enroll.New(enrollConfig(cfg, st, recorder))})
	h, err := newHandlers(cfg, set, services, boot, secretStore,
		uiConfig(cfg, st, logs, sec, log), sup.Ready)
	if err != nil {
		return err
	}
	sup.Stage("web ui", supervise.Component{Name: "web ui view", Run: h.ui.Run})
	sup.Stage("boot policy", boot.policyComponent())
	sup.Stage("transports", append(boot.components(), httpServers(cfg, lns, h, tlsConf, early, func() { services.Stop(); h.ui.Stop() })...)...)
	if registry != nil {
		sup.Stage("replica registry", supervise.Component{Name: "replica registry", Run: registry.Run})
	}
	if n := notifyComponent(cfg, sup, st, readyStatus(lns, boot)); n != nil {
		sup.Stage("systemd", n...)
	}
	return sup.Run(ctx)
}

// settings are what settle derives from a Config.
type settings struct {
	trusted    []netip.Prefix // --trusted-proxies
	pathPrefix string         // --path-prefix, normalized
	registries oci.Settings   // how agents pull action images
}

// settle fills in cfg's defaults and checks what can be checked without
// opening anything.
func settle(cfg *Config) (settings, error) {
	var set settings
	if cfg.DataDir == "" {
		return set, errors.New("no data directory (--data-dir)")
	}
	if cfg.Bind == "" {
		cfg.Bind = DefaultBind
	}
	if net.ParseIP(cfg.Bind) == nil {
		return set, fmt.Errorf("--bind %q is not an IP address", cfg.Bind)
	}
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = DefaultHTTPPort
	}
	if cfg.GRPCPort == 0 {
		cfg.GRPCPort = DefaultGRPCPort
	}
	if cfg.HTTPSPort == 0 {
		cfg.HTTPSPort = DefaultHTTPSPort
	}
	if cfg.MetadataPort == 0 {
		cfg.MetadataPort = metadata.DefaultPort
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var err error
	if set.trusted, err = clientip.ParseTrustedProxies(cfg.TrustedProxies); err != nil {
		return set, fmt.Errorf("--trusted-proxies: %w", err)
	}
	if set.pathPrefix, err = normalizePathPrefix(cfg.PathPrefix); err != nil {
		return set, err
	}
	if set.registries, err = registrySettings(*cfg); err != nil {
		return set, err
	}
	if err := checkTLSFlags(*cfg); err != nil {
		return set, err
	}
	if err := checkUIOIDC(*cfg); err != nil {
		return set, err
	}
	if err := actions.CheckRuntime(cfg.ActionRuntime); err != nil {
		return set, fmt.Errorf("--action-runtime: %w", err)
	}
	logRegistrySettings(cfg.Logger, set.registries)
	if cfg.BootRate < 0 || cfg.BootBurst < 0 || cfg.BootConcurrency < 0 ||
		cfg.BootClientRate < 0 || cfg.BootClientBurst < 0 || cfg.BootClientConcurrency < 0 ||
		cfg.BootStallTimeout < 0 || cfg.BootMinSendRate < 0 || cfg.BootSendGrace < 0 {
		return set, errors.New("--boot-* limits must not be negative (0 switches a limit off)")
	}
	if cfg.MaxRequestBytes < 0 {
		return set, errors.New("--max-request-mib must not be negative")
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = api.DefaultMaxRequestBytes
	}
	return set, nil
}

// imageChecker looks up the action images of applied Templates in their
// registries, unless cfg.NoApplyImageCheck.
func imageChecker(cfg Config) api.ImageChecker {
	if cfg.NoApplyImageCheck {
		return nil
	}
	return oci.NewChecker(oci.CheckerConfig{UserAgent: "anvil/" + version.Version})
}

// newHTTPServer returns a server for h. With http1 it speaks HTTP/1.1 and
// h2c (HTTP/2 without TLS, as gRPC clients use it); without, h2c only.
func newHTTPServer(h http.Handler, http1 bool) *http.Server {
	var p http.Protocols
	p.SetHTTP1(http1)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
	}
}

// listen returns given, a listener the caller opened (Config.Listeners),
// setting *port to its port; or, when given is nil, opens a TCP listener
// on bind:*port and turns the common failures into advice.
func listen(ctx context.Context, given net.Listener, bind string, port *int, name string) (net.Listener, error) {
	if given != nil {
		if ta, ok := given.Addr().(*net.TCPAddr); ok {
			*port = ta.Port
		}
		return given, nil
	}
	addr := net.JoinHostPort(bind, strconv.Itoa(*port))
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err == nil {
		return ln, nil
	}
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("%w: is --bind an address of this machine?", err)
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%w: is another anvil running? choose another port with --%s-port, or switch the listener off with --no-%s", err, name, name)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("%w: ports below 1024 need root or CAP_NET_BIND_SERVICE", err)
	}
	return nil, err
}

// logHandles is how many log files the log store keeps open: machine
// records are written one file per machine, and a boot storm touches
// thousands of machines a second, each a file that is reopened when it falls
// out of the cache (reopening cost 7% of the server's CPU in the DHCP
// benchmark with 4,096 handles for 10,000 machines). So: half the process's
// file limit (Go raises the soft limit to the hard one at start), up to
// 65,536; the other half stays for sockets and the store.
func logHandles() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0 // the log store's default
	}
	return int(min(rl.Cur/2, 65536))
}

// Defaults of `anvil serve`'s power-state poller (docs/bmc.md).
const (
	DefaultBMCPollInterval      = bmc.DefaultPowerPollInterval
	DefaultBMCPollConcurrency   = bmc.DefaultPollConcurrency
	DefaultBMCInventoryInterval = bmc.DefaultInventoryInterval
)
