// Package ui owns Anvil's web UI: the pages `anvil serve` answers at /ui/
// on the API's HTTP(S) port — login (a token, or OpenID Connect through
// the identity provider the API trusts: oidc.go), the fleet overview, the hardware
// list and detail, the workflow detail with its Server-Sent Events — and
// the embedded templates, stylesheet and script they use.
//
// Pages are rendered on the server with html/template (which escapes
// every name, label and message a machine or an agent wrote); one small
// script, served from /ui/static/ and allowed by the Content-Security-
// Policy (script-src 'self'), swaps in the fragments the events carry.
// Nothing is fetched from elsewhere: the UI works on an air-gapped
// network.
//
// It decides nothing about access itself. A browser logs in with a token
// the API takes; every request is authenticated again with that token by
// the API's own Authenticate, what is shown is filtered by the resulting
// auth.Principal (Sees, Allow), and a mutation (reprovision) is sent as
// an API call through the API's handler — its gate, authorization and
// audit — exactly as the CLI's would be. It reads objects from a view fed
// by the store's shared watch (view.go), never a copy of the fleet per
// request; it does not write to the store.
package ui

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// basePath is where the UI is served.
const basePath = "/ui/"

// csrfField is the form field (and csrfHeader the header) that carries
// a session's CSRF token on every mutating request.
const (
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// contentSecurityPolicy allows the UI's own script, style and images and
// nothing else: no inline script, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the UI.
type Config struct {
	// Store holds the objects the pages show. Required.
	Store store.Store
	// Authenticate is the API's: it turns request headers carrying
	// "Authorization: Bearer <token>" into the caller's principal. If
	// nil, authentication is off (anvil serve --insecure-no-auth) and
	// every session is auth.Anonymous.
	Authenticate func(ctx context.Context, h http.Header) (*auth.Principal, error)
	// API is the handler the API's services are mounted on
	// (api.Services.Mount): mutations are sent to it, through its gate
	// and audit. Required.
	API http.Handler
	// Records reads and follows log lines: a machine's record (its DHCP,
	// TFTP, HTTP, syslog and agent lines) on its page, a workflow's agent
	// output on the workflow's. If nil, the pages show none.
	Records RecordReader
	// Logger receives the view's errors. If nil, slog.Default().
	Logger *slog.Logger
	// Clock ends sessions. If nil, clock.Real.
	Clock clock.Clock
	// OIDC, if set, adds login through an OpenID Connect provider
	// (oidc.go) beside the token field.
	OIDC *OIDC
	// HTTPSPort, if set, is the port that serves the UI over TLS: a
	// request that arrives without TLS is redirected there, so a token
	// is never typed into a page sent in the clear. If 0, the UI answers
	// on whatever port it is reached (the server without TLS).
	HTTPSPort int
}

// RecordReader reads and follows log lines. *logstore.Store implements
// it.
type RecordReader interface {
	// ReadSelection returns the newest tail lines of sel, oldest first.
	ReadSelection(sel logstore.Selection, tail int) ([]logstore.Line, error)
	// Follow returns the same and a Subscription to the lines appended
	// after them.
	Follow(sel logstore.Selection, tail int) (*logstore.Subscription, []logstore.Line, error)
}

// UI serves the pages. It is safe for concurrent use.
type UI struct {
	cfg      Config
	log      *slog.Logger
	view     *view
	sessions sessions
	pages    map[string]*template.Template
	mux      *http.ServeMux
	oidc     *oidcLogin    // nil without Config.OIDC
	stopped  chan struct{} // closed by Stop: event streams end
	stopOnce sync.Once
}

// New returns the UI for cfg. Run must be running for its pages to show
// objects.
func New(cfg Config) (*UI, error) {
	if cfg.Store == nil || cfg.API == nil {
		return nil, errors.New("ui: Config.Store and Config.API are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	u := &UI{cfg: cfg, log: cfg.Logger, view: newView(cfg.Store, cfg.Logger), stopped: make(chan struct{})}
	var err error
	if u.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	m := http.NewServeMux()
	m.Handle("GET /ui/static/", staticCaching(http.StripPrefix("/ui/static/", http.FileServerFS(static))))
	m.HandleFunc("GET /ui/login", u.loginPage)
	m.HandleFunc("POST /ui/login", u.login)
	m.HandleFunc("POST /ui/logout", u.authed(u.logout))
	if cfg.OIDC != nil {
		if u.oidc, err = newOIDCLogin(u, *cfg.OIDC); err != nil {
			return nil, err
		}
		m.HandleFunc("GET /ui/oidc/login", u.oidcStart)
		m.HandleFunc("GET "+oidcCallbackPath, u.oidcCallback)
	}
	m.HandleFunc("GET /ui/{$}", u.authed(u.fleetPage))
	m.HandleFunc("GET /ui/hardware", u.authed(u.hardwareList))
	m.HandleFunc("GET /ui/hardware/{ns}/{name}", u.authed(u.hardwareDetail))
	m.HandleFunc("GET /ui/hardware/{ns}/{name}/events", u.authed(u.hardwareEvents))
	m.HandleFunc("POST /ui/hardware/{ns}/{name}/reprovision", u.authed(u.reprovision))
	m.HandleFunc("POST /ui/hardware/{ns}/{name}/netboot", u.authed(u.setNetboot))
	m.HandleFunc("POST /ui/hardware/{ns}/{name}/power", u.authed(u.power))
	m.HandleFunc("GET /ui/hardware/{ns}/{name}/power/events", u.authed(u.powerEvents))
	m.HandleFunc("GET /ui/workflows/{ns}/{name}", u.authed(u.workflowDetail))
	m.HandleFunc("POST /ui/workflows/{ns}/{name}/cancel", u.authed(u.cancelWorkflow))
	m.HandleFunc("GET /ui/workflows/{ns}/{name}/events", u.authed(u.workflowEvents))
	m.HandleFunc("GET /ui/templates", u.authed(u.templateList))
	m.HandleFunc("GET /ui/templates/{ns}/{name}", u.authed(u.templateDetail))
	m.HandleFunc("GET /ui/jobs", u.authed(u.jobsPage))
	m.HandleFunc("GET /ui/audit", u.authed(u.auditPage))
	u.mux = m
	return u, nil
}

// Run keeps the view of Hardware and Workflows current until ctx ends,
// then ends the event streams (Stop). Call it once.
func (u *UI) Run(ctx context.Context) error {
	defer u.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.view.run(ctx, model.KindWorkflow)
	}()
	u.view.run(ctx, model.KindHardware)
	<-done
	return nil
}

// Stop ends the live event streams, so that a graceful shutdown of the
// HTTP server need not wait for browsers to go away. Pages are still
// served. It is safe to call more than once.
func (u *UI) Stop() {
	u.stopOnce.Do(func() {
		close(u.stopped)
		if u.oidc != nil {
			u.oidc.close()
		}
	})
}

// ServeHTTP serves /ui and everything under /ui/, with the security
// headers on every answer.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" with the UI's own forms, which sameOrigin would
	// refuse. Other sites still get no referrer.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if u.cfg.HTTPSPort != 0 && r.TLS == nil {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		to := url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(u.cfg.HTTPSPort)), Path: r.URL.Path}
		http.Redirect(w, r, to.String(), http.StatusSeeOther)
		return
	}
	if r.URL.Path == "/ui" {
		http.Redirect(w, r, basePath, http.StatusSeeOther)
		return
	}
	if r.Method == http.MethodPost && !sameOrigin(r) {
		http.Error(w, "refused: a form of another site posted to this one (Origin does not match Host)", http.StatusForbidden)
		return
	}
	u.mux.ServeHTTP(w, r)
}

