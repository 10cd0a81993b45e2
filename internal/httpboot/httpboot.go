// Package httpboot serves the HTTP side of network booting: the per-machine
// iPXE scripts (asked of a Scripter, which the boot policy implements), the
// iPXE binaries, the boot environment's files (kernel, initramfs), OS
// images and the assets directory with its checksums.
//
// It decides nothing about what a machine boots and must not import the
// store, the model or the boot policy: a Scripter answers, this package
// speaks HTTP — status codes, caching, ranges, logs, metrics — and records
// one machinelog.Event per request.
package httpboot

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/clientip"
	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
)

// BootEnvPrefix is the URL path under which Config.BootEnv is served.
const BootEnvPrefix = "/bootenv/"

// ImagesPrefix is the URL path under which Config.Images is served: the OS
// images that workflows stream to disks (image2disk's IMG_URL).
const ImagesPrefix = "/images/"

// ISOPrefix and ISOName make the URL of a machine's boot ISO:
// ISOPrefix + mac + "/" + ISOName (see ISOPath).
const (
	ISOPrefix = "/iso/"
	ISOName   = "anvil.iso"
)

// ISOPath returns the URL path of the boot ISO of the machine with mac,
// e.g. "/iso/52:54:00:12:34:56/anvil.iso".
func ISOPath(mac macaddr.MAC) string { return ISOPrefix + mac.String() + "/" + ISOName }

// Routes, as registered on the mux (with "GET ", which also serves HEAD)
// and as the "route" label of the metrics.
const (
	routeScript   = ipxe.ScriptPrefix + "{mac}/" + ipxe.ScriptName // the machine's script, by MAC
	routeScriptIP = ipxe.ScriptPrefix + ipxe.ScriptName            // by source IP: Tinkerbell's fallback
	routeBinary   = ipxe.BinaryPrefix + "{name}"
	routeBootEnv  = BootEnvPrefix + "{path...}"
	routeImages   = ImagesPrefix + "{path...}"
	routeISO      = ISOPrefix + "{mac}/" + ISOName
)

// Outcomes recorded in machinelog.Event.Outcome.
const (
	OutcomeServed     = "served"      // 2xx, or 304 Not Modified
	OutcomeNotFound   = "not-found"   // no script for this machine, no such file
	OutcomeBadRequest = "bad-request" // a malformed MAC, an unsatisfiable range
	OutcomeError      = "error"       // the Scripter or the file system failed
)

// Config configures a Handler.
type Config struct {
	// Scripter decides each machine's iPXE script. If nil, every script
	// request is answered 404.
	Scripter Scripter
	// Binaries are served at ipxe.BinaryPrefix + name (usually
	// ipxe.Binaries()). Only files at its root are reachable. If nil,
	// binary requests are answered 404.
	Binaries fs.FS
	// BootEnv holds the boot environment's files, served at BootEnvPrefix
	// (see DirFS). If nil, those requests are answered 404.
	BootEnv fs.FS
	// Images holds OS images, served at ImagesPrefix (see DirFS). If nil,
	// those requests are answered 404.
	Images fs.FS
	// Assets holds the files boot profiles use (kernels, initrds, images,
	// sysext .raw and .conf), served at AssetsPrefix with a SHA256SUMS
	// and a JSON listing (see DirFS). If nil, those requests are
	// answered 404.
	Assets fs.FS
	// BootISO is the file served as every machine's boot ISO at
	// ISOPath(mac): one image for all, since an iPXE ISO asks DHCP, and
	// DHCP answers each MAC with its own script. If empty, those
	// requests are answered 404.
	BootISO string
	// Logger gets one line per request. If nil, slog.Default() is used.
	Logger *slog.Logger
	// Events gets one Event per request. If nil, machinelog.Discard.
	Events machinelog.Sink
}

// Handler serves the network boot routes. It is safe for concurrent use.
type Handler struct {
	scripter Scripter
	binaries fs.FS
	bootEnv  fs.FS
	images   fs.FS
	assets   fs.FS
	iso      fs.FS  // the directory of Config.BootISO
	isoName  string // its base name
	log      *slog.Logger
	events   machinelog.Sink
	mux      *http.ServeMux

	etags sync.Map // route+"\x00"+name -> etagEntry
	sums  sumCache // digests of the assets
}

