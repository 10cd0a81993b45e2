package ui

// OpenID Connect login (docs/ui.md, "Logging in with an identity
// provider"): the authorization code flow with PKCE (S256), the state, the
// nonce and the PKCE verifier held on the server under a random ID that a
// short-lived cookie binds to the browser, the ID token verified by
// internal/auth's Verifier (signature with the IdP's JWKS, iss, aud, exp)
// and its nonce here. The session then holds a token the API's own
// Authenticate accepts — the access token when it is a JWT the API
// verifies, else the ID token — so what the user may do is decided by the
// API's claim mapping, as for the CLI, never by a second one here.

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/anvilproj/anvil/internal/auth"
)

// OIDC configures login through an OpenID Connect provider (anvil serve
// --ui-oidc-*). The provider's tokens must be ones the API accepts
// (--auth-jwks-url or --auth-key-file, --auth-issuer, --auth-audience).
type OIDC struct {
	// Issuer is the provider's issuer URL; its discovery document is at
	// Issuer/.well-known/openid-configuration. https, or http on a
	// loopback host. Required.
	Issuer string
	// ClientID and ClientSecret are the UI's client registration at the
	// provider. ClientID is required; an empty secret is a public client
	// (PKCE alone).
	ClientID, ClientSecret string
	// Scopes are asked for besides "openid", which is always asked for.
	Scopes []string
	// RedirectURL is the callback registered at the provider. If empty,
	// https://HOST/ui/oidc/callback of the request's Host (http:// when
	// the UI is served without TLS).
	RedirectURL string
	// CAFile is a PEM file of CAs trusted, besides the system's, for the
	// provider's endpoints (the --auth-jwks-ca of the same provider).
	CAFile string
}

// OIDC limits.
const (
	// oidcCookie binds a login in progress to the browser that started
	// it: a random ID, never the state or the nonce themselves.
	oidcCookie = "anvil_oidc"
	// oidcCallbackPath is the redirect URI's path.
	oidcCallbackPath = basePath + "oidc/callback"
	// oidcLoginTime is how long a login may take at the provider.
	oidcLoginTime = 10 * time.Minute
	// maxPendingLogins bounds the logins in progress held; past it the
	// oldest is dropped (its browser starts again).
	maxPendingLogins = 10000
	// discoveryRetry is the least time between two attempts at the
	// discovery document after one failed: a flood of login clicks does
	// not become a flood of requests to the provider.
	discoveryRetry = 10 * time.Second
	// maxDiscoveryBytes bounds the discovery document read.
	maxDiscoveryBytes = 1 << 20
)

// oidcLogin is the UI's side of the login: the provider's endpoints, once
// discovered, and the logins in progress.
type oidcLogin struct {
	cfg    OIDC
	client *http.Client // to the provider: CheckIdPURL on redirects, CAFile
	ui     *UI

	mu       sync.Mutex    // guards the discovery; held while it runs
	provider *oidcProvider // nil until discovered
	failedAt time.Time     // of the last failed discovery
	failure  error

	pendingMu sync.Mutex
	pending   map[string]*pendingLogin // by the cookie's ID
}

// oidcProvider is what discovery found.
type oidcProvider struct {
	oauth    oauth2.Endpoint
	idTokens *auth.Verifier // iss = Issuer, aud = ClientID
}

// pendingLogin is one browser's login in progress.
type pendingLogin struct {
	state, nonce, verifier string
	next, redirect         string
	expires                time.Time
}

func newOIDCLogin(u *UI, cfg OIDC) (*oidcLogin, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return nil, errors.New("ui: OIDC login needs an issuer and a client ID")
	}
	if u.cfg.Authenticate == nil {
		return nil, errors.New("ui: OIDC login needs authentication on (the API must verify the provider's tokens), not --insecure-no-auth")
	}
	if err := auth.CheckIdPURL("OIDC issuer", cfg.Issuer); err != nil {
		return nil, err
	}
	client, err := auth.IdPClient(cfg.CAFile, auth.DefaultHTTPTimeout)
	if err != nil {
		return nil, err
	}
	return &oidcLogin{cfg: cfg, client: client, ui: u, pending: map[string]*pendingLogin{}}, nil
}