// sameOrigin reports whether a POST came from a page of this server:
// the browser's Sec-Fetch-Site says same-origin, or, from a browser
// that sends none, its Origin names this host. A client that sends
// neither (curl) is no browser another site can drive. Login has no
// session (so no CSRF token) yet: this is what keeps another site from
// logging a browser in with the attacker's token.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	ou, err := url.Parse(o)
	return err == nil && ou.Host == r.Host
}

// request is what an authenticated page handler gets.
type request struct {
	*http.Request
	session   *session
	principal *auth.Principal
}

// authed wraps a page: no live session redirects to the login page (the
// page asked for kept in a query parameter, never the token); the
// session's token is authenticated again (expired or revoked: logged
// out); a POST without the session's CSRF token is refused.
func (u *UI) authed(h func(http.ResponseWriter, *request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss := u.sessions.get(r, u.cfg.Clock.Now())
		if ss == nil {
			u.toLogin(w, r, false)
			return
		}
		p, err := u.authenticate(r.Context(), ss.token)
		if err != nil {
			u.log.Info("ui: a session's token is no longer accepted; logged out", "err", err)
			u.sessions.end(ss.id)
			setCookie(w, r, nil)
			u.toLogin(w, r, true)
			return
		}
		if r.Method == http.MethodPost {
			got := r.Header.Get(csrfHeader)
			if got == "" {
				got = r.PostFormValue(csrfField)
			}
			if !ss.validCSRF(got) {
				http.Error(w, "refused: the form carries no valid CSRF token (reload the page and try again)", http.StatusForbidden)
				return
			}
		}
		h(w, &request{Request: r, session: ss, principal: p})
	}
}

// authenticate asks the API's Authenticate about token.
func (u *UI) authenticate(ctx context.Context, token string) (*auth.Principal, error) {
	if u.cfg.Authenticate == nil {
		return auth.Anonymous, nil
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	return u.cfg.Authenticate(ctx, h)
}

// toLogin answers a request without a session: pages redirect to the
// login page (saying the session ended when it did), other requests
// (events, posts) are refused.
func (u *UI) toLogin(w http.ResponseWriter, r *http.Request, ended bool) {
	if r.Method != http.MethodGet || strings.HasSuffix(r.URL.Path, "/events") {
		http.Error(w, "not logged in", http.StatusUnauthorized)
		return
	}
	q := url.Values{"next": {r.URL.Path}}
	if ended {
		q.Set("ended", "1")
	}
	http.Redirect(w, r, basePath+"login?"+q.Encode(), http.StatusSeeOther)
}

// safeNext returns next when it is a path of the UI, else the UI's root:
// the login's redirect never leaves the UI.
func safeNext(next string) string {
	if strings.HasPrefix(next, basePath) && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\?#") {
		return next
	}
	return basePath
}
