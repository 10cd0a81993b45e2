package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/anvilproj/anvil/internal/clock"
)

// Defaults of Config's zero fields.
const (
	DefaultRefreshInterval    = 15 * time.Minute
	DefaultMinRefreshInterval = 10 * time.Second
	DefaultClockSkew          = 30 * time.Second
	DefaultHTTPTimeout        = 10 * time.Second
	DefaultSubjectClaim       = "sub"
	DefaultOrgClaim           = "org_id"
	DefaultRolesClaim         = "roles"
	// KeycloakRolesClaim is where Keycloak puts realm roles; it is also
	// read when RolesClaim is the default and a token has no roles claim.
	KeycloakRolesClaim = "realm_access.roles"
)

// maxJWKSRedirects bounds the redirects a JWKS fetch follows.
const maxJWKSRedirects = 5

// maxTokenBytes bounds a token; anything longer is refused unread.
const maxTokenBytes = 64 << 10

// Config configures a Verifier. At least one of JWKSURL and KeyFiles is
// required; keys from both are trusted.
type Config struct {
	// JWKSURL is the identity provider's JWKS (for Keycloak,
	// https://HOST/realms/REALM/protocol/openid-connect/certs). It must be
	// https, except on a loopback host. Audience is required with it.
	JWKSURL string
	// JWKSCAFile is a PEM file of CA certificates trusted, besides the
	// system's, for JWKSURL (an IdP behind a private CA). Optional.
	JWKSCAFile string
	// HTTPTimeout bounds one JWKS fetch. If 0, uses DefaultHTTPTimeout.
	HTTPTimeout time.Duration
	// RefreshInterval is how often the JWKS is fetched again. If 0, uses
	// DefaultRefreshInterval.
	RefreshInterval time.Duration
	// MinRefreshInterval is the least time between two fetches caused by
	// tokens naming a kid the verifier does not hold (key rotation). If 0,
	// uses DefaultMinRefreshInterval.
	MinRefreshInterval time.Duration
	// AllowStartWithoutKeys lets NewVerifier succeed when the first JWKS
	// fetch fails; tokens are then refused until a fetch succeeds.
	AllowStartWithoutKeys bool

	// KeyFiles are files of trusted public keys: PEM (PUBLIC KEY, RSA
	// PUBLIC KEY, or a private key whose public half is used) or a JWKS
	// or JWK in JSON. A file is read again when its modification time or
	// size changes, checked at most once a second. A key without a kid
	// (a PEM key) is known by its RFC 7638 thumbprint, the kid of the
	// local issuer's tokens; a token naming any other kid is not verified
	// with it.
	KeyFiles []string

	// RevocationFile, if set, is a revocation list (see Revoke): tokens
	// whose jti it names are refused as ReasonRevoked. It is read again
	// when it changes, checked at most once a second; a missing file
	// revokes nothing, and one that cannot be read at start is an error.
	RevocationFile string

	// Algorithms are the JWS algorithms accepted. If empty, uses RS256,
	// RS384, RS512, ES256, ES384, PS256 and EdDSA. Only asymmetric
	// algorithms may be named: "none" and HS256/384/512 are refused.
	Algorithms []string
	// Issuer, if set, must equal a token's iss.
	Issuer string
	// Audience, if set, must be in a token's aud (a string or an array).
	Audience string
	// ClockSkew is the tolerance in checking exp, nbf and iat. If 0, uses
	// DefaultClockSkew; if negative, none.
	ClockSkew time.Duration

	// SubjectClaim, OrgClaim and RolesClaim name the claims that give the
	// Principal's Subject, Org and Roles. A name is first looked up as a
	// top-level claim, then, if absent and it has dots, as a path into
	// nested objects ("realm_access.roles"). The roles claim may be an
	// array of strings or one string of names separated by spaces or
	// commas. If empty, use DefaultSubjectClaim, DefaultOrgClaim and
	// DefaultRolesClaim.
	SubjectClaim string
	OrgClaim     string
	RolesClaim   string

	// Clock checks exp, nbf and iat and paces key refreshes. If nil,
	// clock.Real.
	Clock clock.Clock
	// NewTicker starts the ticker of the periodic JWKS refresh (every
	// RefreshInterval): it returns the channel the ticks arrive on and the
	// function that stops it. If nil, uses a time.Ticker. Tests tick by
	// hand with it.
	NewTicker func(d time.Duration) (<-chan time.Time, func())
	// Logger receives key refresh and reload events. If nil, uses
	// slog.Default().
	Logger *slog.Logger
}

