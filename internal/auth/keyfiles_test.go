package auth_test

import (
	"context"
	"crypto"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
)

// writeFile writes data to path with a modification time of mod, so that
// a change is seen whatever the file system's time resolution.
func writeFile(t *testing.T, path string, data []byte, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// TestKeyFiles: PEM and JWKS files are trusted keys, without a JWKS URL.
func TestKeyFiles(t *testing.T) {
	idp := authtest.NewIdP(t)
	dir := t.TempDir()
	claims := authtest.Claims("alice", "acme", auth.RoleViewer)
	ecPEM := filepath.Join(dir, "ec.pem")
	rsaPEM := filepath.Join(dir, "rsa.pem")
	jwks := filepath.Join(dir, "jwks.json")
	now := time.Now()
	writeFile(t, ecPEM, idp.PublicKeyPEM(authtest.ECKeyID), now)
	writeFile(t, rsaPEM, idp.PublicKeyPEM(authtest.RSAKeyID), now)
	writeFile(t, jwks, idp.JWKS(), now)

	for _, tc := range []struct {
		name  string
		files []string
		token string
		want  auth.Reason
	}{
		// A PEM key has no kid of its own: it is known by its RFC 7638
		// thumbprint, and a token naming another kid is refused.
		{name: "PEM EC key, another kid", files: []string{ecPEM},
			token: idp.Sign(claims, authtest.WithKey(authtest.ECKeyID), authtest.WithKID("whatever")), want: auth.ReasonUnknownKey},
		{name: "PEM EC key, its thumbprint as kid", files: []string{ecPEM},
			token: idp.Sign(claims, authtest.WithKey(authtest.ECKeyID), authtest.WithKID(thumbprint(t, idp.PublicKey(authtest.ECKeyID))))},
		{name: "PEM EC key, thumbprint kid, claims changed", files: []string{ecPEM},
			token: tampered(t, idp.Sign(claims, authtest.WithKey(authtest.ECKeyID), authtest.WithKID(thumbprint(t, idp.PublicKey(authtest.ECKeyID))))),
			want:  auth.ReasonBadSignature},
		{name: "PEM EC key, no kid", files: []string{ecPEM},
			token: idp.Sign(claims, authtest.WithKey(authtest.ECKeyID), authtest.WithKID(""))},
		{name: "PEM RSA key, PS256 (no alg declared)", files: []string{rsaPEM},
			token: idp.Sign(claims, authtest.WithAlg("PS256"), authtest.WithKID(""))},
		{name: "PEM EC key, RS256 token", files: []string{ecPEM},
			token: idp.Sign(claims, authtest.WithKID("")), want: auth.ReasonAlgorithm},
		{name: "PEM EC key, RS256 token with a kid", files: []string{ecPEM},
			token: idp.Sign(claims), want: auth.ReasonUnknownKey},
		{name: "JWKS file", files: []string{jwks},
			token: idp.Sign(claims, authtest.WithKey(authtest.ECKeyID))},
		{name: "JWKS file, unknown kid", files: []string{jwks},
			token: idp.Sign(claims, authtest.WithKID("nope")), want: auth.ReasonUnknownKey},
		{name: "two files, no kid", files: []string{ecPEM, rsaPEM},
			token: idp.Sign(claims, authtest.WithKID(""))},
		{name: "two files, the RSA key's thumbprint", files: []string{ecPEM, rsaPEM},
			token: idp.Sign(claims, authtest.WithKID(thumbprint(t, idp.PublicKey(authtest.RSAKeyID))))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := auth.Config{KeyFiles: tc.files, Issuer: authtest.Issuer, Audience: authtest.Audience}
			v := newVerifier(t, cfg)
			_, err := v.Verify(context.Background(), tc.token)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Verify = %v; want accepted", err)
				}
				return
			}
			checkRefusal(t, tc.token, err, tc.want)
		})
	}
}

// thumbprint is pub's RFC 7638 SHA-256 thumbprint, base64url: the kid a
// key without one is known by.
func thumbprint(t testing.TB, pub crypto.PublicKey) string {
	t.Helper()
	k, err := jwk.FromRaw(pub)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return authtest.Segment(tp)
}

// tampered returns tok with its claims replaced (the admin role added),
// its header and signature kept.
func tampered(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	parts[1] = authtest.Segment(mustJSON(t, authtest.Claims("mallory", "acme", auth.RoleAdmin)))
	return strings.Join(parts, ".")
}

// TestKeyFileReload: a key file is read again when it changes, at most
// once a second; a file rewritten with garbage keeps its previous keys,
// and a removed file's keys are no longer trusted.
func TestKeyFileReload(t *testing.T) {
	idp := authtest.NewIdP(t)
	clk := newClock()
	path := filepath.Join(t.TempDir(), "key.pem")
	mod := time.Now().Add(-time.Hour)
	writeFile(t, path, idp.PublicKeyPEM(authtest.ECKeyID), mod)
	v := newVerifier(t, auth.Config{KeyFiles: []string{path}, Clock: clk})
	claims := authtest.Claims("alice", "acme", auth.RoleViewer)
	// Named by the thumbprint, as a PEM key is known; the JWKS knows the
	// same key as ECKeyID.
	ecTok := idp.Sign(claims, authtest.WithKey(authtest.ECKeyID), authtest.WithKID(thumbprint(t, idp.PublicKey(authtest.ECKeyID))))
	jwksTok := idp.Sign(claims, authtest.WithKey(authtest.ECKeyID))
	rsaTok := idp.Sign(claims, authtest.WithKID(""))
	ctx := context.Background()
	check := func(step, tok string, want auth.Reason) {
		t.Helper()
		_, err := v.Verify(ctx, tok)
		if got := auth.ReasonOf(err); got != want {
			t.Fatalf("%s: Verify reason = %q (%v); want %q", step, got, err, want)
		}
	}
	check("start", ecTok, "")
	check("start", rsaTok, auth.ReasonAlgorithm)

	mod = mod.Add(time.Minute)
	writeFile(t, path, idp.PublicKeyPEM(authtest.RSAKeyID), mod)
	check("changed, within a second of the last check", rsaTok, auth.ReasonAlgorithm)
	clk.Advance(2 * time.Second)
	check("changed, after a second", rsaTok, "")
	check("changed, after a second", ecTok, auth.ReasonUnknownKey) // the EC key's kid; only the RSA key is left

	mod = mod.Add(time.Minute)
	writeFile(t, path, []byte("-----BEGIN PUBLIC KEY-----\nhalf"), mod)
	clk.Advance(2 * time.Second)
	check("garbage", rsaTok, "")

	mod = mod.Add(time.Minute)
	writeFile(t, path, idp.JWKS(), mod)
	clk.Advance(2 * time.Second)
	check("now a JWKS", jwksTok, "")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	check("removed", jwksTok, auth.ReasonUnknownKey)
}

// TestJWKSAndKeyFile: keys from a JWKS URL and from a file are both
// trusted, as when an IdP is configured next to the local issuer.
func TestJWKSAndKeyFile(t *testing.T) {
	idp := authtest.NewIdP(t)
	li, err := auth.EnsureLocalIssuer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := idp.Config()
	cfg.Issuer = "" // two issuers
	cfg.KeyFiles = []string{li.PublicKeyFile()}
	v := newVerifier(t, cfg)
	ctx := context.Background()
	local, err := li.Mint("root", "", []string{auth.RoleAdmin}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{
		"IdP":   idp.Sign(authtest.Claims("alice", "acme", auth.RoleViewer)),
		"local": local,
	} {
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Errorf("Verify(%s token) = %v; want accepted", name, err)
		}
	}
}
