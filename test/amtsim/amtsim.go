// Package amtsim is an Intel AMT WS-Management endpoint for tests: it
// answers with request/response pairs written from Intel's AMT SDK and
// DMTF's WS-Management documents (fixtures/, see its README: constructed
// from the documentation, not captured from a device), after checking
// HTTP Digest authentication and that each request matches a recorded
// request exactly (Action, ResourceURI, selectors, body values). Behind
// it is a machine in memory whose power state and one-time boot follow
// the requests. A test can make an exchange answer with a SOAP Fault or
// hang.
package amtsim

import (
	"crypto/rand"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/anvilproj/anvil/internal/bmc/wsman"
)

//go:embed fixtures/*.xml
var fixtures embed.FS

// Power states the machine has (CIM PowerState values).
const (
	On  = 2
	Off = 8
)

// Config describes one simulated AMT.
type Config struct {
	Username, Password string
	// Realm is the Digest realm; AMT's look like "Digest:0A1B…".
	Realm string
	// Algorithm is the Digest algorithm offered: "" (RFC 2617 clients
	// assume MD5, as AMT does), "MD5" or "SHA-256".
	Algorithm string
	// NonceUses is how many requests a nonce serves before the server
	// calls it stale; 0 means without limit.
	NonceUses int
	// Power is the machine's initial state, On or Off (default Off).
	Power int
}

// exchange is one recorded pair and what it does to the machine.
type exchange struct {
	name     string // request fixture
	response string // response fixture
	when     func(*Server) bool
	effect   func(*Server)
}

// Server is a running simulated AMT.
type Server struct {
	cfg   Config
	HTTP  *httptest.Server
	pairs []exchange
	reqs  map[string]*wsman.Element // request fixtures, parsed

	mu        sync.Mutex
	power     int
	source    string // the boot source ChangeBootOrder set
	biosSetup bool
	safeMode  bool
	nextBoot  bool     // SetBootConfigRole IsNextSingleUse
	boots     []string // what each power on booted
	nonces    map[string]*nonce
	faults    map[string]string // exchange -> fault fixture
	hangs     map[string]bool
	unmatched []string
	counts    map[string]int
	authFails int
	hang      chan struct{}
}

type nonce struct {
	lastNC uint64
	uses   int
}

func isOn(s *Server) bool  { return s.power == On }
func isOff(s *Server) bool { return s.power != On }

// powerOn boots the machine: the pending one-time boot if any, else its
// own order ("default"); the one-time settings are spent.
func powerOn(s *Server) {
	s.power = On
	boot := "default"
	if s.nextBoot {
		switch {
		case s.biosSetup:
			boot = "BIOS setup"
		case s.source != "":
			boot = s.source
			if s.safeMode {
				boot += " (safe mode)"
			}
		}
	}
	s.boots = append(s.boots, boot)
	s.nextBoot, s.source, s.biosSetup, s.safeMode = false, "", false, false
}

func (s *Server) table() []exchange {
	setSource := func(src string) func(*Server) { return func(s *Server) { s.source = src } }
	return []exchange{
		{name: "enumerate-power", response: "enumerate-power"},
		{name: "pull-power", response: "pull-power-on", when: isOn},
		{name: "pull-power", response: "pull-power-off", when: isOff},
		{name: "power-on", response: "power-change", when: isOff, effect: powerOn},
		{name: "power-off", response: "power-change", when: isOn, effect: func(s *Server) { s.power = Off }},
		{name: "power-soft", response: "power-change-refused"}, // no Intel LMS to shut the OS down
		{name: "power-cycle", response: "power-change", when: isOn, effect: powerOn},
		{name: "power-reset", response: "power-change", when: isOn, effect: powerOn},
		{name: "get-boot-settings", response: "get-boot-settings"},
		{name: "put-boot-settings", response: "put-boot-settings", effect: func(s *Server) { s.biosSetup, s.safeMode = false, false }},
		{name: "put-boot-settings-bios", response: "put-boot-settings-bios", effect: func(s *Server) { s.biosSetup, s.safeMode = true, false }},
		{name: "put-boot-settings-safe", response: "put-boot-settings-safe", effect: func(s *Server) { s.biosSetup, s.safeMode = false, true }},
		{name: "set-boot-config-role", response: "set-boot-config-role", effect: func(s *Server) { s.nextBoot = true }},
		{name: "change-boot-order-pxe", response: "change-boot-order", effect: setSource("pxe")},
		{name: "change-boot-order-disk", response: "change-boot-order", effect: setSource("disk")},
		{name: "change-boot-order-cdrom", response: "change-boot-order", effect: setSource("cdrom")},
		{name: "change-boot-order-none", response: "change-boot-order", effect: setSource("")},
	}
}

