// Package metadata serves each machine what its Hardware says about it, in
// the shapes Tinkerbell's Hegel serves: EC2-style items under /2009-04-04/
// and /latest/ (user-data, meta-data/hostname, …) and /metadata, the JSON
// the rootio action reads. A machine is identified by the address it calls
// from: the Hardware whose interface has that dhcp.ip.address answers, and
// no other. That address is internal/clientip's: X-Forwarded-For is read
// only from configured trusted proxies.
//
// It owns the HTTP side only — routing, the caller's address, status
// codes, logs, metrics and one machinelog.Event per request. It finds
// Hardware through a Finder and must not import the store or the boot
// policy; internal/server wires a Finder over the store's IP index.
package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/clientip"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
)

// DefaultPort is the port Hegel listens on, where Tinkerbell's actions and
// boot environments look for metadata.
const DefaultPort = 50061

// Errors a Finder returns (wrapped). The Handler answers the first with 404
// and the second with 409: a machine never gets another machine's data.
var (
	// ErrUnknownIP: no Hardware has an interface with this address.
	ErrUnknownIP = errors.New("no Hardware has this IP address in spec.interfaces[].dhcp.ip.address")
	// ErrAmbiguousIP: several Hardware claim this address.
	ErrAmbiguousIP = errors.New("several Hardware have this IP address")
)

// Finder finds the Hardware of a calling machine.
type Finder interface {
	// HardwareByIP returns the one Hardware with an interface whose
	// dhcp.ip.address is ip: an error wrapping ErrUnknownIP when none has,
	// ErrAmbiguousIP when several have, anything else when the lookup
	// failed. The Hardware is the caller's (not shared). It must be safe
	// for concurrent use.
	HardwareByIP(ctx context.Context, ip netip.Addr) (*model.Hardware, error)
}

// FinderFunc adapts a function to a Finder.
type FinderFunc func(ctx context.Context, ip netip.Addr) (*model.Hardware, error)

// HardwareByIP calls f(ctx, ip).
func (f FinderFunc) HardwareByIP(ctx context.Context, ip netip.Addr) (*model.Hardware, error) {
	return f(ctx, ip)
}

// Outcomes, the Event.Outcome values and the outcome label of
// anvil_metadata_requests_total.
const (
	OutcomeServed     = "served"       // 200
	OutcomeUnknownIP  = "unknown-ip"   // 404: no Hardware has the caller's address
	OutcomeAmbiguous  = "ambiguous-ip" // 409: several Hardware have it
	OutcomeNotFound   = "not-found"    // 404: no such item (or key index)
	OutcomeBadRequest = "bad-request"  // 400: a trusted proxy's X-Forwarded-For is unusable
	OutcomeError      = "error"        // 500: the lookup failed
)

// Config configures a Handler.
type Config struct {
	// Finder finds the caller's Hardware. Required.
	Finder Finder
	// TrustedProxies are the peers whose X-Forwarded-For is believed (see
	// clientip.ParseTrustedProxies). If empty, the TCP peer is always the
	// caller. A clientip.Client in the request's context (put there by
	// clientip.Resolver.Handler) is used as it is.
	TrustedProxies []netip.Prefix
	// Logger gets one line per request. If nil, uses slog.Default().
	Logger *slog.Logger
	// Events gets one machinelog.Event per request (service
	// machinelog.ServiceMetadata). If nil, uses machinelog.Discard.
	Events machinelog.Sink
}

// Handler serves the metadata routes. It is safe for concurrent use.
type Handler struct {
	finder  Finder
	clients clientip.Resolver
	log     *slog.Logger
	events  machinelog.Sink
	mux     *http.ServeMux
}

// New returns a Handler for cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Finder == nil {
		return nil, errors.New("metadata: no Finder")
	}
	h := &Handler{finder: cfg.Finder, clients: clientip.Resolver{Trusted: cfg.TrustedProxies}, log: cfg.Logger, events: cfg.Events,
		mux: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.events == nil {
		h.events = machinelog.Discard
	}
	h.Register(h.mux)
	return h, nil
}

// Versions are the path prefixes of the EC2-style items: Hegel's
// 2009-04-04 and EC2's alias for the newest, latest.
var Versions = []string{"2009-04-04", "latest"}

// Register adds the Handler's routes to mux:
//
//	GET /metadata                 {"metadata": spec.metadata} as JSON (what rootio reads)
//	GET /2009-04-04/{item...}     an EC2-style item or listing (see docs/metadata.md)
//	GET /latest/{item...}         the same
//
// Every route answers HEAD too, and only a caller some Hardware has the
// address of.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+routeJSON, func(w http.ResponseWriter, r *http.Request) {
		h.serve(w, r, "")
	})
	for _, v := range Versions {
		mux.HandleFunc("GET /"+v, func(w http.ResponseWriter, r *http.Request) {
			h.serve(w, r, "/")
		})
		mux.HandleFunc("GET /"+v+"/{item...}", func(w http.ResponseWriter, r *http.Request) {
			h.serve(w, r, "/"+r.PathValue("item"))
		})
	}
}

// ServeHTTP serves the routes Register lists, and 404 for anything else.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// routeJSON is the path and route label of the JSON document.
const routeJSON = "/metadata"

// request is what one request leaves behind, for the log, the machine's
// record and the metrics.
type request struct {
	r       *http.Request
	start   time.Time
	route   string
	src     netip.Addr
	mac     macaddr.MAC
	hw      string // namespace/name, once known
	code    int
	outcome string
	bytes   int
	detail  string
	// logOnly is an error for the server's log and nowhere else: what
	// the caller, an anonymous machine, must not read (the names of
	// other Hardware).
	logOnly error
}