// New returns a Handler for cfg.
func New(cfg Config) *Handler {
	h := &Handler{
		scripter: cfg.Scripter,
		binaries: cfg.Binaries,
		bootEnv:  cfg.BootEnv,
		images:   cfg.Images,
		assets:   cfg.Assets,
		log:      cfg.Logger,
		events:   cfg.Events,
		mux:      http.NewServeMux(),
	}
	if cfg.BootISO != "" {
		h.iso, h.isoName = os.DirFS(filepath.Dir(cfg.BootISO)), filepath.Base(cfg.BootISO)
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.events == nil {
		h.events = machinelog.Discard
	}
	h.Register(h.mux)
	return h
}

// Register adds the Handler's routes to mux:
//
//	GET /ipxe/script/{mac}/auto.ipxe   the machine's script; {mac} in any case, ':' or '-' separated
//	GET /ipxe/script/auto.ipxe         the script of the machine with the client's source IP
//	GET /ipxe/binary/{name}            an iPXE binary
//	GET /bootenv/{path...}             a boot environment file
//	GET /images/{path...}              an OS image
//	GET /assets/                       the assets' JSON listing (name, size, sha256, modTime)
//	GET /assets/SHA256SUMS             the assets' checksums, for sha256sum -c
//	GET /assets/{path...}              an asset
//	GET /iso/{mac}/anvil.iso           the machine's boot ISO (Config.BootISO)
//
// Script routes take the optional query parameters platform and buildarch
// (iPXE's ${platform} and ${buildarch}). GET routes also answer HEAD.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+routeScript, func(w http.ResponseWriter, r *http.Request) {
		h.serveScript(w, r, routeScript, true)
	})
	mux.HandleFunc("GET "+routeScriptIP, func(w http.ResponseWriter, r *http.Request) {
		h.serveScript(w, r, routeScriptIP, false)
	})
	mux.HandleFunc("GET "+routeBinary, func(w http.ResponseWriter, r *http.Request) {
		h.serveFile(w, r, routeBinary, h.binaries, r.PathValue("name"))
	})
	mux.HandleFunc("GET "+routeBootEnv, func(w http.ResponseWriter, r *http.Request) {
		h.serveFile(w, r, routeBootEnv, h.bootEnv, r.PathValue("path"))
	})
	mux.HandleFunc("GET "+routeImages, func(w http.ResponseWriter, r *http.Request) {
		h.serveFile(w, r, routeImages, h.images, r.PathValue("path"))
	})
	mux.HandleFunc("GET "+routeAssets, h.serveAssets)
	mux.HandleFunc("GET "+routeISO, func(w http.ResponseWriter, r *http.Request) {
		if _, err := macaddr.Parse(r.PathValue("mac")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.serveFile(w, r, routeISO, h.iso, h.isoName)
	})
}

// ServeHTTP serves the routes Register lists, and 404 for anything else.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// request is what one request leaves behind, for the log, the machine's
// record and the metrics.
type request struct {
	r      *http.Request
	route  string
	start  time.Time
	mac    macaddr.MAC
	src    netip.Addr
	code   int
	bytes  int64
	detail string // after "METHOD PATH: "
}

func (h *Handler) finish(q *request) {
	outcome := outcomeOf(q.code)
	msg := q.r.Method + " " + q.r.URL.Path + ": " + q.detail
	h.events.Record(machinelog.Event{
		Time:    q.start,
		Service: machinelog.ServiceHTTP,
		MAC:     q.mac,
		IP:      q.src,
		Outcome: outcome,
		Message: msg,
	})
	attrs := []any{
		"method", q.r.Method, "path", q.r.URL.Path, "route", q.route, "code", q.code,
		"bytes", q.bytes, "outcome", outcome, "source", q.src, "duration", time.Since(q.start),
	}
	if q.mac.IsValid() {
		attrs = append(attrs, "mac", q.mac.String())
	}
	level := slog.LevelInfo
	if outcome == OutcomeError {
		level = slog.LevelWarn
	}
	h.log.Log(q.r.Context(), level, "http boot: "+q.detail, attrs...)
	observe(q.route, q.code, q.bytes)
}