// Fixture returns a fixture file's bytes by name ("power-on.request").
func Fixture(name string) ([]byte, error) { return fixtures.ReadFile("fixtures/" + name + ".xml") }

// New makes a server for cfg; Start or the caller serves it (Handler).
func New(cfg Config) (*Server, error) {
	if cfg.Realm == "" {
		cfg.Realm = "Digest:8E1F0000000000000000000000000000"
	}
	s := &Server{cfg: cfg, power: cfg.Power, reqs: map[string]*wsman.Element{}, nonces: map[string]*nonce{},
		faults: map[string]string{}, hangs: map[string]bool{}, counts: map[string]int{}, hang: make(chan struct{})}
	if s.power == 0 {
		s.power = Off
	}
	s.pairs = s.table()
	for _, p := range s.pairs {
		for _, f := range []string{p.name + ".request", p.response + ".response"} {
			data, err := Fixture(f)
			if err != nil {
				return nil, err
			}
			e, err := wsman.Parse(data)
			if err != nil {
				return nil, fmt.Errorf("fixture %s: %w", f, err)
			}
			if strings.HasSuffix(f, ".request") {
				s.reqs[p.name] = e
			}
		}
	}
	return s, nil
}

// Start serves a new simulated AMT over HTTP (or TLS with tlsOn) until
// the test ends.
func Start(t testing.TB, cfg Config, tlsOn bool) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.HTTP = httptest.NewUnstartedServer(s)
	// Clients refused at TLS are what the TLS tests want: no log lines.
	s.HTTP.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tlsOn {
		s.HTTP.StartTLS()
	} else {
		s.HTTP.Start()
	}
	t.Cleanup(func() {
		s.Close()
		s.HTTP.Close()
	})
	return s
}

// Close releases requests that hang.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.hang:
	default:
		close(s.hang)
	}
}

// Fail makes the exchange answer with another response fixture instead
// of its own, without its effect on the machine: a Fault (e.g.
// "fault-access-denied", sent with HTTP 400 as AMT does) or a refusal
// such as "power-change-refused" (ReturnValue 2).
func (s *Server) Fail(exchange, fault string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[exchange] = fault
}

// Hang makes the exchange never answer (until Close).
func (s *Server) Hang(exchange string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hangs[exchange] = true
}

// Power is the machine's CIM PowerState.
func (s *Server) Power() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.power
}

// Boots lists what each power on booted: "pxe", "disk", "cdrom", "BIOS
// setup", "disk (safe mode)", or "default" (no one-time boot pending).
func (s *Server) Boots() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.boots)
}

// Unmatched lists the requests that matched no recorded request, each
// with the canonical form the server read.
func (s *Server) Unmatched() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unmatched)
}

// Count is how many times exchange was answered.
func (s *Server) Count(exchange string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[exchange]
}

// AuthFailures counts requests refused for bad credentials (not the
// first, unauthenticated request of a challenge).
func (s *Server) AuthFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authFails
}

// Canonical writes an element tree in a form that compares what a
// WS-Management service reads: names by namespace URI (not prefix),
// attributes sorted, text trimmed; the header's MessageID and To, which
// differ per message and endpoint, are left out.
func Canonical(e *wsman.Element) string {
	var b strings.Builder
	var walk func(e *wsman.Element, depth int, inHeader bool)
	walk = func(e *wsman.Element, depth int, inHeader bool) {
		if inHeader && (e.Name.Local == "MessageID" || e.Name.Local == "To") {
			return
		}
		fmt.Fprintf(&b, "%s{%s}%s", strings.Repeat("  ", depth), e.Name.Space, e.Name.Local)
		attrs := make([]string, 0, len(e.Attrs))
		for _, a := range e.Attrs {
			attrs = append(attrs, fmt.Sprintf("{%s}%s=%q", a.Name.Space, a.Name.Local, a.Value))
		}
		sort.Strings(attrs)
		if len(attrs) > 0 {
			b.WriteString(" [" + strings.Join(attrs, " ") + "]")
		}
		if t := strings.TrimSpace(e.Text); t != "" {
			fmt.Fprintf(&b, " %q", t)
		}
		b.WriteByte('\n')
		for _, c := range e.Children {
			walk(c, depth+1, inHeader || (depth == 0 && e.Name.Local == "Envelope" && c.Name.Local == "Header"))
		}
	}
	walk(e, 0, false)
	return b.String()
}

