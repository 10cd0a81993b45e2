package ui_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/ui"
)

// The UI's registration at the test provider.
const (
	uiClient = "anvil-ui"
	uiSecret = "ui-secret"
)

// provider is the other end of the code flow for the unit tests: a
// discovery document, the authtest IdP's JWKS, and a token endpoint that
// checks the client, the code and the PKCE verifier and returns the
// tokens the test makes. (The login against a real provider is
// test/browser's TestOIDCLogin.)
type provider struct {
	t   *testing.T
	idp *authtest.IdP
	srv *httptest.Server

	mu        sync.Mutex
	codes     map[string]grant // code → what the authorization request said
	idToken   func(nonce string) string
	access    string // the access token returned
	verifiers []string
}

type grant struct{ nonce, challenge, redirect string }

func newProvider(t *testing.T) *provider {
	p := &provider{t: t, idp: authtest.NewIdP(t), codes: map[string]grant{}, access: "opaque-access-token"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": p.issuer(), "authorization_endpoint": p.issuer() + "/authorize",
			"token_endpoint": p.issuer() + "/token", "jwks_uri": p.issuer() + "/jwks"})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) { w.Write(p.idp.JWKS()) })
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	p.idToken = func(nonce string) string { return p.idp.Sign(p.claims(nonce)) }
	return p
}

func (p *provider) issuer() string { return p.srv.URL }

// claims are a good ID token's: for the UI's client, with the nonce the
// login sent, olga of acme as a viewer.
func (p *provider) claims(nonce string) map[string]any {
	c := authtest.Claims("olga", "acme", auth.RoleViewer)
	c["iss"], c["aud"], c["nonce"] = p.issuer(), uiClient, nonce
	return c
}

