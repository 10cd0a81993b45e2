// Package bootpolicy decides what a machine gets when it network boots: the
// DHCP answer for each of its interfaces (dhcp.Backend) and the iPXE script
// it runs (httpboot.Scripter) — the boot environment while a workflow waits
// for it, the kernel and initrds of its boot profile, the operator's own
// script or URL, its local disk, or, for a machine Anvil does not know,
// nothing or a generic script. ProfileFor tells the config renderer which
// profile a machine has.
//
// It reads Hardware and Workflows through the store's indexes and renders
// scripts with internal/ipxe. It writes nothing, holds no state beyond its
// configuration, and must not import a protocol server's internals: it
// implements the small interfaces dhcp and httpboot own.
package bootpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/anvilproj/anvil/internal/agentcmdline"
	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// DHCP modes (Tinkerbell's): what the DHCP server does, and what an unknown
// machine's script request gets.
const (
	// ModeReservation answers known MACs only, with the Hardware's address.
	ModeReservation = "reservation"
	// ModeProxy never assigns addresses; it answers known PXE clients with
	// boot information only.
	ModeProxy = "proxy"
	// ModeAutoProxy is proxy mode in which unknown machines too get iPXE
	// and a generic script (ipxe.Unknown) that tells how to add them.
	ModeAutoProxy = "auto-proxy"
	// ModeOff: Anvil's DHCP server is off (another one points machines
	// here). Scripts are served to known machines only.
	ModeOff = "off"
)

// DefaultConsole is the console= kernel arguments when Config.Console is
// nil, for x86_64 machines.
var DefaultConsole = []string{"tty0", "ttyS0,115200"}

// DefaultConsoleARM64 is DefaultConsole for aarch64 machines: their
// first serial port is usually a PL011, ttyAMA0 (QEMU's virt machine,
// most Arm servers' SBSA UART). Given console=ttyS0 alone, an arm64
// kernel writes nothing on it.
var DefaultConsoleARM64 = []string{"tty0", "ttyAMA0,115200"}

// Config configures a Policy.
type Config struct {
	// Store finds Hardware by MAC and IP and Workflows by the hardware they
	// run on. Required. Only indexed lookups are made per request, except
	// for BootProfiles: Run keeps them in memory; without Run (or before
	// its first list) a script request lists the Hardware's namespace's
	// profiles, if the store is also a store.Reader.
	Store store.Indexer
	// Mode is one of the Mode constants. If "", uses ModeReservation.
	Mode string
	// PublicHTTP is the base URL machines reach Anvil's HTTP port at, e.g.
	// "http://10.0.0.1:7080". Required. It is passed to the boot
	// environment as anvil.server=, first of the list when there are
	// Replicas.
	PublicHTTP string
	// Replicas, if set (Kubernetes mode), returns the base URLs machines
	// reach the other live replicas of `anvil serve` at (internal/peers'
	// agent URLs). anvil.server= then lists PublicHTTP and then them, so
	// that an agent whose replica dies moves on to another
	// (internal/agent). It is asked at each boot environment script, for
	// at most replicasTimeout; what it cannot list is left out (warned).
	// If nil (the embedded store: one server), anvil.server= is
	// PublicHTTP alone.
	Replicas func(ctx context.Context) ([]string, error)
	// GRPCAuthority is the host:port the agent dials, e.g.
	// "10.0.0.1:42113" (grpc_authority=). Required.
	GRPCAuthority string
	// SyslogHost is where the boot environment sends its logs
	// (syslog_host=). If "", the argument is left out.
	SyslogHost string
	// BootEnvURL is the URL of the boot environment files. If "", uses
	// PublicHTTP + "/bootenv".
	BootEnvURL string
	// Console lists the console= kernel arguments, for every
	// architecture. If nil, uses DefaultConsole (DefaultConsoleARM64 for
	// aarch64 machines); an empty non-nil slice gives none.
	Console []string
	// ExtraKernelArgs are appended to every boot environment's kernel
	// command line, after the Hardware's own osie.kernelParams.
	ExtraKernelArgs []string
	// TLS says whether the agent dials GRPCAuthority with TLS
	// (tinkerbell_tls=).
	TLS bool
	// InsecureTLS says whether the agent, dialling with TLS, skips
	// verifying the server's certificate (tinkerbell_insecure_tls=). Hook
	// reads both arguments; it is always sent, false by default, so that
	// no boot environment falls back to a default of its own.
	InsecureTLS bool
	// AgentToken, if set, gives the agent token of a workflow; the boot
	// environment of that workflow gets it as anvil.token=. The boot path
	// needs no credentials, so the token is only as secret as the boot
	// script: the server also checks that agent calls come from the
	// Hardware's address.
	AgentToken func(wf *model.Workflow) string
	// Discovery boots machines Anvil does not know into the boot
	// environment in discovery mode (anvil.discovery=1, no token): their
	// agent reports their inventory and waits for work (anvil serve
	// --discovery). So does a discovered Hardware (model.LabelDiscovered)
	// with no workflow and no boot profile when it netboots again: its
	// inventory is refreshed, and it waits again rather than booting a
	// disk that holds nothing yet.
	Discovery bool
	// Logger gets warnings about Hardware fields that cannot be used. If
	// nil, uses slog.Default().
	Logger *slog.Logger
}

