package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/agentcmd"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/cli"
	"github.com/anvilproj/anvil/internal/cmdbase"
	"github.com/anvilproj/anvil/internal/config"
	"github.com/anvilproj/anvil/internal/console"
	"github.com/anvilproj/anvil/internal/leader"
	"github.com/anvilproj/anvil/internal/metadata"
	"github.com/anvilproj/anvil/internal/server"
	"github.com/anvilproj/anvil/internal/systemd"
	"github.com/anvilproj/anvil/internal/ui"
	"github.com/anvilproj/anvil/internal/version"
)

func newServeCmd() *cobra.Command {
	var cfg server.Config
	var memoryLimitMiB int64
	var metadataPort int
	var cpuProfile, memProfile string
	var noTLS bool
	var maxRequestMiB int64
	var noConsole bool
	var settings *config.Config // the file's and the environment's part, read before the logger is made
	var oidc ui.OIDC
	var oidcSecretFile string
	var cmdLine config.CommandLine // what the command line gave, for a reload
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Anvil server: API, workflow engine, boot services (DHCP, TFTP, HTTP, syslog), metadata, BMCs and the serial console",
		Long: `serve runs every Anvil service on one IP address until SIGINT or SIGTERM,
then shuts down gracefully: in-flight calls get up to 10 seconds to finish.

--bind defaults to 0.0.0.0 (every IPv4 address of the machine). Guessing "the"
address of a multi-homed provisioning host would be a surprise; set --bind to
the provisioning network's address for the DHCP and boot services.

The API is also served over TLS: on --https-port (7443) and on the gRPC port.
The certificate comes from --tls-cert/--tls-key (reloaded when the files
change), or is issued by a CA generated once in DATA_DIR/tls; its SHA-256
fingerprint is logged at start and ` + "`anvil tls ca`" + ` prints it for clients to
trust. The HTTP port stays plain: firmware cannot do TLS. See docs/tls.md.

Under systemd (Type=notify) it says READY=1 once every listener serves,
pings the watchdog while its store answers, and on SIGHUP re-reads the
TLS certificate files and the config file: log-level changes at once,
other changed settings are logged as taking effect at restart, and a
file that does not parse is logged and the running configuration kept.
See docs/systemd.md.

Under systemd socket activation (LISTEN_FDS, LISTEN_FDNAMES naming each
socket http, https, grpc or metadata) the TCP listeners passed are served
instead of --bind and the ports.

Every flag below, and --log-format and --log-level, is also a key of the
config file (` + config.DefaultFile + `, or --config FILE): http-port: 7080,
lists as YAML lists; and an environment variable: ANVIL_HTTP_PORT, lists
comma-separated. A flag wins over its variable, which wins over the file.
--print-config shows what is in effect and where each value came from. See
docs/configuration.md.`,
		Args: cobra.NoArgs,
		// The file and the environment fill in the flags before the
		// root's hook makes the logger from --log-format and --log-level.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			o, err := serveOptions(cmd)
			if err != nil {
				return err
			}
			cmdLine = config.CommandLineOf(cmd.Flags())
			if settings, err = config.Load(o); err != nil {
				return err
			}
			return cmd.Root().PersistentPreRunE(cmd, args)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if print, _ := cmd.Flags().GetBool(config.FlagPrintConfig); print {
				return settings.Print(cmd.OutOrStdout())
			}
			cfg.Logger = slog.Default() // set up by the root's --log-* flags
			for _, w := range settings.Warnings {
				cfg.Logger.Warn(w)
			}
			if settings.FileFound {
				cfg.Logger.Info("config file read", "path", settings.File)
			}
			cfg.TLS = !noTLS
			// systemd (docs/systemd.md): readiness, the watchdog, and
			// SIGHUP reloads, caught from here on.
			sd, err := systemd.FromEnv()
			if err != nil {
				return err
			}
			cfg.Notify, cfg.WatchdogEvery, cfg.Reloader = sd.Notifier, sd.WatchdogEvery, &server.Reloader{}
			if cfg.WatchdogEvery > 0 && cfg.Notify == nil {
				cfg.Logger.Warn("WATCHDOG_USEC is set but NOTIFY_SOCKET is not: no watchdog pings can be sent")
			}
			stopReloads := (&reloader{cmdLine: cmdLine, running: settings, server: cfg.Reloader, notify: cfg.Notify, log: cfg.Logger}).watch(cmd.Context())
			defer stopReloads()
			lns, err := server.InheritedListeners() // socket activation, if any
			if err != nil {
				return err
			}
			cfg.Listeners = lns
			cfg.MaxRequestBytes = maxRequestMiB << 20
			cfg.MetadataPort = metadataPort
			if !cmd.Flags().Changed("boot-iso") {
				// Debian's iPXE ISO, where scripts/install-deps.sh puts it;
				// without it no ISO is served unless one is named.
				if _, err := os.Stat(defaultBootISO); err == nil {
					cfg.BootISO = defaultBootISO
				}
			}
			if metadataPort == 0 {
				cfg.DisableMetadata = true // --metadata-port 0 is documented as "off"
			}
			if noConsole {
				cfg.ConsolePort = 0
			}
			if oidc.Issuer != "" || oidc.ClientID != "" {
				if oidc.ClientSecret, err = readSecretFile(oidcSecretFile); err != nil {
					return fmt.Errorf("--ui-oidc-client-secret-file: %w", err)
				}
				oidc.CAFile = cfg.Auth.JWKSCAFile // the same provider's CAs
				cfg.UIOIDC = &oidc
			}
			// A soft limit makes the garbage collector work harder near it
			// instead of letting RSS float to 2-3x the live heap under a
			// burst of reports. GOMEMLIMIT in the environment wins.
			if memoryLimitMiB > 0 && os.Getenv("GOMEMLIMIT") == "" {
				debug.SetMemoryLimit(memoryLimitMiB << 20)
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if memProfile != "" {
				// Written at exit: the heap profile's alloc_space and
				// alloc_objects cover every allocation of the run (sampled
				// at the default rate), which is what says where garbage
				// comes from; inuse_space is what was live at exit.
				defer writeHeapProfile(memProfile, cfg.Logger)
			}
			cfg.Logger.Info("starting anvil", "version", version.Get().Version, "commit", version.Get().Commit,
				"data_dir", cfg.DataDir, "store", cfg.Store.Kind)
			return server.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/anvil", "directory of the store and the logs")
	cfg.Store.AddFlags(f)
	f.StringVar(&cfg.Leader.Namespace, "lease-namespace", "", "with --store kubernetes, the namespace of the Lease that elects the replica running the workflow engine and BMC jobs (default $POD_NAMESPACE, else default)")
	f.StringVar(&cfg.PeerURL, "peer-url", "", "with --store kubernetes, the URL at which the other replicas reach this one's API to merge its machine records and audit log into their answers (default http://PUBLIC_IP:HTTP_PORT)")
	f.DurationVar(&cfg.Leader.LeaseDuration, "lease-duration", leader.DefaultLeaseDuration, "with --store kubernetes, how long the other replicas wait for a silent leader before one takes over (whole seconds)")
	f.StringVar(&cfg.Bind, "bind", server.DefaultBind, "IP address every listener binds to")
	f.IntVar(&cfg.HTTPPort, "http-port", server.DefaultHTTPPort, "port of the HTTP API (HTTP/1.1 and h2c), /healthz, /readyz, /metrics")
	f.IntVar(&cfg.GRPCPort, "grpc-port", server.DefaultGRPCPort, "port of the gRPC API (TLS; h2c with --grpc-plaintext or --no-tls)")
	f.BoolVar(&cfg.DisableHTTP, "no-http", false, "do not serve the HTTP port")
	f.BoolVar(&cfg.DisableGRPC, "no-grpc", false, "do not serve the gRPC port")
	// TLS.
	f.IntVar(&cfg.HTTPSPort, "https-port", server.DefaultHTTPSPort, "port of the HTTPS API (HTTP/1.1 and HTTP/2): what the HTTP port serves, over TLS")
	f.BoolVar(&cfg.DisableHTTPS, "no-https", false, "do not serve the HTTPS port (the gRPC port keeps TLS)")
	f.BoolVar(&noTLS, "no-tls", false, "no TLS at all: no HTTPS port, the gRPC port on h2c (behind an ingress that terminates TLS)")
	f.BoolVar(&cfg.GRPCPlaintext, "grpc-plaintext", false, "keep the gRPC port on h2c with TLS on")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", "", "PEM certificate (and chain) to serve, reloaded when it changes (default: one issued by a CA generated in DATA_DIR/tls)")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", "", "PEM private key of --tls-cert")
	f.StringSliceVar(&cfg.TLSSANs, "tls-san", nil, "extra DNS names or IP addresses for the generated certificate, e.g. --tls-san anvil.example.org,192.0.2.10 (it already covers the public IP, --bind, the machine's addresses, localhost and the hostname)")
	// Boot services.
	f.StringVar(&cfg.PublicIP, "public-ip", "", "address machines reach this server at, put in DHCP replies and boot scripts (default: --bind, or the address of the default route's interface when --bind is 0.0.0.0)")
	f.StringVar(&cfg.DHCPMode, "dhcp-mode", server.DefaultDHCPMode, "DHCP mode: reservation (answer known MACs with their address), proxy (boot information only, next to another DHCP server), auto-proxy (proxy, and unknown MACs get a script that reports them) or off")
	f.BoolVar(&cfg.DisableDHCP, "no-dhcp", false, "do not serve DHCP (same as --dhcp-mode off)")
	f.IntVar(&cfg.DHCPPort, "dhcp-port", server.DefaultDHCPPort, "DHCP server port")
	f.BoolVar(&cfg.DisableTFTP, "no-tftp", false, "do not serve TFTP")
	f.IntVar(&cfg.TFTPPort, "tftp-port", server.DefaultTFTPPort, "TFTP port")
	f.StringVar(&cfg.TFTPDir, "tftp-dir", "", "directory served over TFTP (and over HTTP at /ipxe/binary/) in addition to the bundled iPXE binaries; its files win")
	f.BoolVar(&cfg.DisableSyslog, "no-syslog", false, "do not receive syslog")
	f.IntVar(&cfg.SyslogPort, "syslog-port", server.DefaultSyslogPort, "syslog receiver port (UDP)")
	f.StringVar(&cfg.BootEnvDir, "bootenv-dir", "", "directory of the boot environment files served at /bootenv/ (vmlinuz-x86_64, initramfs-x86_64, …) (default DATA_DIR/bootenv)")
	f.StringVar(&cfg.BootEnvModules, "bootenv-modules", "", "build the boot environment into --bootenv-dir at start from these kernel modules: a /lib/modules/RELEASE directory, a root containing one, or a linux-image .deb (skipped when up to date)")
	f.StringVar(&cfg.BootEnvKernel, "bootenv-kernel", "", "kernel image for --bootenv-modules (default: the .deb's)")
	f.StringVar(&cfg.BootEnvAnvil, "bootenv-anvil", "", "static binary to put in the boot environment as /init (default: anvil-agent next to this binary, else this one)")
	// Authentication.
	f.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "switch authentication off: every management call is an anonymous admin and agent calls are not checked (labs only; logged loudly)")
	f.StringVar(&cfg.Auth.JWKSURL, "auth-jwks-url", "", "identity provider's JWKS URL (https, or http on loopback); keys are cached, refreshed periodically and on an unknown kid (default: the local issuer in DATA_DIR/auth)")
	f.StringVar(&cfg.Auth.JWKSCAFile, "auth-jwks-ca", "", "PEM file of CAs trusted for --auth-jwks-url besides the system's")
	f.StringArrayVar(&cfg.Auth.KeyFiles, "auth-key-file", nil, "file of trusted public keys, PEM or JWKS, reloaded when it changes (repeatable)")
	f.StringVar(&cfg.Auth.Issuer, "auth-issuer", "", "required iss of tokens")
	f.StringVar(&cfg.Auth.Audience, "auth-audience", "", "required aud of tokens (required with --auth-jwks-url)")
	f.StringVar(&cfg.Auth.SubjectClaim, "auth-subject-claim", "", "claim naming the caller (default sub)")
	f.StringVar(&cfg.Auth.OrgClaim, "auth-org-claim", "", "claim naming the caller's organisation: the namespace of its objects (default org_id)")
	f.StringVar(&cfg.Auth.RolesClaim, "auth-roles-claim", "", "claim listing the caller's roles viewer, operator, admin; a dotted path reads nested claims (default roles, then realm_access.roles)")
	f.StringSliceVar(&cfg.Auth.Algorithms, "auth-algorithms", nil, "accepted JWS algorithms (default RS256,RS384,RS512,ES256,ES384,PS256,EdDSA; none and HS* are refused)")
	f.DurationVar(&cfg.Auth.ClockSkew, "auth-clock-skew", 0, "tolerance in checking exp and nbf (default 30s)")
	// OIDC login to the web UI (docs/ui.md).
	f.StringVar(&oidc.Issuer, "ui-oidc-issuer", "", "the web UI offers \"Log in with\" this OpenID Connect provider (its issuer URL, as in its tokens' iss); its tokens must be ones the API accepts (--auth-jwks-url, --auth-issuer, --auth-audience)")
	f.StringVar(&oidc.ClientID, "ui-oidc-client-id", "", "the web UI's client ID at the provider")
	f.StringVar(&oidcSecretFile, "ui-oidc-client-secret-file", "", "file holding the web UI's client secret at the provider (none: a public client, PKCE only)")
	f.StringSliceVar(&oidc.Scopes, "ui-oidc-scopes", nil, "scopes asked for besides openid, e.g. profile,roles (those that put the org and roles claims in the token)")
	f.StringVar(&oidc.RedirectURL, "ui-oidc-redirect-url", "", "the callback registered at the provider (default https://HOST:HTTPS_PORT/ui/oidc/callback of the host the browser used)")
	f.StringVar(&cfg.ImagesDir, "images-dir", "", "directory of OS images served at /images/ for image2disk's IMG_URL (default DATA_DIR/images)")
	f.StringVar(&cfg.AssetsDir, "assets-dir", "", "directory served at /assets/ for boot profiles: kernels, initrds, images, sysext .raw and .conf files, with /assets/SHA256SUMS and a JSON listing at /assets/ (default DATA_DIR/assets)")
	f.StringVar(&cfg.BootISO, "boot-iso", "", "ISO served to every machine at /iso/<mac>/anvil.iso, booted from virtual media by isoboot workflows without an isoURL; an iPXE ISO works as is: it asks DHCP, which answers each MAC with its script (default "+defaultBootISO+" when it exists)")
	f.StringArrayVar(&cfg.KernelArgs, "kernel-args", nil, "an extra kernel argument for the boot environment, repeatable (a comma stays in its argument), e.g. --kernel-args console=ttyS1,115200 (anvil.image_cache=2GiB sizes the agent's image cache)")
	// Registries of the images of actions that run in containers (docs/actions.md).
	f.StringVar(&cfg.ActionRuntime, "action-runtime", "", "runtime of actions whose template names none: container runs every action's image itself, as Tinkerbell would; native refuses images Anvil does not implement; empty: native when Anvil implements the image, else a container")
	f.StringArrayVar(&cfg.RegistryMirrors, "registry-mirror", nil, "REGISTRY=URL: pull the images of REGISTRY from a mirror, e.g. --registry-mirror quay.io=http://10.0.0.2:5000 (http:// is plain HTTP; a path prefixes the repositories) (repeatable)")
	f.BoolVar(&cfg.NoApplyImageCheck, "no-apply-image-check", false, "do not look up Templates' action images in their registries at apply time (apply then warns only of what it can tell without asking: see docs/concepts.md)")
	f.StringArrayVar(&cfg.RegistryPlainHTTP, "registry-plain-http", nil, "HOST[:PORT] of a registry reached over plain HTTP (repeatable)")
	f.StringArrayVar(&cfg.RegistryCAs, "registry-ca", nil, "REGISTRY=FILE: PEM certificates to trust for the registry (or mirror) REGISTRY (repeatable)")
	f.StringVar(&cfg.RegistryAuthFile, "registry-auth-file", "", "docker config.json (what docker login writes; a Kubernetes dockerconfigjson) with the registries' credentials: basic, identity or registry tokens; each image is sent only its registry's")
	// Metadata.
	f.IntVar(&metadataPort, "metadata-port", metadata.DefaultPort, "port of the metadata service's own listener (Hegel's); the metadata routes are on the HTTP port too. 0: no own listener")
	f.BoolVar(&cfg.DisableMetadata, "no-metadata", false, "do not open the metadata service's own listener (the routes stay on the HTTP port)")
	// BMCs (docs/bmc.md).
	f.StringVar(&cfg.SealKeyFile, "seal-key-file", "", "key that encrypts applied v1 Secrets (BMC credentials) in the store, made when missing (default DATA_DIR/secrets/seal.key); keep it apart from the store's backups")
	f.StringVar(&cfg.BMCCAFile, "bmc-ca-file", "", "PEM file of the CAs that sign BMCs' HTTPS (Redfish, Intel AMT over TLS) certificates (default the system's; a Machine with insecureTLS checks none)")
	f.BoolVar(&cfg.Discovery, "discovery", false, "boot machines no Hardware knows into the boot environment's discovery mode and make Hardware discovery-<id> of the inventory they report, labelled anvil.io/discovered=true; they wait there for a workflow (docs/discovery.md). In proxy mode unknown PXE clients are answered, as in auto-proxy")
	f.StringVar(&cfg.DiscoveryNamespace, "discovery-namespace", api.DefaultDiscoveryNamespace, "namespace of discovered Hardware")
	f.IntVar(&cfg.DiscoveryMax, "discovery-max", api.DefaultDiscoveryMax, "most discovered Hardware in that namespace: past it new machines are refused until some are enrolled or deleted")
	f.StringArrayVar(&cfg.DiscoveryPools, "discovery-pool", nil, "reservation mode: addresses leased to unknown machines, START-END[/BITS] (default /24), e.g. 10.0.0.100-10.0.0.199; a relayed request draws from the pool of its relay's subnet, a direct one from the pool of the server's (repeatable)")
	f.StringVar(&cfg.CommissionTemplate, "commission-template", "", "Template of commissioning actions (commission-smart, commission-disk-read, commission-memory, commission-nic-link) that each discovered machine runs as Workflow commission-<hardware> before a WorkflowRuleSet enrols it; a machine that fails is labelled anvil.io/commissioning=failed and never enrolled (docs/commissioning.md). Empty: none")
	f.BoolVar(&cfg.DisableEnroll, "no-enroll", false, "do not enrol discovered machines by WorkflowRuleSets as they appear (`anvil enroll` still does, when asked)")
	f.BoolVar(&cfg.DisableBMC, "no-bmc", false, "do not run BMC Jobs (bmc.tinkerbell.org Job objects are stored, not executed) nor poll power states")
	f.DurationVar(&cfg.BMCPollInterval, "bmc-poll-interval", server.DefaultBMCPollInterval, "how often every Machine's power state is read from its BMC, each within ±10%; a BMC that fails is backed off (0: never)")
	f.IntVar(&cfg.ConsolePort, "console-port", console.DefaultPort, "SSH port of the serial console: 'ssh -p PORT HARDWARE@anvil' attaches to the machine's IPMI Serial over LAN, logging in with a key of its spec.metadata.instance.ssh_keys (0: off)")
	f.BoolVar(&noConsole, "no-console", false, "do not serve the serial console (same as --console-port 0)")
	f.StringVar(&cfg.ConsoleHostKeyFile, "console-host-key", "", "the serial console's SSH host key, made when missing (default DATA_DIR/console/ssh_host_ed25519_key)")
	f.DurationVar(&cfg.BMCInventoryInterval, "bmc-inventory-interval", server.DefaultBMCInventoryInterval, "how often the power-state poller also reads each machine's inventory from a Redfish BMC into the status.attributes.outOfBand of the Hardware naming its Machine; it is read at the first contact and when the Machine changes too (0: never)")
	f.IntVar(&cfg.BMCPollConcurrency, "bmc-poll-concurrency", server.DefaultBMCPollConcurrency, "BMC sessions the power-state poller holds at once (each BMC still gets one at a time)")
	// HTTP: proxies, ingress, the boot path's limits (docs/ingress.md).
	f.StringSliceVar(&cfg.TrustedProxies, "trusted-proxies", nil, "addresses or CIDR prefixes of proxies whose X-Forwarded-For is believed on every listener (metadata, boot scripts, per-client limits), e.g. 10.0.0.0/24,192.0.2.9 (default none: the TCP peer is the caller)")
	f.StringVar(&cfg.PathPrefix, "path-prefix", "", "also serve every HTTP route under this path prefix, e.g. /tink-stack/ for an ingress that forwards it unchanged (the unprefixed routes keep working)")
	f.Float64Var(&cfg.BootRate, "boot-rate", server.DefaultBootRate, "boot path (iPXE scripts and binaries, /bootenv/, /images/, /assets/, metadata) requests per second for all clients together; excess is answered 429 with Retry-After (0: unlimited)")
	f.IntVar(&cfg.BootBurst, "boot-burst", server.DefaultBootBurst, "boot path requests admitted at once above --boot-rate (0: one second of --boot-rate)")
	f.IntVar(&cfg.BootConcurrency, "boot-concurrency", server.DefaultBootConcurrency, "boot path requests served at once; excess is answered 503 with Retry-After (0: unlimited)")
	f.Float64Var(&cfg.BootClientRate, "boot-client-rate", server.DefaultBootClientRate, "boot path requests per second per client address (0: unlimited)")
	f.IntVar(&cfg.BootClientBurst, "boot-client-burst", server.DefaultBootClientBurst, "boot path requests per client admitted at once above --boot-client-rate (0: one second of it)")
	f.IntVar(&cfg.BootClientConcurrency, "boot-client-concurrency", server.DefaultBootClientConcurrency, "boot path requests served at once per client address (0: unlimited)")
	f.Int64Var(&maxRequestMiB, "max-request-mib", api.DefaultMaxRequestBytes>>20, "largest API request body in MiB, on every port (gRPC, gRPC-Web, Connect); a larger one is refused RESOURCE_EXHAUSTED before it is read (0: the default)")
	f.DurationVar(&cfg.BootStallTimeout, "boot-stall-timeout", server.DefaultBootStallTimeout, "cut a boot path download whose client takes nothing for this long, freeing its place in the limits (0: never)")
	f.Int64Var(&cfg.BootMinSendRate, "boot-min-send-rate", server.DefaultBootMinSendRate, "cut a boot path download that averages fewer bytes per second than this once --boot-send-grace has passed (0: never)")
	f.DurationVar(&cfg.BootSendGrace, "boot-send-grace", server.DefaultBootSendGrace, "how long a boot path download may start below --boot-min-send-rate")
	f.Int64Var(&memoryLimitMiB, "memory-limit-mib", 768, "soft memory limit for the Go runtime in MiB (0: none; GOMEMLIMIT overrides)")
	f.StringVar(&memProfile, "mem-profile", "", "write a Go heap profile (allocations of the whole run, and what is live at exit) to this file at exit (for performance reports)")
	f.StringVar(&cpuProfile, "cpu-profile", "", "write a Go CPU profile of the whole run to this file (for performance reports)")
	// Secrets: keys, credentials, and the files that hold them, whose
	// paths --print-config does not show either.
	config.MarkSecret(f, "tls-key", "seal-key-file", "console-host-key", "registry-auth-file", "kubeconfig", "ui-oidc-client-secret-file")
	config.AddFlags(f)
	return cmd
}

// serveOptions is what `anvil serve` reads its config file and
// environment with, at start and at each reload: its flags and the
// logging ones as keys, none of the clients' variables.
func serveOptions(cmd *cobra.Command) (config.Options, error) {
	o, err := config.ForCommand(cmd, cmdbase.FlagLogFormat, cmdbase.FlagLogLevel)
	if err != nil {
		return o, err
	}
	o.Reserved = append(slices.Clone(cli.EnvVars), agentcmd.EnvToken)
	return o, nil
}

// defaultBootISO is Debian's iPXE ISO (package ipxe): --boot-iso's default.
const defaultBootISO = "/usr/lib/ipxe/ipxe.iso"

// writeHeapProfile writes the heap profile to path; a failure is logged, not
// returned, since the server itself has already finished.
func writeHeapProfile(path string, log *slog.Logger) {
	f, err := os.Create(path)
	if err != nil {
		log.Error("heap profile", "err", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		log.Error("heap profile", "path", path, "err", err)
	}
}

// readSecretFile returns the secret in path without its trailing white
// space; no path is no secret.
func readSecretFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}
