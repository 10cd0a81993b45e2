package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/enroll"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/render"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/supervise"
)

// What Run opens before anything runs, and the components the supervisor
// runs, one function each, in the order Run wires them.

// closeGrace is how long an HTTP listener's stop may take beyond
// Config.ShutdownTimeout: closing the connections that outlived it.
const closeGrace = 5 * time.Second

// closers are what Run opened; they are closed in reverse order when it
// returns, after every component has stopped.
type closers []func() error

func (c *closers) add(f func() error) { *c = append(*c, f) }

// close closes everything, the last opened first, and joins their errors.
func (c closers) close() error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i]())
	}
	return errors.Join(errs...)
}

// openStores opens the store (the embedded one in the data directory, or
// the Kubernetes API: cfg.Store) and the log store in the data directory.
// Machine records stay on local disk in either case: they are an
// append-heavy stream, not etcd material (docs/kubernetes.md).
func openStores(ctx context.Context, cfg Config, res *closers) (store.Store, *logstore.Store, error) {
	sc := cfg.Store
	sc.DataDir, sc.Logger = cfg.DataDir, cfg.Logger
	st, err := backend.Open(ctx, sc)
	if err != nil {
		return nil, nil, err
	}
	res.add(func() error { return wrapClose("close store", st.Close()) })
	logs, err := logstore.Open(logstore.Config{Dir: filepath.Join(cfg.DataDir, logsDir), Logger: cfg.Logger,
		MaxOpenFiles: logHandles()})
	if err != nil {
		return nil, nil, fmt.Errorf("open log store: %w", err)
	}
	res.add(func() error { return wrapClose("close log store", logs.Close()) })
	return st, logs, nil
}

func wrapClose(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

type namedListener struct {
	name string
	ln   net.Listener
}

// openListeners opens the TCP listeners that are on (HTTPS only with tls)
// or takes the caller's (Config.Listeners), setting cfg's ports to theirs.
func openListeners(ctx context.Context, cfg *Config, tls bool, res *closers) ([]namedListener, error) {
	var lns []namedListener
	for _, l := range []struct {
		name  string
		on    bool
		given net.Listener
		port  *int
	}{
		{"http", !cfg.DisableHTTP, cfg.Listeners.HTTP, &cfg.HTTPPort},
		{"https", tls && !cfg.DisableHTTPS, cfg.Listeners.HTTPS, &cfg.HTTPSPort},
		{"grpc", !cfg.DisableGRPC, cfg.Listeners.GRPC, &cfg.GRPCPort},
		{"metadata", !cfg.DisableMetadata, cfg.Listeners.Metadata, &cfg.MetadataPort},
	} {
		if !l.on {
			continue
		}
		ln, err := listen(ctx, l.given, cfg.Bind, l.port, l.name)
		if err != nil {
			return nil, err
		}
		res.add(func() error { ln.Close(); return nil }) // closed by Shutdown when served; harmless
		lns = append(lns, namedListener{l.name, ln})
	}
	return lns, nil
}

// generatedSecrets are the generated secrets of boot profile templates,
// as templates (render.SecretSource) and admins (api.SecretStore) use
// them.
type generatedSecrets interface {
	render.SecretSource
	api.SecretStore
}

// openSecrets opens the generated secrets of boot profile templates and
// the sealer of the v1 Secrets. In Kubernetes mode both are the
// cluster's: generated secrets are Secret objects in st, so that every
// replica renders the same value, and Secrets are kept in the clear
// (the cluster's RBAC and encryption at rest guard them; kubectl and
// Rufio write them so).
func openSecrets(cfg Config, st store.Store) (generatedSecrets, *secrets.Sealer, error) {
	sealKey := cfg.SealKeyFile
	if sealKey == "" {
		sealKey = filepath.Join(cfg.DataDir, secretsDir, secrets.KeyFileName)
	}
	sealer, err := secrets.OpenSealer(sealKey, nil)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Store.IsKubernetes() {
		return &secrets.InStore{Store: st}, sealer.ClusterKept(), nil
	}
	secretStore, err := secrets.Open(secrets.Config{Dir: filepath.Join(cfg.DataDir, secretsDir)})
	if err != nil {
		return nil, nil, err
	}
	return secretStore, sealer, nil
}

// bestEffort returns run for a component whose failure is logged (msg)
// but does not stop the server: the BMC executor, the poller, the serial
// console and the machine record writer are extras, and provisioning
// goes on without them. It then waits for its stop like any other.
func bestEffort(log *slog.Logger, msg string, run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error(msg, "err", err)
		}
		<-ctx.Done()
		return nil
	}
}

// enrollComponents are the enrolment controller, none with
// cfg.DisableEnroll.
func enrollComponents(cfg Config, st store.Store, events machinelog.Sink) []supervise.Component {
	if cfg.DisableEnroll {
		return nil
	}
	c := enroll.NewController(enroll.ControllerConfig{Config: enrollConfig(cfg, st, events)})
	return []supervise.Component{{Name: "enrolment controller", Run: bestEffort(cfg.Logger, "enrolment controller stopped", c.Run)}}
}

// enrollConfig is the enrolment's configuration, the same for the
// controller and for `anvil enroll`'s passes through the API.
func enrollConfig(cfg Config, st store.Store, events machinelog.Sink) enroll.Config {
	return enroll.Config{Store: st, Logger: cfg.Logger, Events: events, CommissionTemplate: cfg.CommissionTemplate}
}

