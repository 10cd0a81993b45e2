package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/clientip"
	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/httplimit"
	"github.com/anvilproj/anvil/internal/render"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/ui"
)

// Defaults of the boot path's limits: `anvil serve`'s flag defaults. In
// Config, 0 switches a limit off. See docs/ingress.md for the reasoning.
const (
	// DefaultBootRate (requests/s, all clients): a boot storm of a
	// thousand machines (bench/storm) asked about 3,000 requests (script,
	// kernel, initramfs each) over 45-55 s, the TFTP phase spreading
	// them; 500 a second leaves room for metadata and retries while a
	// runaway loop cannot take the server's CPU from the API.
	DefaultBootRate = 500
	// DefaultBootBurst lets as many machines as DefaultBootConcurrency
	// admits reach the HTTP phase in the same instant (UEFI HTTP boot
	// skips TFTP) and ask once each without a refusal.
	DefaultBootBurst = 1024
	// DefaultBootConcurrency bounds requests in flight. bench/storm's
	// 1,000 machines held up to 509 at once: at 70 they got 1,791
	// refusals (503, each waited out for a second by iPXE), at 512 106,
	// at 1024 none. A download in flight costs a socket and a goroutine,
	// the file going by sendfile (peak RSS 220-270 MiB in every run),
	// so the bound is set above the storm. See DefaultBootMinSendRate for
	// slow links.
	DefaultBootConcurrency = 1024
	// DefaultBootClientRate and DefaultBootClientBurst (per client
	// address) are ten times what one booting machine asks for; in every
	// bench/storm run one client looping from 8 connections was held to
	// 30-46 served a second, thousands refused, while 1,000 machines
	// booted.
	DefaultBootClientRate  = 50
	DefaultBootClientBurst = 100
	// DefaultBootClientConcurrency: a machine downloads one file at a
	// time (iPXE) or a few ranges of one image; 8 leaves room for retries
	// of dropped connections.
	DefaultBootClientConcurrency = 8

	// DefaultBootStallTimeout cuts a download whose client has taken
	// nothing for a minute — nginx's send_timeout, long proven on file
	// servers. A live TCP peer takes something within it even through
	// heavy loss: retransmissions back off 0.2, 0.4, … 25.6 s, eight
	// tries in about 51 s.
	DefaultBootStallTimeout = time.Minute
	// DefaultBootMinSendRate (bytes/s) cuts a download that averages
	// less than 16 KiB/s after DefaultBootSendGrace. A real machine is
	// above it: a 1 Gbit/s link shared by the default 1024 downloads
	// gives each 122 KB/s, 7 times more; at 16 KiB/s a 2 GB image would
	// take 36 hours. A client below it holds a slot without booting. On a
	// boot network slower than 134 Mbit/s (1024 × 16 KiB/s), lower
	// --boot-concurrency (docs/ingress.md).
	DefaultBootMinSendRate = 16 << 10
	// DefaultBootSendGrace lets a download start slowly (TCP's slow
	// start, a link settling) before its average is held to the minimum.
	DefaultBootSendGrace = time.Minute
)

// reservedPrefixes are the first path elements of anvil's own routes: a
// --path-prefix starting with one would hide that route's unprefixed form.
var reservedPrefixes = []string{"ipxe", "bootenv", "images", "assets", "configs", "metadata", "2009-04-04", "latest",
	"healthz", "readyz", "metrics", "anvil.", "grpc."}

// normalizePathPrefix returns --path-prefix as "/a/b" (leading slash, no
// trailing one), or "" for none ("" or "/").
func normalizePathPrefix(p string) (string, error) {
	trimmed := strings.Trim(p, "/")
	if trimmed == "" {
		return "", nil
	}
	for _, el := range strings.Split(trimmed, "/") {
		if el == "" || el == "." || el == ".." {
			return "", fmt.Errorf("--path-prefix %q: want a path like /tink-stack/ (no empty, . or .. elements)", p)
		}
		for i := 0; i < len(el); i++ {
			c := el[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~') {
				return "", fmt.Errorf("--path-prefix %q: only letters, digits, '-', '_', '.', '~' and '/' are allowed", p)
			}
		}
	}
	first, _, _ := strings.Cut(trimmed, "/")
	for _, r := range reservedPrefixes {
		if first == r || strings.HasSuffix(r, ".") && strings.HasPrefix(first, r) {
			return "", fmt.Errorf("--path-prefix %q would hide anvil's own /%s routes: choose another", p, first)
		}
	}
	return "/" + trimmed, nil
}