// ServeHTTP implements http.Handler: POST /wsman only.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/wsman" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	if !s.authorized(w, r) {
		return
	}
	req, err := wsman.Parse(body)
	if err != nil {
		s.reply(w, http.StatusBadRequest, "fault-action-not-supported")
		return
	}
	got := Canonical(req)
	s.mu.Lock()
	var match *exchange
	for i := range s.pairs {
		p := &s.pairs[i]
		if (p.when == nil || p.when(s)) && Canonical(s.reqs[p.name]) == got {
			match = p
			break
		}
	}
	if match == nil {
		s.unmatched = append(s.unmatched, got)
		s.mu.Unlock()
		s.reply(w, http.StatusBadRequest, "fault-action-not-supported")
		return
	}
	s.counts[match.name]++
	fault, hang := s.faults[match.name], s.hangs[match.name]
	if fault == "" && !hang && match.effect != nil {
		match.effect(s)
	}
	s.mu.Unlock()
	switch {
	case hang:
		select {
		case <-r.Context().Done():
		case <-s.hang:
		}
	case strings.HasPrefix(fault, "fault-"):
		s.reply(w, http.StatusBadRequest, fault)
	case fault != "":
		s.reply(w, http.StatusOK, fault)
	default:
		s.reply(w, http.StatusOK, match.response+".response")
	}
}

func (s *Server) reply(w http.ResponseWriter, status int, fixture string) {
	if !strings.HasSuffix(fixture, ".response") {
		fixture += ".response"
	}
	data, err := Fixture(fixture)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/soap+xml; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// authorized checks the request's Digest Authorization (RFC 7616, qop
// auth): a known nonce, a nonce count above the last, the username,
// realm and URI, and the response computed with the password. Otherwise
// it answers 401 with a challenge (stale=true for a used-up nonce).
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	stale := false
	h := r.Header.Get("Authorization")
	if h != "" {
		chs, err := wsman.ParseChallenges([]string{h}) // same grammar as a challenge
		if err == nil && len(chs) == 1 && strings.EqualFold(chs[0].Scheme, "Digest") {
			p := chs[0].Params
			ok, isStale := s.check(p, r)
			if ok {
				return true
			}
			stale = isStale
			if !isStale {
				s.mu.Lock()
				s.authFails++
				s.mu.Unlock()
			}
		}
	}
	var nb [16]byte
	_, _ = rand.Read(nb[:])
	n := hex.EncodeToString(nb[:])
	s.mu.Lock()
	s.nonces[n] = &nonce{}
	s.mu.Unlock()
	alg := ""
	if s.cfg.Algorithm != "" {
		alg = ", algorithm=" + s.cfg.Algorithm
	}
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Digest realm="%s", nonce="%s", stale="%t", qop="auth"%s`, s.cfg.Realm, n, stale, alg))
	w.WriteHeader(http.StatusUnauthorized)
	return false
}

// check verifies one Authorization; it reports whether it is good and,
// if not, whether only the nonce was stale.
func (s *Server) check(p map[string]string, r *http.Request) (ok, stale bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nonces[p["nonce"]]
	if n == nil {
		return false, true // not ours, or forgotten: ask again
	}
	var nc uint64
	if _, err := fmt.Sscanf(p["nc"], "%x", &nc); err != nil || nc <= n.lastNC {
		return false, false // a replay
	}
	if s.cfg.NonceUses > 0 && n.uses >= s.cfg.NonceUses {
		return false, true
	}
	if p["username"] != s.cfg.Username || p["realm"] != s.cfg.Realm || p["uri"] != r.URL.RequestURI() || p["qop"] != "auth" {
		return false, false
	}
	want, err := wsman.DigestResponse(wsman.DigestParams{Algorithm: s.cfg.Algorithm, Username: s.cfg.Username, Realm: s.cfg.Realm,
		Password: s.cfg.Password, Nonce: p["nonce"], CNonce: p["cnonce"], NC: p["nc"], QOP: "auth", Method: r.Method, URI: p["uri"]})
	if err != nil || want != p["response"] {
		return false, false
	}
	n.lastNC = nc
	n.uses++
	return true, false
}