// Verifier checks bearer tokens (JWS compact JWTs, RFC 7519) against the
// configured keys and claims and maps them to a Principal. It is safe for
// concurrent use. Close stops its JWKS refresh.
type Verifier struct {
	algs      map[string]jws.Verifier
	issuer    string
	audience  string
	skew      time.Duration
	subClaim  string
	orgClaim  string
	roleClaim string
	now       func() time.Time

	remote  *remoteKeys  // nil without JWKSURL
	files   *fileKeys    // nil without KeyFiles
	revoked *revocations // nil without RevocationFile

	base      context.Context // JWKS fetches run on it; Close cancels it
	cancel    context.CancelFunc
	done      chan struct{} // closed when the refresh goroutine ends
	closeOnce sync.Once
}

// NewVerifier checks cfg, reads the key files and fetches the JWKS once.
// A key file that cannot be read is an error; so is a failed JWKS fetch,
// unless cfg.AllowStartWithoutKeys. ctx bounds the first fetch only. With a
// JWKSURL the Verifier refreshes in the background until Close.
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	if cfg.JWKSURL == "" && len(cfg.KeyFiles) == 0 {
		return nil, errors.New("auth: no token keys: set a JWKS URL or key files")
	}
	v := &Verifier{
		algs:      make(map[string]jws.Verifier),
		issuer:    cfg.Issuer,
		audience:  cfg.Audience,
		skew:      orDefault(cfg.ClockSkew, DefaultClockSkew),
		subClaim:  orDefault(cfg.SubjectClaim, DefaultSubjectClaim),
		orgClaim:  orDefault(cfg.OrgClaim, DefaultOrgClaim),
		roleClaim: orDefault(cfg.RolesClaim, DefaultRolesClaim),
		now:       clock.Or(cfg.Clock).Now,
	}
	if v.skew < 0 {
		v.skew = 0
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = defaultAlgorithms
	}
	for _, a := range algs {
		if _, ok := asymmetric[a]; !ok {
			if a == algNone || strings.HasPrefix(strings.ToUpper(a), "HS") {
				return nil, fmt.Errorf("auth: algorithm %q refused: only asymmetric signatures are accepted (RS*, PS*, ES*, EdDSA)", a)
			}
			return nil, fmt.Errorf("auth: unknown algorithm %q (want RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512 or EdDSA)", a)
		}
		jv, err := jws.NewVerifier(jwa.SignatureAlgorithm(a))
		if err != nil {
			return nil, fmt.Errorf("auth: algorithm %s: %w", a, err)
		}
		v.algs[a] = jv
	}

	if len(cfg.KeyFiles) > 0 {
		v.files = newFileKeys(slices.Clone(cfg.KeyFiles), v.now, log)
		if err := v.files.load(); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}

	if cfg.RevocationFile != "" {
		v.revoked = &revocations{path: cfg.RevocationFile, now: v.now, log: log}
		if err := v.revoked.load(); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}

	v.base, v.cancel = context.WithCancel(context.WithoutCancel(ctx))
	v.done = make(chan struct{})
	if cfg.JWKSURL == "" {
		close(v.done)
		return v, nil
	}
	if err := checkJWKSURL(cfg.JWKSURL); err != nil {
		v.cancel()
		return nil, err
	}
	if cfg.Audience == "" {
		v.cancel()
		return nil, errors.New("auth: an audience is required with a JWKS URL (the IdP signs tokens for other services too)")
	}
	client, err := jwksClient(cfg.JWKSCAFile, orDefault(cfg.HTTPTimeout, DefaultHTTPTimeout))
	if err != nil {
		v.cancel()
		return nil, err
	}
	v.remote = &remoteKeys{
		url:         cfg.JWKSURL,
		client:      client,
		minInterval: orDefault(cfg.MinRefreshInterval, DefaultMinRefreshInterval),
		now:         v.now,
		log:         log,
	}
	if _, err := v.remote.refresh(ctx, ctx, false); err != nil {
		if !cfg.AllowStartWithoutKeys {
			v.cancel()
			return nil, fmt.Errorf("auth: %w", err)
		}
		log.Warn("auth: no keys from the JWKS yet; tokens are refused until a fetch succeeds", "err", err)
	}
	newTicker := cfg.NewTicker
	if newTicker == nil {
		newTicker = timeTicker
	}
	tick, stopTick := newTicker(orDefault(cfg.RefreshInterval, DefaultRefreshInterval))
	go func() {
		defer close(v.done)
		defer stopTick()
		v.remote.run(v.base, tick)
	}()
	return v, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// checkJWKSURL refuses a JWKS URL that is not https, unless its host is a