// withPathPrefix serves h at its own paths and, when prefix is set ("/a/b"),
// under prefix too: "/a/b/ipxe/..." is served as "/ipxe/...", and "/a/b"
// as "/". So an ingress may forward the prefixed path as it is, or strip
// it first.
func withPathPrefix(prefix string, h http.Handler) http.Handler {
	if prefix == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := cutPathPrefix(r.URL.Path, prefix)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path = rest
		if u.RawPath != "" {
			// The prefix has no characters that need escaping, so it
			// starts RawPath just as it starts Path.
			u.RawPath, _ = cutPathPrefix(u.RawPath, prefix)
		}
		r2.URL = &u
		h.ServeHTTP(w, r2)
	})
}

// cutPathPrefix returns path without prefix when path is prefix or starts
// with prefix + "/"; the rest always starts with "/".
func cutPathPrefix(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix)
	switch {
	case !ok:
		return path, false
	case rest == "":
		return "/", true
	case rest[0] == '/':
		return rest, true
	}
	return path, false // "/tink-stackfoo" is not under "/tink-stack"
}

// bootRouter sends requests for the boot and metadata routes (those
// bootMux has a pattern for) to boot — the limited path — and everything
// else to rest (the API, health, metrics), which no boot limit touches.
func bootRouter(bootMux *http.ServeMux, boot, rest http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := bootMux.Handler(r); pattern != "" {
			boot.ServeHTTP(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	})
}

// bootPacer puts next behind the boot path's write deadlines: responses
// whose clients stall or read too slowly are cut, logged and counted.
func bootPacer(cfg Config, next http.Handler, log *slog.Logger) http.Handler {
	return httplimit.NewPacer(httplimit.PacerConfig{
		Next:         next,
		StallTimeout: cfg.BootStallTimeout,
		MinRate:      float64(cfg.BootMinSendRate),
		Grace:        cfg.BootSendGrace,
		Cut: func(r *http.Request, c httplimit.Cut) {
			bootCut.WithLabelValues(string(c.Reason)).Inc()
			client, _ := clientip.FromContext(r.Context())
			log.Warn("http boot: download cut: its client stopped reading or reads too slowly; its slot is free",
				"reason", string(c.Reason), "path", r.URL.Path, "source", client.Key(), "bytes", c.Bytes,
				"duration", c.Elapsed, "stall_timeout", cfg.BootStallTimeout, "min_send_rate", cfg.BootMinSendRate)
		},
	})
}

// bootLimits is the limiter configuration of cfg.
func bootLimits(cfg Config) httplimit.Config {
	return httplimit.Config{
		Rate:              cfg.BootRate,
		Burst:             cfg.BootBurst,
		Concurrency:       cfg.BootConcurrency,
		ClientRate:        cfg.BootClientRate,
		ClientBurst:       cfg.BootClientBurst,
		ClientConcurrency: cfg.BootClientConcurrency,
	}
}

// limitBoot puts next behind the boot path's limiter: clients are counted
// by clientip's address, refusals and requests in flight go to the
// metrics.
func limitBoot(l *httplimit.Limiter, next http.Handler) http.Handler {
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bootInFlight.Inc()
		defer bootInFlight.Dec()
		next.ServeHTTP(w, r)
	})
	return httplimit.NewHandler(httplimit.HandlerConfig{
		Limiter: l,
		Next:    counted,
		Client: func(r *http.Request) netip.Addr {
			c, _ := clientip.FromContext(r.Context()) // set by the outermost handler
			return c.Key()
		},
		Refused: func(_ *http.Request, ref httplimit.Refusal) {
			bootLimited.WithLabelValues(string(ref.Limit)).Inc()
		},
	})
}

// handlers are the handlers of the HTTP listeners: the HTTP (and HTTPS)
// port's, the metadata port's and the gRPC port's.
type handlers struct {
	http, metadata, grpc http.Handler
	// ui is the web UI at /ui/ on the HTTP port; its Run keeps its view
	// of the store current.
	ui *ui.UI
}