// serve answers one request. item is "" for the JSON document, else the
// EC2-style path after the version ("/" for the root listing).
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, item string) {
	q := &request{r: r, start: time.Now(), route: routeJSON}
	defer h.finish(q)
	if item != "" {
		item = strings.Trim(item, "/")
		it, arg := lookupItem(item)
		q.route = routeOther
		if it != nil {
			q.route = it.route
		}
		h.serveItem(w, q, it, item, arg)
		return
	}
	hw, ok := h.caller(w, q)
	if !ok {
		return
	}
	md := hw.Spec.Metadata
	if md == nil {
		md = &model.HardwareMetadata{}
	}
	body, err := json.Marshal(struct {
		Metadata *model.HardwareMetadata `json:"metadata"`
	}{md})
	if err != nil {
		h.fail(w, q, http.StatusInternalServerError, OutcomeError, "cannot encode the metadata: "+err.Error())
		return
	}
	h.ok(w, q, "application/json", string(body))
}

// ok answers 200 with body.
func (h *Handler) ok(w http.ResponseWriter, q *request, contentType, body string) {
	q.code, q.outcome, q.detail = http.StatusOK, OutcomeServed, fmt.Sprintf("200, %d bytes", len(body))
	q.bytes = write(w, q.r, http.StatusOK, contentType, body)
}

func (h *Handler) serveItem(w http.ResponseWriter, q *request, it *itemDef, item string, arg int) {
	hw, ok := h.caller(w, q)
	if !ok {
		return
	}
	if it == nil {
		h.fail(w, q, http.StatusNotFound, OutcomeNotFound,
			fmt.Sprintf("no metadata item %q (GET /%s/meta-data lists them)", item, Versions[0]))
		return
	}
	v := view{hw: hw, iface: ifaceOf(hw, q.src)}
	body, err := it.value(v, arg)
	if err != nil {
		h.fail(w, q, http.StatusNotFound, OutcomeNotFound, err.Error())
		return
	}
	h.ok(w, q, "text/plain; charset=utf-8", body)
}

// caller identifies the calling machine's Hardware, or answers the request
// with why it cannot and returns false.
func (h *Handler) caller(w http.ResponseWriter, q *request) (*model.Hardware, bool) {
	c := h.clients.Of(q.r)
	q.src = c.Key()
	if c.Err != nil {
		// Never answered for the proxy: its data is no machine's.
		h.fail(w, q, http.StatusBadRequest, OutcomeBadRequest, c.Err.Error())
		return nil, false
	}
	src := c.Addr
	hw, err := h.finder.HardwareByIP(q.r.Context(), src)
	switch {
	case errors.Is(err, ErrUnknownIP):
		h.fail(w, q, http.StatusNotFound, OutcomeUnknownIP,
			fmt.Sprintf("no Hardware has IP %s in spec.interfaces[].dhcp.ip.address, so there is no metadata for this caller", src))
		return nil, false
	case errors.Is(err, ErrAmbiguousIP):
		// The finder's error may name the Hardware, of any organisation;
		// the answer (and the machine's record) must not.
		q.logOnly = err
		h.fail(w, q, http.StatusConflict, OutcomeAmbiguous,
			fmt.Sprintf("several Hardware have IP %s; metadata is served only when exactly one has it", src))
		return nil, false
	case err != nil:
		h.fail(w, q, http.StatusInternalServerError, OutcomeError, fmt.Sprintf("cannot find the Hardware of %s: %v", src, err))
		return nil, false
	case hw == nil:
		h.fail(w, q, http.StatusInternalServerError, OutcomeError, fmt.Sprintf("cannot find the Hardware of %s: the finder returned none", src))
		return nil, false
	}
	q.hw = hw.Key()
	if i := ifaceOf(hw, src); i >= 0 {
		q.mac = hw.Spec.Interfaces[i].MAC()
	}
	return hw, true
}

// fail answers code with a plain-text reason.
func (h *Handler) fail(w http.ResponseWriter, q *request, code int, outcome, why string) {
	q.code, q.outcome, q.detail = code, outcome, strconv.Itoa(code)+": "+why
	q.bytes = write(w, q.r, code, "text/plain; charset=utf-8", "anvil metadata: "+why+"\n")
}

// finish logs, records and counts a request.
func (h *Handler) finish(q *request) {
	outcome := q.outcome
	msg := q.r.Method + " " + q.r.URL.Path + ": " + q.detail
	h.events.Record(machinelog.Event{
		Time:    q.start,
		Service: machinelog.ServiceMetadata,
		MAC:     q.mac,
		IP:      q.src,
		Outcome: outcome,
		Message: msg,
	})
	attrs := []any{"method", q.r.Method, "path", q.r.URL.Path, "route", q.route, "code", q.code,
		"bytes", q.bytes, "outcome", outcome, "source", q.src, "duration", time.Since(q.start)}
	if q.hw != "" {
		attrs = append(attrs, "hardware", q.hw)
	}
	if q.logOnly != nil {
		attrs = append(attrs, "err", q.logOnly)
	}
	level := slog.LevelInfo
	if outcome == OutcomeError || outcome == OutcomeAmbiguous {
		level = slog.LevelWarn
	}
	h.log.Log(q.r.Context(), level, "metadata: "+q.detail, attrs...)
	observe(q.route, outcome)
}

// write sends a response no one may cache (it changes with the Hardware)
// and returns the body bytes sent.
func write(w http.ResponseWriter, r *http.Request, code int, contentType, body string) int {
	hd := w.Header()
	hd.Set("Content-Type", contentType)
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	if r.Method == http.MethodHead {
		return 0
	}
	n, _ := w.Write([]byte(body)) // a client gone away is not our error; n says what was sent
	return n
}