// loopback one (a test IdP, or a proxy on the same machine): keys fetched
// in the clear could be replaced on the way.
func checkJWKSURL(raw string) error { return CheckIdPURL("JWKS URL", raw) }

// CheckIdPURL refuses an identity provider's URL — what names it (its
// JWKS, its issuer, its token endpoint) — that is not https, unless its
// host is a loopback one: keys or tokens fetched in the clear could be
// replaced or read on the way.
func CheckIdPURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("auth: %s: %w", what, err)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			return nil
		}
		return fmt.Errorf("auth: %s %s: must be https (http only on a loopback host)", what, raw)
	}
	return fmt.Errorf("auth: %s %q: want an https:// URL", what, raw)
}

// jwksClient returns the HTTP client of JWKS fetches (IdPClient).
func jwksClient(caFile string, timeout time.Duration) (*http.Client, error) {
	return IdPClient(caFile, timeout)
}

// IdPClient returns an HTTP client for an identity provider: a timeout,
// the system's CAs plus those of caFile, if any, and redirects only to
// URLs CheckIdPURL allows.
func IdPClient(caFile string, timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("auth: JWKS CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("auth: JWKS CA file %s: no PEM certificates", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// A redirect must not lead to plain http (keys in the clear).
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxJWKSRedirects {
				return fmt.Errorf("more than %d redirects", maxJWKSRedirects)
			}
			return CheckIdPURL("redirect", req.URL.String())
		},
	}, nil
}

// Close stops the background JWKS refresh and any fetch under way, and
// waits for them. The Verifier still verifies with the keys it holds.
// Close may be called more than once.
func (v *Verifier) Close() {
	v.closeOnce.Do(v.cancel)
	<-v.done
	if v.remote != nil {
		v.remote.client.CloseIdleConnections()
	}
}

// Refresh fetches the JWKS now (not subject to MinRefreshInterval) and
// re-reads the key files that changed, for an operator's "reload".
func (v *Verifier) Refresh(ctx context.Context) error {
	var errs []error
	if v.files != nil {
		v.files.mu.Lock()
		v.files.next = v.now().Add(keyFileCheckInterval)
		errs = append(errs, v.files.reloadLocked(false))
		v.files.mu.Unlock()
	}
	if v.remote != nil {
		_, err := v.remote.refresh(ctx, v.base, false)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// b64 is the base64url of JWS segments (RFC 7515 section 2): unpadded,
// and strict, so that one token has one spelling.
var b64 = base64.RawURLEncoding.Strict()

// Header parameters read (RFC 7515 section 4.1). Keys named in the header
// (jwk, jku, x5u, x5c) are never used: only configured keys are trusted.
const (
	headerAlg  = "alg"
	headerKid  = "kid"
	headerCrit = "crit"
)

// parseHeader reads alg and kid from a decoded protected header, matching
// parameter names exactly (encoding/json would match a struct field's
// name in any case, and "ALG" is not "alg").
func parseHeader(b []byte) (alg, kid string, err error) {
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b, &hdr); err != nil || hdr == nil {
		return "", "", malformed("header is not a JSON object")
	}
	if _, ok := hdr[headerCrit]; ok {
		// RFC 7515 section 4.1.11: extensions we do not understand
		// (b64, say) make the token invalid.
		return "", "", malformed("crit header: no extensions are supported")
	}
	raw, ok := hdr[headerAlg]
	if !ok {
		return "", "", malformed("no alg in header")
	}
	if err := json.Unmarshal(raw, &alg); err != nil || alg == "" {
		return "", "", malformed("alg is not a non-empty string")
	}
	if raw, ok := hdr[headerKid]; ok {
		if err := json.Unmarshal(raw, &kid); err != nil {
			return "", "", malformed("kid is not a string")
		}
	}
	return alg, kid, nil
}

// Verify checks raw — a compact JWS (header.payload.signature) — and
// returns the Principal its claims name. Any refusal is a *TokenError
// (ReasonOf gives its reason). ctx bounds the wait for a JWKS fetch when
// the token names a kid the verifier does not hold.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Principal, error) {
	claims, err := v.signed(ctx, raw)
	if err != nil {
		return nil, err
	}
	pr, err := v.principal(claims)
	if err != nil {
		return nil, err
	}
	if err := v.checkRevoked(pr); err != nil {
		return nil, err
	}
	return pr, nil
}

// VerifyClaims checks raw as Verify does — signature, exp, nbf, iat, iss
// and aud — but maps no claim to a Principal: it returns the claims, for
// a token that proves a login rather than grants access (an OpenID
// Connect ID token, whose nonce and azp the caller checks). Any refusal
// is a *TokenError.
func (v *Verifier) VerifyClaims(ctx context.Context, raw string) (map[string]any, error) {
	claims, err := v.signed(ctx, raw)
	if err != nil {
		return nil, err
	}
	if _, err := v.registered(claims); err != nil {
		return nil, err
	}
	return claims, nil
}