// Policy answers the DHCP server and the HTTP boot handler from the store.
// It is safe for concurrent use.
type Policy struct {
	store      store.Indexer
	mode       string
	publicHTTP string
	bootEnvURL string
	agentArgs  agentcmdline.Params // the agent's arguments but the per-machine ones
	consoleArg []string            // x86_64's, and every architecture's if Config.Console was set
	// consoleARM64 is aarch64's console= arguments (console).
	consoleARM64 []string
	extraArgs    []string
	agentToken   func(*model.Workflow) string
	replicas     func(context.Context) ([]string, error)
	discovery    bool
	log          *slog.Logger

	hosts    hostCache    // fed by Run
	profiles profileCache // fed by Run

	warned  sync.Map // warning key -> struct{}
	nWarned atomic.Int64
}

var (
	_ dhcp.Backend      = (*Policy)(nil)
	_ httpboot.Scripter = (*Policy)(nil)
)

// New checks cfg and returns a Policy. Every configured value that ends up
// on a kernel command line is checked with ipxe.CheckArg here, so that a
// bad flag fails at start rather than at the first boot.
func New(cfg Config) (*Policy, error) {
	if cfg.Store == nil {
		return nil, errors.New("bootpolicy: no store")
	}
	p := &Policy{store: cfg.Store, mode: cfg.Mode, log: cfg.Logger, agentToken: cfg.AgentToken, replicas: cfg.Replicas,
		discovery: cfg.Discovery}
	if p.log == nil {
		p.log = slog.Default()
	}
	switch p.mode {
	case "":
		p.mode = ModeReservation
	case ModeReservation, ModeProxy, ModeAutoProxy, ModeOff:
	default:
		return nil, fmt.Errorf("bootpolicy: unknown mode %q (want %s, %s, %s or %s)", cfg.Mode, ModeReservation, ModeProxy, ModeAutoProxy, ModeOff)
	}

	var err error
	if p.publicHTTP, err = checkBaseURL("public HTTP URL", cfg.PublicHTTP); err != nil {
		return nil, err
	}
	p.bootEnvURL = p.publicHTTP + strings.TrimSuffix(httpboot.BootEnvPrefix, "/")
	if cfg.BootEnvURL != "" {
		if p.bootEnvURL, err = checkBaseURL("boot environment URL", cfg.BootEnvURL); err != nil {
			return nil, err
		}
	}
	if cfg.GRPCAuthority == "" {
		return nil, errors.New("bootpolicy: no gRPC authority (host:port the agent dials)")
	}
	if _, _, err := net.SplitHostPort(cfg.GRPCAuthority); err != nil {
		return nil, fmt.Errorf("bootpolicy: gRPC authority %q: want host:port: %w", cfg.GRPCAuthority, err)
	}

	p.agentArgs = agentcmdline.Params{
		GRPCAuthority: cfg.GRPCAuthority,
		TLS:           cfg.TLS,
		InsecureTLS:   cfg.InsecureTLS,
		SyslogHost:    cfg.SyslogHost,
		Server:        p.publicHTTP,
	}
	console, consoleARM64 := cfg.Console, cfg.Console
	if console == nil {
		console, consoleARM64 = DefaultConsole, DefaultConsoleARM64
	}
	for _, c := range console {
		p.consoleArg = append(p.consoleArg, "console="+c)
	}
	for _, c := range consoleARM64 {
		p.consoleARM64 = append(p.consoleARM64, "console="+c)
	}
	p.extraArgs = append([]string(nil), cfg.ExtraKernelArgs...)
	// The line without a machine's arguments: what is wrong with it is a
	// flag's fault, found at start rather than at the first boot.
	args, err := p.agentArgs.Build(p.consoleArg, p.extraArgs)
	if err != nil {
		return nil, fmt.Errorf("bootpolicy: kernel argument: %w", err)
	}
	for _, a := range args {
		if err := ipxe.CheckArg(a); err != nil {
			return nil, fmt.Errorf("bootpolicy: kernel argument: %w", err)
		}
	}
	return p, nil
}

