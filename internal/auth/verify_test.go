package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
	"github.com/anvilproj/anvil/internal/clock"
)

// newClock is a settable clock for Config.Clock, reading now.
func newClock() *clock.Fake { return clock.NewFake(time.Now()) }

// newVerifier makes a Verifier closed at the end of the test.
func newVerifier(t testing.TB, cfg auth.Config) *auth.Verifier {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	v, err := auth.NewVerifier(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// with returns a copy of claims with the given entries set, or deleted
// when the value is nil.
func with(claims map[string]any, kv ...any) map[string]any {
	c := make(map[string]any, len(claims))
	for k, v := range claims {
		c[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

// checkRefusal fails the test unless err is a *TokenError with reason want
// whose message does not contain any part of the token.
func checkRefusal(t *testing.T, raw string, err error, want auth.Reason) {
	t.Helper()
	var te *auth.TokenError
	if !errors.As(err, &te) {
		t.Fatalf("Verify = %v (%T); want a *TokenError with reason %q", err, err, want)
	}
	if te.Reason != want {
		t.Fatalf("Verify reason = %q (%v); want %q", te.Reason, err, want)
	}
	t.Logf("refused: %v", err)
	for _, part := range strings.Split(raw, ".") {
		if len(part) >= 8 && strings.Contains(err.Error(), part) {
			t.Errorf("error %q echoes the token", err)
		}
	}
}

// hs256 signs input with HMAC-SHA256 under secret, as an attacker who
// knows the RSA public key would.
func hs256(input string, secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(input))
	return m.Sum(nil)
}

// TestBadTokens is the catalogue of tokens the verifier must refuse, each
// with its reason, next to the near misses it must accept.
func TestBadTokens(t *testing.T) {
	idp := authtest.NewIdP(t)
	other := authtest.NewIdP(t) // same kids, other keys
	v := newVerifier(t, idp.Config())
	good := authtest.Claims("alice", "acme", auth.RoleOperator)
	now := time.Now()
	rsaPEM := idp.PublicKeyPEM(authtest.RSAKeyID)

	// The attacker's EC key, offered in the token's own jwk header.
	attacker, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	attackerJWK, err := jwk.FromRaw(&attacker.PublicKey)
	if err != nil {
		t.Fatal(err)
	}

	tamper := func() string {
		tok := idp.Sign(good)
		parts := strings.Split(tok, ".")
		parts[1] = authtest.Segment(mustJSON(t, with(good, "roles", []string{auth.RoleAdmin})))
		return strings.Join(parts, ".")
	}
	flipSig := func() string {
		tok := idp.Sign(good)
		parts := strings.Split(tok, ".")
		sig := []byte(parts[2])
		// Change a character in the middle: still canonical base64url.
		if sig[10] == 'A' {
			sig[10] = 'B'
		} else {
			sig[10] = 'A'
		}
		parts[2] = string(sig)
		return strings.Join(parts, ".")
	}
	hsAttack := func(kid bool) string {
		hdr := map[string]any{"alg": "HS256", "typ": "JWT"}
		if kid {
			hdr["kid"] = authtest.RSAKeyID
		}
		in := authtest.SigningInput(t, hdr, good)
		return authtest.Join(in, hs256(in, rsaPEM))
	}
	unsigned := func(alg string) string {
		return authtest.SigningInput(t, map[string]any{"alg": alg, "kid": authtest.RSAKeyID}, good) + "."
	}
	goodHeader := authtest.Segment([]byte(`{"alg":"RS256","kid":"rsa-1"}`))
	goodPayload := authtest.Segment(mustJSON(t, good))

	for _, tc := range []struct {
		name  string
		token string
		want  auth.Reason // "" means accepted
	}{
		{name: "good RS256", token: idp.Sign(good)},
		{name: "good ES256", token: idp.Sign(good, authtest.WithKey(authtest.ECKeyID))},
		{name: "good EdDSA", token: idp.Sign(good, authtest.WithKey(authtest.Ed25519KeyID))},
		{name: "aud array containing ours", token: idp.Sign(with(good, "aud", []string{"other", authtest.Audience}))},
		{name: "expired within skew", token: idp.Sign(with(good, "exp", now.Add(-10*time.Second).Unix()))},
		{name: "nbf within skew", token: idp.Sign(with(good, "nbf", now.Add(10*time.Second).Unix()))},
		{name: "fractional exp", token: idp.Sign(with(good, "exp", float64(now.Add(time.Hour).UnixMilli())/1000))},

		{name: "empty", token: "", want: auth.ReasonNoToken},
		{name: "one part", token: "abcdef", want: auth.ReasonMalformed},
		{name: "two parts", token: goodHeader + "." + goodPayload, want: auth.ReasonMalformed},
		{name: "four parts", token: idp.Sign(good) + ".x", want: auth.ReasonMalformed},
		{name: "JWE, five parts", token: "eyJhbGciOiJSU0EtT0FFUCJ9.a.b.c.d", want: auth.ReasonMalformed},
		{name: "header bad base64", token: "!!!!." + goodPayload + ".c2ln", want: auth.ReasonMalformed},
		{name: "header padded base64", token: authtest.Segment([]byte(`{"alg":"RS256"}`)) + "=." + goodPayload + ".c2ln", want: auth.ReasonMalformed},
		{name: "header not JSON", token: authtest.Segment([]byte(`{alg: RS256`)) + "." + goodPayload + ".c2ln", want: auth.ReasonMalformed},
		{name: "header JSON array", token: authtest.Segment([]byte(`["RS256"]`)) + "." + goodPayload + ".c2ln", want: auth.ReasonMalformed},
		{name: "header alg a number", token: authtest.Segment([]byte(`{"alg":256}`)) + "." + goodPayload + ".c2ln", want: auth.ReasonMalformed},
		{name: "header ALG in upper case", token: authtest.Segment([]byte(`{"ALG":"RS256","kid":"rsa-1"}`)) + "." + goodPayload + ".c2ln", want: auth.ReasonMalformed},
		{name: "header kid a number", token: authtest.Segment([]byte(`{"alg":"RS256","kid":1}`)) + "." + goodPayload + ".c2ln", want: auth.ReasonMalformed},
		{name: "header without alg", token: authtest.Segment([]byte(`{"kid":"rsa-1"}`)) + "." + goodPayload + ".c2ln", want: auth.ReasonMalformed},
		{name: "payload bad base64", token: goodHeader + ".***.c2ln", want: auth.ReasonMalformed},
		{name: "signature bad base64", token: goodHeader + "." + goodPayload + ".***", want: auth.ReasonMalformed},
		{name: "payload not JSON (validly signed)", token: signRaw(t, idp, "not json"), want: auth.ReasonMalformed},
		{name: "payload JSON null (validly signed)", token: signRaw(t, idp, "null"), want: auth.ReasonMalformed},
		{name: "crit header", token: idp.Sign(good, authtest.WithHeader("crit", []string{"b64"}), authtest.WithHeader("b64", false)), want: auth.ReasonMalformed},
		{name: "too long", token: idp.Sign(with(good, "pad", strings.Repeat("x", 70_000))), want: auth.ReasonMalformed},

		{name: "alg none", token: unsigned("none"), want: auth.ReasonAlgorithm},
		{name: "alg None", token: unsigned("None"), want: auth.ReasonAlgorithm},
		{name: "alg NONE with a signature", token: unsigned("NONE") + "c2ln", want: auth.ReasonAlgorithm},
		{name: "HS256 keyed with the RSA public key", token: hsAttack(true), want: auth.ReasonAlgorithm},
		{name: "HS256 keyed with the RSA public key, no kid", token: hsAttack(false), want: auth.ReasonAlgorithm},
		{name: "ES256 token naming the RSA key", token: idp.Sign(good, authtest.WithKey(authtest.ECKeyID), authtest.WithKID(authtest.RSAKeyID)), want: auth.ReasonAlgorithm},
		{name: "RS256 token naming the EC key", token: idp.Sign(good, authtest.WithKID(authtest.ECKeyID)), want: auth.ReasonAlgorithm},
		{name: "PS256 with a key published for RS256", token: idp.Sign(good, authtest.WithAlg("PS256")), want: auth.ReasonAlgorithm},

		{name: "bad signature (flipped)", token: flipSig(), want: auth.ReasonBadSignature},
		{name: "bad signature (other IdP, same kid)", token: other.Sign(good), want: auth.ReasonBadSignature},
		{name: "bad signature (other IdP, no kid)", token: other.Sign(good, authtest.WithKID("")), want: auth.ReasonBadSignature},
		{name: "empty signature", token: goodHeader + "." + goodPayload + ".", want: auth.ReasonBadSignature},
		{name: "tampered claims", token: tamper(), want: auth.ReasonBadSignature},
		{name: "attacker key in jwk header, our kid", token: signWithEC(t, attacker, map[string]any{"alg": "ES256", "kid": authtest.ECKeyID, "jwk": attackerJWK}, good), want: auth.ReasonBadSignature},

		{name: "expired", token: idp.Sign(with(good, "exp", now.Add(-time.Hour).Unix())), want: auth.ReasonExpired},
		{name: "expired just beyond skew", token: idp.Sign(with(good, "exp", now.Add(-40*time.Second).Unix())), want: auth.ReasonExpired},
		{name: "nbf beyond skew", token: idp.Sign(with(good, "nbf", now.Add(5*time.Minute).Unix())), want: auth.ReasonNotYetValid},
		{name: "iat in the future", token: idp.Sign(with(good, "iat", now.Add(time.Hour).Unix())), want: auth.ReasonNotYetValid},
		{name: "exp a string", token: idp.Sign(with(good, "exp", "tomorrow")), want: auth.ReasonMalformed},
		{name: "nbf a string", token: idp.Sign(with(good, "nbf", "now")), want: auth.ReasonMalformed},

		{name: "wrong issuer", token: idp.Sign(with(good, "iss", "https://evil.example")), want: auth.ReasonIssuer},
		{name: "no issuer", token: idp.Sign(with(good, "iss", nil)), want: auth.ReasonIssuer},
		{name: "issuer not a string", token: idp.Sign(with(good, "iss", 7)), want: auth.ReasonIssuer},
		{name: "wrong audience", token: idp.Sign(with(good, "aud", "grafana")), want: auth.ReasonAudience},
		{name: "audience array without ours", token: idp.Sign(with(good, "aud", []string{"grafana", "vault"})), want: auth.ReasonAudience},
		{name: "no audience", token: idp.Sign(with(good, "aud", nil)), want: auth.ReasonAudience},

		{name: "no exp", token: idp.Sign(with(good, "exp", nil)), want: auth.ReasonMissingClaim},
		{name: "no sub", token: idp.Sign(with(good, "sub", nil)), want: auth.ReasonMissingClaim},
		{name: "empty sub", token: idp.Sign(with(good, "sub", "")), want: auth.ReasonMissingClaim},
		{name: "sub a number", token: idp.Sign(with(good, "sub", 42)), want: auth.ReasonMalformed},
		{name: "roles holding a number", token: idp.Sign(with(good, "roles", []any{"viewer", 1})), want: auth.ReasonMalformed},
		{name: "roles an object", token: idp.Sign(with(good, "roles", map[string]any{"admin": true})), want: auth.ReasonMalformed},

		{name: "unknown kid", token: idp.Sign(good, authtest.WithKID("no-such-key")), want: auth.ReasonUnknownKey},
		{name: "attacker key in jwk header, its own kid", token: signWithEC(t, attacker, map[string]any{"alg": "ES256", "kid": "attacker", "jwk": attackerJWK}, good), want: auth.ReasonUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify(context.Background(), tc.token)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Verify = %v; want accepted", err)
				}
				if p.Subject != "alice" {
					t.Errorf("Verify subject = %q; want alice", p.Subject)
				}
				return
			}
			if p != nil {
				t.Errorf("Verify returned a principal (%+v) with its error", p)
			}
			checkRefusal(t, tc.token, err, tc.want)
		})
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signRaw signs an arbitrary payload with idp's signing key.
func signRaw(t *testing.T, idp *authtest.IdP, payload string) string {
	t.Helper()
	return idp.SignPayload([]byte(payload))
}

// signWithEC signs claims under header with k, a key the verifier does not
// trust.
func signWithEC(t *testing.T, k *ecdsa.PrivateKey, header, claims map[string]any) string {
	t.Helper()
	in := authtest.SigningInput(t, header, claims)
	s, err := jws.NewSigner(jwa.ES256)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := s.Sign([]byte(in), k)
	if err != nil {
		t.Fatal(err)
	}
	return authtest.Join(in, sig)
}

// TestClaimMapping: the configured claims become the Principal.
func TestClaimMapping(t *testing.T) {
	idp := authtest.NewIdP(t)
	base := authtest.Claims("alice", "acme", auth.RoleViewer)
	for _, tc := range []struct {
		name   string
		cfg    func(*auth.Config)
		claims map[string]any
		want   auth.Principal
	}{
		{
			name:   "defaults",
			claims: base,
			want:   auth.Principal{Subject: "alice", Org: "acme", Roles: []string{auth.RoleViewer}},
		},
		{
			name: "Keycloak realm_access.roles when there is no roles claim",
			claims: with(base, "roles", nil,
				"realm_access", map[string]any{"roles": []string{"offline_access", auth.RoleAdmin}}),
			want: auth.Principal{Subject: "alice", Org: "acme", Roles: []string{"offline_access", auth.RoleAdmin}},
		},
		{
			name: "roles claim wins over realm_access.roles",
			claims: with(base,
				"realm_access", map[string]any{"roles": []string{auth.RoleAdmin}}),
			want: auth.Principal{Subject: "alice", Org: "acme", Roles: []string{auth.RoleViewer}},
		},
		{
			name: "Keycloak path configured explicitly",
			cfg:  func(c *auth.Config) { c.RolesClaim = "realm_access.roles" },
			claims: with(base,
				"realm_access", map[string]any{"roles": []string{auth.RoleOperator}}),
			want: auth.Principal{Subject: "alice", Org: "acme", Roles: []string{auth.RoleOperator}},
		},
		{
			name: "Keycloak client roles path",
			cfg:  func(c *auth.Config) { c.RolesClaim = "resource_access.anvil.roles" },
			claims: with(base, "roles", nil,
				"resource_access", map[string]any{"anvil": map[string]any{"roles": []string{auth.RoleOperator}}}),
			want: auth.Principal{Subject: "alice", Org: "acme", Roles: []string{auth.RoleOperator}},
		},
		{
			name:   "custom roles claim absent: no roles, no Keycloak fallback",
			cfg:    func(c *auth.Config) { c.RolesClaim = "groups" },
			claims: with(base, "roles", nil, "realm_access", map[string]any{"roles": []string{auth.RoleAdmin}}),
			want:   auth.Principal{Subject: "alice", Org: "acme"},
		},
		{
			name:   "custom org claim path",
			cfg:    func(c *auth.Config) { c.OrgClaim = "tenant.id" },
			claims: with(base, "org_id", nil, "tenant", map[string]any{"id": "globex", "name": "Globex"}),
			want:   auth.Principal{Subject: "alice", Org: "globex", Roles: []string{auth.RoleViewer}},
		},
		{
			name:   "claim named by a URL (dots in its name)",
			cfg:    func(c *auth.Config) { c.RolesClaim = "https://anvil.example/roles" },
			claims: with(base, "https://anvil.example/roles", []string{auth.RoleOperator}),
			want:   auth.Principal{Subject: "alice", Org: "acme", Roles: []string{auth.RoleOperator}},
		},
		{
			name:   "roles as a space-separated string",
			claims: with(base, "roles", "viewer operator"),
			want:   auth.Principal{Subject: "alice", Org: "acme", Roles: []string{auth.RoleViewer, auth.RoleOperator}},
		},
		{
			name:   "roles as a comma-separated string",
			claims: with(base, "roles", "viewer, operator,,admin"),
			want:   auth.Principal{Subject: "alice", Org: "acme", Roles: []string{auth.RoleViewer, auth.RoleOperator, auth.RoleAdmin}},
		},
		{
			name:   "custom subject claim",
			cfg:    func(c *auth.Config) { c.SubjectClaim = "preferred_username" },
			claims: with(base, "preferred_username", "alice.smith"),
			want:   auth.Principal{Subject: "alice.smith", Org: "acme", Roles: []string{auth.RoleViewer}},
		},
		{
			name:   "no org claim (an admin)",
			claims: with(base, "org_id", nil, "roles", []string{auth.RoleAdmin}),
			want:   auth.Principal{Subject: "alice", Roles: []string{auth.RoleAdmin}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := idp.Config()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			v := newVerifier(t, cfg)
			p, err := v.Verify(context.Background(), idp.Sign(tc.claims))
			if err != nil {
				t.Fatalf("Verify = %v", err)
			}
			if p.ExpiresAt.IsZero() {
				t.Error("Verify: the principal carries no expiry")
			}
			got := *p
			got.ExpiresAt = time.Time{} // the claims' exp, checked above
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Verify = %+v; want %+v", got, tc.want)
			}
		})
	}
}

// TestAlgorithmAllowlist: a token in an algorithm the configuration does
// not list is refused even though its key is trusted.
func TestAlgorithmAllowlist(t *testing.T) {
	idp := authtest.NewIdP(t)
	cfg := idp.Config()
	cfg.Algorithms = []string{"ES256"}
	v := newVerifier(t, cfg)
	claims := authtest.Claims("alice", "acme", auth.RoleViewer)
	ctx := context.Background()
	tok := idp.Sign(claims)
	_, err := v.Verify(ctx, tok)
	checkRefusal(t, tok, err, auth.ReasonAlgorithm)
	if _, err := v.Verify(ctx, idp.Sign(claims, authtest.WithKey(authtest.ECKeyID))); err != nil {
		t.Fatalf("Verify(ES256) = %v", err)
	}
}

// TestConfigErrors: configurations NewVerifier refuses.
func TestConfigErrors(t *testing.T) {
	idp := authtest.NewIdP(t)
	garbage := t.TempDir() + "/garbage.pem"
	if err := os.WriteFile(garbage, []byte("not a key"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  func(*auth.Config)
		want string // in the error
	}{
		{name: "no keys", cfg: func(c *auth.Config) { *c = auth.Config{} }, want: "no token keys"},
		{name: "HS256", cfg: func(c *auth.Config) { c.Algorithms = []string{"RS256", "HS256"} }, want: `"HS256" refused`},
		{name: "hs512 in lower case", cfg: func(c *auth.Config) { c.Algorithms = []string{"hs512"} }, want: "refused"},
		{name: "none", cfg: func(c *auth.Config) { c.Algorithms = []string{"none"} }, want: `"none" refused`},
		{name: "unknown algorithm", cfg: func(c *auth.Config) { c.Algorithms = []string{"RS1024"} }, want: "unknown algorithm"},
		{name: "JWKS without audience", cfg: func(c *auth.Config) { c.Audience = "" }, want: "audience is required"},
		{name: "JWKS over plain http", cfg: func(c *auth.Config) { c.JWKSURL = "http://idp.example.com/jwks" }, want: "must be https"},
		{name: "JWKS URL not http", cfg: func(c *auth.Config) { c.JWKSURL = "file:///etc/jwks.json" }, want: "https://"},
		{name: "missing CA file", cfg: func(c *auth.Config) { c.JWKSCAFile = "/nonexistent/ca.pem" }, want: "CA file"},
		{name: "missing key file", cfg: func(c *auth.Config) { c.KeyFiles = []string{"/nonexistent/key.pem"} }, want: "no such file"},
		{name: "key file not a key", cfg: func(c *auth.Config) { c.KeyFiles = []string{garbage} }, want: "garbage.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := idp.Config()
			tc.cfg(&cfg)
			v, err := auth.NewVerifier(context.Background(), cfg)
			if err == nil {
				v.Close()
				t.Fatalf("NewVerifier = nil error; want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewVerifier = %v; want it to contain %q", err, tc.want)
			}
		})
	}
}

// BenchmarkVerify measures one verification with cached keys.
func BenchmarkVerify(b *testing.B) {
	idp := authtest.NewIdP(b)
	v := newVerifier(b, idp.Config())
	claims := authtest.Claims("alice", "acme", auth.RoleOperator)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		kid  string
	}{
		{"ES256", authtest.ECKeyID},
		{"RS256", authtest.RSAKeyID},
		{"EdDSA", authtest.Ed25519KeyID},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tok := idp.Sign(claims, authtest.WithKey(bc.kid))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