func (p *provider) token(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	p.mu.Lock()
	g, known := p.codes[r.PostFormValue("code")]
	delete(p.codes, r.PostFormValue("code"))
	p.verifiers = append(p.verifiers, r.PostFormValue("code_verifier"))
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
	switch {
	case id != uiClient || secret != uiSecret:
		http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
		return
	case !known || r.PostFormValue("grant_type") != "authorization_code" || r.PostFormValue("redirect_uri") != g.redirect:
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		http.Error(w, `{"error":"invalid_grant","error_description":"PKCE verifier does not match"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"access_token": p.access, "token_type": "Bearer", "expires_in": 300,
		"id_token": p.idToken(g.nonce)})
}

// apiAuthenticate is the API's Authenticate trusting the provider's keys
// for iss = the provider and aud = audience.
func (p *provider) apiAuthenticate(audience string) func(context.Context, http.Header) (*auth.Principal, error) {
	v, err := auth.NewVerifier(context.Background(), auth.Config{JWKSURL: p.issuer() + "/jwks", Issuer: p.issuer(), Audience: audience})
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(v.Close)
	return func(ctx context.Context, h http.Header) (*auth.Principal, error) {
		tok, err := auth.BearerToken(h)
		if err != nil {
			return nil, err
		}
		return v.Verify(ctx, tok)
	}
}

// oidcEnv serves the UI with OIDC login at p; the API accepts the
// provider's tokens for audience.
func oidcEnv(t *testing.T, p *provider, audience string) *env {
	return newEnvWith(t, false, func(c *ui.Config) {
		c.Authenticate = p.apiAuthenticate(audience)
		c.OIDC = &ui.OIDC{Issuer: p.issuer(), ClientID: uiClient, ClientSecret: uiSecret, Scopes: []string{"profile"}}
	})
}

// noFollow is a client that shows redirects instead of following them.
func noFollow() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// jwtLike matches a JWT: its base64url header starts {"….
var jwtLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.`)

// started is a login sent to the provider: the authorization request's
// parameters and the cookie that binds it to the browser.
type started struct {
	query  url.Values
	cookie *http.Cookie
}

// start clicks "Log in with" and checks the authorization request.
func start(t *testing.T, e *env, p *provider) started {
	t.Helper()
	resp, err := noFollow().Get(e.srv.URL + "/ui/oidc/login?next=" + url.QueryEscape("/ui/hardware"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, p.issuer()+"/authorize?") {
		t.Fatalf("start: %s to %q; want 303 to the provider's authorization endpoint", resp.Status, loc)
	}
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, want := range map[string]string{"response_type": "code", "client_id": uiClient, "code_challenge_method": "S256",
		"redirect_uri": e.srv.URL + "/ui/oidc/callback", "scope": "openid profile"} {
		if q.Get(k) != want {
			t.Errorf("authorization request %s = %q; want %q", k, q.Get(k), want)
		}
	}
	for _, k := range []string{"state", "nonce", "code_challenge"} {
		if len(q.Get(k)) < 43 {
			t.Errorf("authorization request %s = %q; want 256 random bits", k, q.Get(k))
		}
	}
	var c *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "anvil_oidc" {
			c = ck
		}
	}
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/ui/oidc/callback" || c.MaxAge <= 0 ||
		strings.Contains(c.Value, q.Get("state")) || strings.Contains(c.Value, q.Get("nonce")) {
		t.Fatalf("login cookie %+v; want an HttpOnly, SameSite=Lax, short-lived cookie on the callback's path holding neither state nor nonce", c)
	}
	return started{query: q, cookie: c}
}

// callback comes back from the provider with a code for s and state.
func callback(t *testing.T, e *env, p *provider, s started, state string, cookie *http.Cookie) *http.Response {
	t.Helper()
	p.mu.Lock()
	p.codes["code-1"] = grant{nonce: s.query.Get("nonce"), challenge: s.query.Get("code_challenge"), redirect: s.query.Get("redirect_uri")}
	p.mu.Unlock()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/ui/oidc/callback?"+url.Values{"code": {"code-1"}, "state": {state}}.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := noFollow().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// session returns the session cookie resp sets, or nil.
func session(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == "anvil_session" && c.MaxAge >= 0 && c.Value != "" {
			return c
		}
	}
	return nil
}

// page GETs path with the session cookie c.
func page(t *testing.T, e *env, path string, c *http.Cookie) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(c)
	resp, err := noFollow().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, readAll(t, resp)
}

// TestOIDCLoginCodeFlow: the authorization request carries state, nonce
// and an S256 challenge; the token endpoint gets the matching verifier;
// the browser ends logged in as the ID token's subject, on a same-site
// page that moves on to where it was going; no token is in any URL the
// browser is sent to; the login cannot be replayed.
func TestOIDCLoginCodeFlow(t *testing.T) {
	p := newProvider(t)
	e := oidcEnv(t, p, uiClient)

	resp, err := http.Get(e.srv.URL + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	loginPage := readAll(t, resp)
	resp.Body.Close()
	if want := "Log in with " + strings.TrimPrefix(p.issuer(), "http://"); !strings.Contains(loginPage, want) {
		t.Errorf("the login page does not offer %q", want)
	}

	s := start(t, e, p)
	resp = callback(t, e, p, s, s.query.Get("state"), s.cookie)
	body := readAll(t, resp)
	ss := session(resp)
	if resp.StatusCode != http.StatusOK || ss == nil {
		t.Fatalf("callback: %s, session cookie %v: %s", resp.Status, ss, body)
	}
	if !strings.Contains(body, `<meta http-equiv="refresh" content="0; url=/ui/hardware">`) {
		t.Errorf("the callback's page does not move on to /ui/hardware by itself: %s", body)
	}
	for _, where := range []string{resp.Header.Get("Location"), body} {
		if jwtLike.MatchString(where) {
			t.Errorf("a token reached the browser: %s", where)
		}
	}
	if len(p.verifiers) != 1 || p.verifiers[0] == "" {
		t.Errorf("token endpoint got verifiers %q; want the login's one", p.verifiers)
	}
	code, fleet := page(t, e, "/ui/", ss)
	if code != http.StatusOK || !strings.Contains(fleet, `<span class="who">olga</span>`) {
		t.Errorf("fleet page after the login: %d, logged in as olga: %v", code, strings.Contains(fleet, "olga"))
	}

	// The same callback again (a replay, or the back button): the login
	// was used.
	again := callback(t, e, p, s, s.query.Get("state"), s.cookie)
	if again.StatusCode != http.StatusBadRequest || session(again) != nil {
		t.Errorf("the callback replayed: %s, session %v; want 400 and no session", again.Status, session(again))
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOIDCCallbackRefusals: every way a callback can fail to be this
// browser's genuine login ends without a session, with the reason shown.
func TestOIDCCallbackRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change makes the provider's ID token or the callback bad.
		idClaims  func(p *provider, c map[string]any)
		access    string
		state     func(s started) string
		cookie    func(s started) *http.Cookie
		wantCode  int
		wantError string
	}{
		{name: "bad state", state: func(started) string { return "forged-state" }, wantCode: http.StatusBadRequest, wantError: "state mismatch"},
		{name: "no login in progress", cookie: func(started) *http.Cookie { return nil }, wantCode: http.StatusBadRequest, wantError: "No login is in progress"},
		{name: "another browser's login", cookie: func(started) *http.Cookie { return &http.Cookie{Name: "anvil_oidc", Value: "someone-elses"} },
			wantCode: http.StatusBadRequest, wantError: "No login is in progress"},
		{name: "bad nonce", idClaims: func(_ *provider, c map[string]any) { c["nonce"] = "a-replayed-token's" },
			wantCode: http.StatusUnauthorized, wantError: "nonce is not the one this login sent"},
		{name: "no nonce", idClaims: func(_ *provider, c map[string]any) { delete(c, "nonce") },
			wantCode: http.StatusUnauthorized, wantError: "nonce"},
		{name: "another issuer", idClaims: func(_ *provider, c map[string]any) { c["iss"] = "https://evil.example" },
			wantCode: http.StatusUnauthorized, wantError: "wrong issuer"},
		{name: "another audience", idClaims: func(_ *provider, c map[string]any) { c["aud"] = "another-client" },
			wantCode: http.StatusUnauthorized, wantError: "wrong audience"},
		{name: "azp of another client", idClaims: func(_ *provider, c map[string]any) { c["aud"] = []string{uiClient, "x"}; c["azp"] = "x" },
			wantCode: http.StatusUnauthorized, wantError: "azp"},
		{name: "expired", idClaims: func(_ *provider, c map[string]any) {
			c["iat"], c["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
		}, wantCode: http.StatusUnauthorized, wantError: "expired"},
		{name: "at_hash of another access token", idClaims: func(_ *provider, c map[string]any) { c["at_hash"] = "AAAAAAAAAAAAAAAAAAAAAA" },
			wantCode: http.StatusUnauthorized, wantError: "at_hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t)
			if tc.idClaims != nil {
				p.idToken = func(nonce string) string {
					c := p.claims(nonce)
					tc.idClaims(p, c)
					return p.idp.Sign(c)
				}
			}
			e := oidcEnv(t, p, uiClient)
			s := start(t, e, p)
			state, cookie := s.query.Get("state"), s.cookie
			if tc.state != nil {
				state = tc.state(s)
			}
			if tc.cookie != nil {
				cookie = tc.cookie(s)
			}
			resp := callback(t, e, p, s, state, cookie)
			body := readAll(t, resp)
			if resp.StatusCode != tc.wantCode || session(resp) != nil || !strings.Contains(body, tc.wantError) {
				t.Errorf("callback: %s, session %v; want %d, no session, and the page saying %q:\n%s",
					resp.Status, session(resp), tc.wantCode, tc.wantError, body)
			}
		})
	}
}

// TestOIDCIDTokenOfAnotherKey: an ID token signed by a key the provider
// does not publish is refused.
func TestOIDCIDTokenOfAnotherKey(t *testing.T) {
	p := newProvider(t)
	other := authtest.NewIdP(t)
	p.idToken = func(nonce string) string { return other.Sign(p.claims(nonce), authtest.WithKID("not-published")) }
	e := oidcEnv(t, p, uiClient)
	s := start(t, e, p)
	resp := callback(t, e, p, s, s.query.Get("state"), s.cookie)
	if body := readAll(t, resp); resp.StatusCode != http.StatusUnauthorized || session(resp) != nil || !strings.Contains(body, "unknown key") {
		t.Errorf("callback: %s, session %v; want 401 unknown key:\n%s", resp.Status, session(resp), body)
	}
}

// TestOIDCSessionHoldsTheTokenTheAPIAccepts: when the API's audience is
// not the UI's client but the provider's access token is a JWT for it,
// the session holds the access token (the role is the access token's);
// when the API accepts neither token, the login is refused with the
// API's reasons.
func TestOIDCSessionHoldsTheTokenTheAPIAccepts(t *testing.T) {
	p := newProvider(t)
	ac := authtest.Claims("olga", "acme", auth.RoleOperator)
	ac["iss"], ac["aud"] = p.issuer(), "anvil-api"
	p.access = p.idp.Sign(ac)
	e := oidcEnv(t, p, "anvil-api")
	s := start(t, e, p)
	resp := callback(t, e, p, s, s.query.Get("state"), s.cookie)
	ss := session(resp)
	if resp.StatusCode != http.StatusOK || ss == nil {
		t.Fatalf("callback: %s: %s", resp.Status, readAll(t, resp))
	}
	e.create(t, hardware("acme", "node1", "52:54:00:aa:00:01", "10.0.0.1", nil))
	e.create(t, template("acme"))
	// An operator (the access token's role; the ID token says viewer)
	// gets Reprovision on acme's machine.
	testtool.WaitFor(t, "the machine's page to offer Reprovision", func() bool {
		code, body := page(t, e, "/ui/hardware/acme/node1", ss)
		return code == http.StatusOK && strings.Contains(body, "/reprovision")
	})

	// Neither token is for the API's audience.
	p2 := newProvider(t)
	e2 := oidcEnv(t, p2, "anvil-api")
	s2 := start(t, e2, p2)
	resp = callback(t, e2, p2, s2, s2.query.Get("state"), s2.cookie)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusUnauthorized || session(resp) != nil ||
		!strings.Contains(body, "access token: not a JWT") || !strings.Contains(body, "wrong audience") {
		t.Errorf("callback with no token for the API: %s, session %v; want 401 naming both tokens' reasons:\n%s", resp.Status, session(resp), body)
	}
}

// TestOIDCConfigRefused: OIDC login without authentication, or with an
// issuer in the clear, is refused at New.
func TestOIDCConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ui.Config
		want string
	}{
		{"no authentication", ui.Config{OIDC: &ui.OIDC{Issuer: "https://idp.example", ClientID: "anvil"}}, "needs authentication"},
		{"http issuer", ui.Config{Authenticate: testAuthenticate, OIDC: &ui.OIDC{Issuer: "http://idp.example", ClientID: "anvil"}}, "must be https"},
		{"no client", ui.Config{Authenticate: testAuthenticate, OIDC: &ui.OIDC{Issuer: "https://idp.example"}}, "client ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Store, tc.cfg.API = newEnv(t).st, http.NewServeMux()
			if _, err := ui.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}