// checkBaseURL checks an http(s) base URL and drops its trailing slashes.
func checkBaseURL(what, s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("bootpolicy: no %s", what)
	}
	s = strings.TrimRight(s, "/")
	if err := ipxe.CheckURL(s); err != nil {
		return "", fmt.Errorf("bootpolicy: %s: %w", what, err)
	}
	if u, _ := url.Parse(s); u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("bootpolicy: %s %q: want an http:// or https:// URL", what, s)
	}
	return s, nil
}

// Mode returns the policy's DHCP mode (one of the Mode constants).
func (p *Policy) Mode() string { return p.mode }

// maxWarned bounds the memory of warnings already given.
const maxWarned = 10000

// warnOnce logs a warning about a Hardware field once per key. Keys carry
// the Hardware's resourceVersion, so a changed Hardware is warned about
// anew. Lookup runs per packet: without this one bad field would log on
// every DHCP retry.
func (p *Policy) warnOnce(key, msg string, args ...any) {
	if _, loaded := p.warned.LoadOrStore(key, struct{}{}); loaded {
		return
	}
	if p.nWarned.Add(1) > maxWarned {
		p.warned.Clear()
		p.nWarned.Store(0)
	}
	p.log.Warn(msg, args...)
}

// hwWarn warns once about field of hw.
func (p *Policy) hwWarn(hw *model.Hardware, field, problem string) {
	key := hw.Key() + "@" + hw.ResourceVersion + " " + field + " " + problem
	p.warnOnce(key, "bootpolicy: ignoring a Hardware field: "+problem, "hardware", hw.Key(), "field", field)
}

// byMAC returns the Hardware with an interface of that MAC and the index of
// the interface, or nil.
func (p *Policy) byMAC(ctx context.Context, mac macaddr.MAC) (*model.Hardware, int, error) {
	// The index holds MACs in canonical form (MAC.String), however the
	// Hardware spells them.
	canon := mac.String()
	objs, err := p.store.ByIndex(ctx, model.KindHardware, store.IndexMAC, canon)
	if err != nil {
		return nil, 0, fmt.Errorf("find hardware by MAC %s: %w", canon, err)
	}
	return p.pick(objs, "MAC "+canon, func(iface *model.Interface) bool { return iface.MAC() == mac })
}

// byIP returns the Hardware with an interface of that IP address and the
// index of the interface, or nil.
func (p *Policy) byIP(ctx context.Context, ip string) (*model.Hardware, int, error) {
	objs, err := p.store.ByIndex(ctx, model.KindHardware, store.IndexIP, ip)
	if err != nil {
		return nil, 0, fmt.Errorf("find hardware by IP %s: %w", ip, err)
	}
	return p.pick(objs, "IP "+ip, func(iface *model.Interface) bool {
		return iface.DHCP != nil && iface.DHCP.IP != nil && iface.DHCP.IP.Address == ip
	})
}

// pick chooses among the Hardware an index returned (several only if two
// Hardware claim the same MAC or IP: the first by namespace and name wins,
// with a warning) and finds the matching interface.
func (p *Policy) pick(objs []model.Object, what string, match func(*model.Interface) bool) (*model.Hardware, int, error) {
	for n, o := range objs {
		hw, ok := o.(*model.Hardware)
		if !ok {
			continue
		}
		for i := range hw.Spec.Interfaces {
			if !match(&hw.Spec.Interfaces[i]) {
				continue
			}
			if n == 0 && len(objs) > 1 {
				var others []string
				for _, o := range objs[1:] {
					others = append(others, o.GetObjectMeta().Key())
				}
				p.warnOnce("dup "+what+" "+hw.ResourceVersion, "bootpolicy: several Hardware have the same "+what+"; using the first",
					"hardware", hw.Key(), "also", others)
			}
			return hw, i, nil
		}
	}
	return nil, 0, nil
}

// activeWorkflow returns the workflow the machine should boot into: of the
// workflows on hw (same namespace) not waiting for another (the engine's
// Waiting condition), the active one (model.ActiveWorkflow, the rule the
// engine follows). Nil if none.
func (p *Policy) activeWorkflow(ctx context.Context, hw *model.Hardware) (*model.Workflow, error) {
	objs, err := p.store.ByIndex(ctx, model.KindWorkflow, store.IndexHardwareRef, hw.Name)
	if err != nil {
		return nil, fmt.Errorf("find workflows of hardware %s: %w", hw.Key(), err)
	}
	var ws []*model.Workflow
	for _, o := range objs {
		w, ok := o.(*model.Workflow)
		if !ok || w.Namespace != hw.Namespace || workflow.FindCondition(&w.Status, workflow.ConditionWaiting) != nil {
			continue
		}
		ws = append(ws, w)
	}
	return model.ActiveWorkflow(ws), nil
}