// bmcComponents are the BMC job executor, which runs Rufio-shaped Jobs
// against machines' BMCs, and its power-state poller (leaderOnly: one
// replica drives the BMCs), and the serial console (everywhere: an
// operator's SSH session lands on any replica), which reaches machines
// through the executor: none with cfg.DisableBMC. The console's listener
// opens here, so that a busy port fails at start.
func bmcComponents(cfg Config, st store.Store, sealer *secrets.Sealer, events machinelog.Sink, res *closers) (leaderOnly, everywhere []supervise.Component, err error) {
	log := cfg.Logger
	redfish, amt := bmc.Redfish{}, bmc.IntelAMT{}
	if cfg.BMCCAFile != "" {
		if redfish.RootCAs, err = bmc.LoadCAFile(cfg.BMCCAFile); err != nil {
			return nil, nil, err
		}
		amt.RootCAs = redfish.RootCAs
	}
	if cfg.DisableBMC {
		if cfg.ConsolePort != 0 {
			log.Info("serial console off: it reaches machines through the BMC executor, which --no-bmc switches off")
		}
		return nil, nil, nil
	}
	executor := bmc.New(bmc.Config{Store: st, Unseal: sealer.Open, Logger: log, Events: events,
		Providers: []bmc.Provider{bmc.IPMI{}, redfish, amt}})
	leaderOnly = []supervise.Component{{Name: "bmc job executor", Run: bestEffort(log, "bmc job executor stopped", executor.Run)}}
	if cfg.BMCPollInterval > 0 {
		// The poller shares the executor's per-BMC locks: a poll never
		// overlaps a Job's session on the same BMC.
		inventory := cfg.BMCInventoryInterval
		if inventory <= 0 {
			inventory = -1 // none: the poller's 0 is its default
		}
		poller := executor.Poller(bmc.PollConfig{Interval: cfg.BMCPollInterval, Concurrency: cfg.BMCPollConcurrency,
			InventoryInterval: inventory})
		leaderOnly = append(leaderOnly, supervise.Component{Name: "bmc power-state poller", Run: bestEffort(log, "bmc power-state poller stopped", poller.Run)})
	}
	if cfg.ConsolePort != 0 {
		console, err := consoleComponent(cfg, st, executor, events, res)
		if err != nil {
			return nil, nil, err
		}
		everywhere = append(everywhere, console)
	}
	return leaderOnly, everywhere, nil
}

// httpServers are the components serving lns, each with its handler.
// stopping ends the API's long-lived calls when shutdown starts.
// The HTTP port's server is early's, serving since before the store
// opened (probes.go): its component opens the gate to h.http.
func httpServers(cfg Config, lns []namedListener, h handlers, tlsConf *tls.Config, early *earlyHTTP, stopping func()) []supervise.Component {
	var cs []supervise.Component
	for _, l := range lns {
		var srv *http.Server
		switch l.name {
		case "http":
			if early != nil {
				cs = append(cs, serveHTTP(l, early.srv, func() <-chan error {
					early.gate.open(h.http)
					return early.served
				}, stopping, cfg.ShutdownTimeout, cfg.Logger))
				continue
			}
			srv = newHTTPServer(h.http, true)
		case "https":
			srv = newTLSServer(h.http, tlsConf, true, cfg.Logger)
		case "metadata":
			srv = newHTTPServer(h.metadata, true)
		default: // grpc
			if grpcTLS(cfg) {
				srv = newTLSServer(h.grpc, tlsConf, false, cfg.Logger)
			} else {
				srv = newHTTPServer(h.grpc, false)
			}
		}
		cs = append(cs, serveHTTP(l, srv, func() <-chan error {
			served := make(chan error, 1)
			go func() { served <- serve(srv, l.ln) }()
			return served
		}, stopping, cfg.ShutdownTimeout, cfg.Logger))
	}
	return cs
}

// serveHTTP is the component serving srv on l: begin starts it (or
// opens the gate of a server already running) and returns what Serve
// returns. Asked to stop, it ends the API's watches and long polls
// (stopping), stops accepting and gives the calls in flight up to timeout
// before closing their connections. It is ready once begun: the HTTP
// port's gate is open then, so that what comes after it (READY=1 to
// systemd) finds the real routes answering, not the gate's 503.
func serveHTTP(l namedListener, srv *http.Server, begin func() <-chan error, stopping func(), timeout time.Duration, log *slog.Logger) supervise.Component {
	begun := make(chan struct{})
	return supervise.Component{
		Name:        fmt.Sprintf("%s listener %s", l.name, l.ln.Addr()),
		StopTimeout: timeout + closeGrace,
		Ready: func(ctx context.Context) error {
			select {
			case <-begun:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Run: func(ctx context.Context) error {
			log.Info("listening", "service", l.name, "addr", l.ln.Addr().String())
			served := begin()
			close(begun)
			select {
			case err := <-served:
				return err
			case <-ctx.Done():
			}
			stopping()
			shutCtx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if err := srv.Shutdown(shutCtx); err != nil {
				log.Warn("in-flight calls did not finish in time; closing their connections", "service", l.name, "err", err)
				srv.Close()
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
}