// name is how the login page names the provider.
func (o *oidcLogin) name() string {
	s := strings.TrimPrefix(strings.TrimPrefix(o.cfg.Issuer, "https://"), "http://")
	return strings.TrimSuffix(s, "/")
}

// close stops the ID token verifier's key refresh.
func (o *oidcLogin) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		o.provider.idTokens.Close()
	}
}

// discovery is the part of the provider's metadata (OpenID Connect
// Discovery 1.0, section 3) the login uses.
type discovery struct {
	Issuer        string `json:"issuer"`
	AuthEndpoint  string `json:"authorization_endpoint"`
	TokenEndpoint string `json:"token_endpoint"`
	JWKSURI       string `json:"jwks_uri"`
}

// discover returns the provider, reading its discovery document the first
// time (and again after a failure, at most once per discoveryRetry), so
// that the server starts while the provider is down.
func (o *oidcLogin) discover(ctx context.Context) (*oidcProvider, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, nil
	}
	now := o.ui.cfg.Clock.Now()
	if o.failure != nil && now.Sub(o.failedAt) < discoveryRetry {
		return nil, o.failure
	}
	p, err := o.fetchDiscovery(ctx)
	if err != nil {
		o.failedAt, o.failure = now, err
		o.ui.log.Warn("ui: OIDC discovery failed", "issuer", o.cfg.Issuer, "err", err)
		return nil, err
	}
	o.provider, o.failure = p, nil
	return p, nil
}

func (o *oidcLogin) fetchDiscovery(ctx context.Context) (*oidcProvider, error) {
	where := strings.TrimSuffix(o.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return nil, fmt.Errorf("discovery %s: %w", where, err)
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("discovery %s: HTTP %s", where, resp.Status)
	}
	var d discovery
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDiscoveryBytes)).Decode(&d); err != nil {
		return nil, fmt.Errorf("discovery %s: %w", where, err)
	}
	// Section 4.3: the document must name the issuer asked for exactly,
	// or its tokens' iss will not match either.
	if d.Issuer != o.cfg.Issuer {
		return nil, fmt.Errorf("discovery %s: issuer %q, want %q (--ui-oidc-issuer must be the provider's issuer exactly, trailing slash included)", where, d.Issuer, o.cfg.Issuer)
	}
	for what, u := range map[string]string{"authorization_endpoint": d.AuthEndpoint, "token_endpoint": d.TokenEndpoint, "jwks_uri": d.JWKSURI} {
		if u == "" {
			return nil, fmt.Errorf("discovery %s: no %s", where, what)
		}
		if err := auth.CheckIdPURL(what, u); err != nil {
			return nil, fmt.Errorf("discovery %s: %w", where, err)
		}
	}
	v, err := auth.NewVerifier(ctx, auth.Config{JWKSURL: d.JWKSURI, JWKSCAFile: o.cfg.CAFile, Issuer: d.Issuer,
		Audience: o.cfg.ClientID, Clock: o.ui.cfg.Clock, Logger: o.ui.log})
	if err != nil {
		return nil, fmt.Errorf("the provider's keys: %w", err)
	}
	return &oidcProvider{oauth: oauth2.Endpoint{AuthURL: d.AuthEndpoint, TokenURL: d.TokenEndpoint}, idTokens: v}, nil
}

// oauthConfig is the client of the code flow for redirect.
func (o *oidcLogin) oauthConfig(p *oidcProvider, redirect string) *oauth2.Config {
	scopes := []string{"openid"}
	for _, s := range o.cfg.Scopes {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, Endpoint: p.oauth,
		RedirectURL: redirect, Scopes: scopes}
}

// redirectURL is the callback the provider sends the browser back to.
func (o *oidcLogin) redirectURL(r *http.Request) string {
	if o.cfg.RedirectURL != "" {
		return o.cfg.RedirectURL
	}
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	return scheme + "://" + r.Host + oidcCallbackPath
}

// hold keeps p under a new random ID and returns the ID.
func (o *oidcLogin) hold(p *pendingLogin, now time.Time) string {
	id := randomID()
	o.pendingMu.Lock()
	defer o.pendingMu.Unlock()
	if len(o.pending) >= maxPendingLogins {
		var oldest string
		for k, v := range o.pending {
			if v.expires.Before(now) {
				delete(o.pending, k)
			} else if oldest == "" || v.expires.Before(o.pending[oldest].expires) {
				oldest = k
			}
		}
		if len(o.pending) >= maxPendingLogins && oldest != "" {
			delete(o.pending, oldest)
		}
	}
	o.pending[id] = p
	return id
}