func outcomeOf(code int) string {
	switch {
	case code == http.StatusNotFound || code == http.StatusForbidden:
		return OutcomeNotFound
	case code >= 500:
		return OutcomeError
	case code >= 400:
		return OutcomeBadRequest
	}
	return OutcomeServed
}

// sourceAddr is the client's address as the server's clientip middleware
// found it (X-Forwarded-For is believed only from trusted proxies), else
// the TCP peer's. A trusted proxy's unusable header leaves the proxy's
// address: no machine has it, so nothing is served for another machine.
func sourceAddr(r *http.Request) netip.Addr {
	if c, ok := clientip.FromContext(r.Context()); ok {
		return c.Key()
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// queryValue returns a short token-like query parameter (iPXE's
// ${platform} is "efi" or "pcbios", ${buildarch} "x86_64", "i386",
// "arm64", …), or "" when absent or anything else.
func queryValue(r *http.Request, name string) string {
	v := r.URL.Query().Get(name)
	if len(v) > 32 {
		return ""
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return ""
		}
	}
	return v
}

func (h *Handler) serveScript(w http.ResponseWriter, r *http.Request, route string, byMAC bool) {
	q := &request{r: r, route: route, start: time.Now(), src: sourceAddr(r)}
	defer h.finish(q)

	req := ScriptRequest{
		Source:    q.src,
		Platform:  queryValue(r, "platform"),
		BuildArch: queryValue(r, "buildarch"),
	}
	var (
		code int
		body string
	)
	if byMAC {
		// iPXE's ${mac} gives colons, ${mac:hexhyp} hyphens: any
		// spelling, parsed here once for the policy and the record.
		mac, err := macaddr.Parse(r.PathValue("mac"))
		if err != nil {
			q.code, q.detail = http.StatusBadRequest, err.Error()
			q.bytes = writeText(w, r, q.code, err.Error()+"\n")
			return
		}
		req.MAC, q.mac = mac, mac
	}
	var s *Script
	err := ErrNoScript
	if h.scripter != nil {
		s, err = h.scripter.Script(r.Context(), req)
	}
	switch {
	case errors.Is(err, ErrNoScript):
		code, body = http.StatusNotFound, err.Error()+"\n"
		q.detail = "404: " + err.Error()
	case err != nil:
		code, body = http.StatusInternalServerError, "anvil could not decide this machine's boot script: "+err.Error()+"\n"
		q.detail = "500: " + err.Error()
	case s == nil:
		code, body = http.StatusInternalServerError, "anvil could not decide this machine's boot script\n"
		q.detail = "500: the scripter returned no script and no error"
	default:
		code, body = http.StatusOK, s.Body
		q.detail = s.Reason
		if q.detail == "" {
			q.detail = "200"
		}
	}
	q.code = code
	q.bytes = writeText(w, r, code, body)
}

// writeText writes a text/plain response that no one may cache (a script
// changes when the machine's workflow does) and returns the body bytes
// sent.
func writeText(w http.ResponseWriter, r *http.Request, code int, body string) int64 {
	hd := w.Header()
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	if r.Method == http.MethodHead {
		return 0
	}
	n, _ := w.Write([]byte(body)) // a client gone away is not our error; the count says what was sent
	return int64(n)
}

// commas formats n with thousands separators: 8123456 → "8,123,456".
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Recorded wraps another boot-path handler (the configs a boot profile
// serves, say) so its requests are logged, counted under route and filed
// in the machine's record like the handler's own: the machine is the MAC
// in the path value "mac" when there is one, else the client address.
func (h *Handler) Recorded(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := &request{r: r, route: route, start: time.Now(), src: sourceAddr(r)}
		if m, err := macaddr.Parse(r.PathValue("mac")); err == nil {
			q.mac = m
		}
		cw := &countingWriter{ResponseWriter: w}
		next.ServeHTTP(cw, r)
		q.code, q.bytes = cw.status(), cw.n
		q.detail = fmt.Sprintf("%d, %s bytes", q.code, commas(q.bytes))
		h.finish(q)
	})
}