// signed checks raw's shape, algorithm and signature and returns its
// claims, not yet checked.
func (v *Verifier) signed(ctx context.Context, raw string) (map[string]any, error) {
	h, p, s, err := splitToken(raw)
	if err != nil {
		return nil, err
	}
	hb, err := b64.DecodeString(h)
	if err != nil {
		return nil, malformed("header is not base64url")
	}
	alg, kid, err := parseHeader(hb)
	if err != nil {
		return nil, err
	}
	jv, ok := v.algs[alg]
	if !ok {
		return nil, &TokenError{Reason: ReasonAlgorithm, Detail: "alg " + quote(alg)}
	}
	payload, err := b64.DecodeString(p)
	if err != nil {
		return nil, malformed("payload is not base64url")
	}
	sig, err := b64.DecodeString(s)
	if err != nil {
		return nil, malformed("signature is not base64url")
	}
	if err := v.checkSignature(ctx, kid, alg, jv, []byte(raw[:len(h)+1+len(p)]), sig); err != nil {
		return nil, err
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil || claims == nil {
		return nil, malformed("payload is not a JSON object")
	}
	return claims, nil
}

// splitToken returns the three base64url parts of a compact JWS, still
// encoded, refusing an empty or oversized token or another shape.
func splitToken(raw string) (header, payload, sig string, err error) {
	if raw == "" {
		return "", "", "", &TokenError{Reason: ReasonNoToken}
	}
	if len(raw) > maxTokenBytes {
		return "", "", "", malformed("longer than %d bytes", maxTokenBytes)
	}
	h, rest, _ := strings.Cut(raw, ".")
	p, s, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(s, ".") {
		return "", "", "", malformed("not a compact JWS (three dot-separated parts)")
	}
	return h, p, s, nil
}

// checkRevoked refuses p when the revocation list names its token.
func (v *Verifier) checkRevoked(p *Principal) error {
	if v.revoked == nil || p.TokenID == "" || !v.revoked.revoked(p.TokenID) {
		return nil
	}
	return &TokenError{Reason: ReasonRevoked, Detail: "jti " + quote(p.TokenID)}
}

func malformed(format string, args ...any) *TokenError {
	return &TokenError{Reason: ReasonMalformed, Detail: fmt.Sprintf(format, args...)}
}

// keySets returns the sets of trusted keys now held.
func (v *Verifier) keySets() []*keySet {
	sets := make([]*keySet, 0, 2)
	if v.files != nil {
		sets = append(sets, v.files.current())
	}
	if v.remote != nil {
		if ks := v.remote.current(); ks != nil {
			sets = append(sets, ks)
		}
	}
	return sets
}

// candidates are the keys to try for a token with kid: those with that
// kid, or every key when the token names none.
func candidates(sets []*keySet, kid string) []*verifyKey {
	var keys []*verifyKey
	for _, s := range sets {
		if kid == "" {
			keys = append(keys, s.all...)
		} else {
			keys = append(keys, s.byKID[kid]...)
		}
	}
	return keys
}

// checkSignature verifies sig over input with a trusted key fit for alg.
// A kid that no key has sends for the JWKS again (rate limited), then,
// still unknown, is refused: a key of another kid is never tried, so a
// token names the key that signed it or none.
func (v *Verifier) checkSignature(ctx context.Context, kid, alg string, jv jws.Verifier, input, sig []byte) error {
	keys := candidates(v.keySets(), kid)
	var fetchErr error
	if kid != "" && len(keys) == 0 && v.remote != nil {
		var fetched bool
		fetched, fetchErr = v.remote.refresh(ctx, v.base, true)
		if fetched && fetchErr == nil {
			keys = candidates(v.keySets(), kid)
		}
	}
	if len(keys) == 0 {
		detail := "kid " + quote(kid)
		if kid == "" {
			detail = "no keys"
		}
		return &TokenError{Reason: ReasonUnknownKey, Detail: detail, Err: fetchErr}
	}
	fitting := 0
	for _, k := range keys {
		if !k.fits(alg) {
			continue
		}
		fitting++
		if jv.Verify(input, sig, k.pub) == nil {
			return nil
		}
	}
	if fitting == 0 {
		return &TokenError{Reason: ReasonAlgorithm, Detail: fmt.Sprintf("alg %s does not fit the key (kid %s)", alg, quote(kid))}
	}
	return &TokenError{Reason: ReasonBadSignature}
}