// take removes and returns the login in progress of r's cookie, if it
// has not expired: each one is used once.
func (o *oidcLogin) take(r *http.Request, now time.Time) *pendingLogin {
	c, err := r.Cookie(oidcCookie)
	if err != nil {
		return nil
	}
	o.pendingMu.Lock()
	defer o.pendingMu.Unlock()
	p := o.pending[c.Value]
	delete(o.pending, c.Value)
	if p == nil || !now.Before(p.expires) {
		return nil
	}
	return p
}

// setOIDCCookie sets (or, with id "", clears) the cookie that binds a
// login in progress to the browser. SameSite=Lax, not Strict: the
// provider sends the browser back with a redirect from its own site, a
// cross-site navigation on which a Strict cookie is not sent.
func setOIDCCookie(w http.ResponseWriter, r *http.Request, id string) {
	c := &http.Cookie{Name: oidcCookie, Value: id, Path: oidcCallbackPath, HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: r.TLS != nil, MaxAge: int(oidcLoginTime / time.Second)}
	if id == "" {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// oidcStart (GET /ui/oidc/login, a link on the login page) sends the
// browser to the provider's authorization endpoint with a new state,
// nonce and PKCE challenge. A link, not a form: the Content-Security-
// Policy's form-action 'self' would stop a form's redirect to the
// provider. Another site's link to it only starts a login of the
// browser's own user at the provider.
func (u *UI) oidcStart(w http.ResponseWriter, r *http.Request) {
	o := u.oidc
	next := safeNext(r.URL.Query().Get("next"))
	p, err := o.discover(r.Context())
	if err != nil {
		u.loginError(w, http.StatusBadGateway, next, "The identity provider cannot be reached: "+err.Error())
		return
	}
	now := u.cfg.Clock.Now()
	pl := &pendingLogin{state: randomID(), nonce: randomID(), verifier: oauth2.GenerateVerifier(),
		next: next, redirect: o.redirectURL(r), expires: now.Add(oidcLoginTime)}
	setOIDCCookie(w, r, o.hold(pl, now))
	to := o.oauthConfig(p, pl.redirect).AuthCodeURL(pl.state, oauth2.S256ChallengeOption(pl.verifier),
		oauth2.SetAuthURLParam("nonce", pl.nonce))
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// oidcCallback (GET /ui/oidc/callback) ends the login: the state must be
// the one this browser's login was sent with, the code is exchanged (with
// the PKCE verifier), the ID token verified and its nonce checked; then a
// session starts with the token the API accepts.
func (u *UI) oidcCallback(w http.ResponseWriter, r *http.Request) {
	o := u.oidc
	pl := o.take(r, u.cfg.Clock.Now())
	setOIDCCookie(w, r, "")
	if pl == nil {
		u.loginError(w, http.StatusBadRequest, basePath,
			"No login is in progress in this browser (it was started elsewhere, took longer than "+oidcLoginTime.String()+", or was used already): log in again.")
		return
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		u.loginError(w, http.StatusUnauthorized, pl.next, fmt.Sprintf("The identity provider refused the login: %s %s", e, q.Get("error_description")))
		return
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(pl.state)) != 1 {
		u.loginError(w, http.StatusBadRequest, pl.next, "The identity provider's answer does not belong to this browser's login (state mismatch): log in again.")
		return
	}
	code := q.Get("code")
	if code == "" {
		u.loginError(w, http.StatusBadRequest, pl.next, "The identity provider's answer carries no code: log in again.")
		return
	}
	token, p, err := o.exchange(r.Context(), code, pl)
	if err != nil {
		u.log.Info("ui: OIDC login refused", "err", err)
		u.loginError(w, http.StatusUnauthorized, pl.next, "Login refused: "+err.Error())
		return
	}
	// The session's cookie is SameSite=Strict, and this request came by
	// the provider's cross-site redirect: a redirect onwards would still
	// count as cross-site, and the browser would not send the cookie. A
	// page of this site that moves on by itself (meta refresh, no script)
	// makes the next request a same-site one.
	ss := u.sessions.create(token, u.cfg.Clock.Now(), p.ExpiresAt)
	setCookie(w, r, ss)
	u.renderPage(w, http.StatusOK, "continue", pageData{Title: "Logged in", Data: pl.next, Refresh: pl.next})
}

// exchange trades code for the provider's tokens, verifies the ID token
// and returns the token the session holds, with its principal.
func (o *oidcLogin) exchange(ctx context.Context, code string, pl *pendingLogin) (string, *auth.Principal, error) {
	p, err := o.discover(ctx)
	if err != nil {
		return "", nil, err
	}
	tok, err := o.oauthConfig(p, pl.redirect).Exchange(context.WithValue(ctx, oauth2.HTTPClient, o.client), code,
		oauth2.VerifierOption(pl.verifier))
	if err != nil {
		return "", nil, fmt.Errorf("token endpoint: %w", err)
	}
	idToken, _ := tok.Extra("id_token").(string)
	if idToken == "" {
		return "", nil, errors.New("the token endpoint returned no ID token (is \"openid\" allowed for this client?)")
	}
	claims, err := p.idTokens.VerifyClaims(ctx, idToken)
	if err != nil {
		return "", nil, fmt.Errorf("ID token: %w", err)
	}
	if err := o.checkIDClaims(claims, pl.nonce, tok.AccessToken); err != nil {
		return "", nil, fmt.Errorf("ID token: %w", err)
	}
	return o.apiToken(ctx, idToken, tok.AccessToken)
}

// checkIDClaims checks what OpenID Connect Core (section 3.1.3.7) adds
// to a JWT's checks: the nonce this login sent, azp when present, and
// at_hash, which ties the access token to the ID token, when present.
func (o *oidcLogin) checkIDClaims(claims map[string]any, nonce, accessToken string) error {
	got, _ := claims["nonce"].(string)
	if subtle.ConstantTimeCompare([]byte(got), []byte(nonce)) != 1 {
		return errors.New("nonce is not the one this login sent (a replayed or foreign ID token)")
	}
	if azp, ok := claims["azp"].(string); ok && azp != o.cfg.ClientID {
		return fmt.Errorf("azp %q is not this client %q", azp, o.cfg.ClientID)
	}
	if h, ok := claims["at_hash"].(string); ok && accessToken != "" && !atHashMatches(h, accessToken) {
		return errors.New("at_hash does not match the access token")
	}
	return nil
}

// apiToken returns the token the API's Authenticate accepts, trying the
// access token first (the token meant for APIs, when the provider makes it
// a JWT for the API's audience), then the ID token (accepted when the
// client ID is the API's --auth-audience). If neither is, the login is
// refused with the API's reasons.
func (o *oidcLogin) apiToken(ctx context.Context, idToken, accessToken string) (string, *auth.Principal, error) {
	var reasons []string
	for _, c := range []struct{ name, token string }{{"access token", accessToken}, {"ID token", idToken}} {
		if strings.Count(c.token, ".") != 2 {
			reasons = append(reasons, c.name+": not a JWT")
			continue
		}
		p, err := o.ui.authenticate(ctx, c.token)
		if err == nil {
			return c.token, p, nil
		}
		reasons = append(reasons, c.name+": "+err.Error())
	}
	return "", nil, fmt.Errorf("the API accepts neither of the provider's tokens (%s): check --auth-issuer and --auth-audience against the provider's tokens", strings.Join(reasons, "; "))
}

// atHashMatches reports whether h is the at_hash of accessToken (OpenID
// Connect Core 3.1.3.6: base64url of the left half of the token's hash,
// the hash of the ID token's alg). The claims do not carry the header's
// alg, so SHA-256, SHA-384 and SHA-512 (every alg Verifier accepts uses
// one of them) are each tried: forging a match under any of them is as
// hard as under the right one.
func atHashMatches(h, accessToken string) bool {
	for _, f := range []func() hash.Hash{sha256.New, sha512.New384, sha512.New} {
		d := f()
		d.Write([]byte(accessToken))
		sum := d.Sum(nil)
		if subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:len(sum)/2])), []byte(h)) == 1 {
			return true
		}
	}
	return false
}