// newHandlers routes the API (services), /healthz, /readyz (ready says
// whether the server is ready), /metrics, the web UI (uiCfg, which is
// given the API's handler for its mutations), the boot routes and the
// metadata routes. The public boot path (no token) goes through the limits; the
// API, health and metrics do not, so a boot storm cannot starve them.
// Every listener first learns who the client is (clientip, for the
// limits, the services and audit) and accepts the path prefix.
func newHandlers(cfg Config, set settings, services *api.Services, boot *bootServices, secrets render.SecretSource,
	uiCfg ui.Config, ready func() error) (handlers, error) {
	log := cfg.Logger
	apiMux := http.NewServeMux()
	services.Mount(apiMux, connect.WithInterceptors(metricsInterceptor{}))
	uiCfg.API = apiMux
	web, err := ui.New(uiCfg)
	if err != nil {
		return handlers{}, err
	}
	httpMux := http.NewServeMux()
	httpMux.Handle("/ui", web)
	httpMux.Handle("/ui/", web)
	httpMux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	httpMux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	httpMux.Handle("GET /metrics", promhttp.Handler())
	httpMux.Handle("/", apiMux)

	limiter := httplimit.New(bootLimits(cfg))
	bootMux := http.NewServeMux()
	boot.http.Register(bootMux)
	boot.metadata.Register(bootMux)
	registerConfigs(bootMux, boot, secrets, log)
	clients := clientip.Resolver{Trusted: set.trusted}
	outer := func(h http.Handler) http.Handler { return withPathPrefix(set.pathPrefix, clients.Handler(h)) }
	log.Info("http routes", "path_prefix", set.pathPrefix, "boot_rate", cfg.BootRate, "boot_burst", cfg.BootBurst,
		"boot_concurrency", cfg.BootConcurrency, "boot_client_rate", cfg.BootClientRate,
		"boot_client_burst", cfg.BootClientBurst, "boot_client_concurrency", cfg.BootClientConcurrency,
		"boot_stall_timeout", cfg.BootStallTimeout, "boot_min_send_rate", cfg.BootMinSendRate,
		"boot_send_grace", cfg.BootSendGrace, "max_request_bytes", cfg.MaxRequestBytes)
	return handlers{
		// Smee's script paths (/auto.ipxe, /<mac>/auto.ipxe) become
		// Anvil's before routing, so they are boot routes, limited and
		// paced as the others.
		http:     outer(httpboot.WithScriptAliases(bootRouter(bootMux, limitBoot(limiter, bootPacer(cfg, bootMux, log)), httpMux))),
		metadata: outer(limitBoot(limiter, bootPacer(cfg, boot.metadata, log))),
		grpc:     outer(apiMux),
		ui:       web,
	}, nil
}

// uiConfig is the web UI's configuration: the API's store, machine
// records and authentication, and, with TLS on, the HTTPS port the plain HTTP port's
// /ui/ requests are sent to (no token typed into a page sent in the
// clear).
func uiConfig(cfg Config, st store.Store, logs ui.RecordReader, sec *security, log *slog.Logger) ui.Config {
	c := ui.Config{Store: st, Records: logs, Authenticate: sec.authenticate, Logger: log, OIDC: cfg.UIOIDC}
	if cfg.TLS {
		c.HTTPSPort = cfg.HTTPSPort
	}
	return c
}

// requestClientIP is the API's view of who calls: set by each listener's
// clientip handler, the peer, or the client a trusted proxy forwarded for.
func requestClientIP(ctx context.Context) string {
	if c, ok := clientip.FromContext(ctx); ok && c.Addr.IsValid() {
		return c.Addr.String()
	}
	return ""
}

// checkUIOIDC refuses an OIDC login to the UI whose tokens the API could
// not accept: the session holds the provider's token and every request is
// authenticated with it, so the API must trust the provider's keys.
func checkUIOIDC(cfg Config) error {
	o := cfg.UIOIDC
	switch {
	case o == nil:
		return nil
	case o.Issuer == "" || o.ClientID == "":
		return errors.New("--ui-oidc-issuer and --ui-oidc-client-id go together")
	case cfg.InsecureNoAuth:
		return errors.New("--ui-oidc-issuer with --insecure-no-auth: there is no login to make without authentication")
	case cfg.Auth.JWKSURL == "" && len(cfg.Auth.KeyFiles) == 0:
		return errors.New("--ui-oidc-issuer needs --auth-jwks-url (or --auth-key-file) with the provider's keys: the API must accept the provider's tokens, and the local issuer's keys accept only its own")
	}
	return nil
}
