package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
)

// localVerifier trusts li as the server does when no IdP is configured.
func localVerifier(t *testing.T, li *auth.LocalIssuer) *auth.Verifier {
	t.Helper()
	return newVerifier(t, auth.Config{
		KeyFiles: []string{li.PublicKeyFile()},
		Issuer:   auth.LocalIssuerName,
		Audience: auth.LocalAudience,
	})
}

// TestLocalIssuer: the key is made once and kept; its tokens verify.
func TestLocalIssuer(t *testing.T) {
	dir := auth.LocalIssuerDir(t.TempDir())
	li, err := auth.EnsureLocalIssuer(dir)
	if err != nil {
		t.Fatalf("EnsureLocalIssuer (new) = %v", err)
	}
	keyFile := filepath.Join(dir, "signing-key.pem")
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("signing key mode = %04o; want 0600", perm)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("issuer dir = %v, %v; want mode 0700", fi.Mode(), err)
	}
	if got, want := li.PublicKeyFile(), filepath.Join(dir, "signing-key.pub.pem"); got != want {
		t.Errorf("PublicKeyFile() = %q; want %q", got, want)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}

	again, err := auth.EnsureLocalIssuer(dir)
	if err != nil {
		t.Fatalf("EnsureLocalIssuer (existing) = %v", err)
	}
	if again.KeyID() != li.KeyID() {
		t.Errorf("KeyID after reload = %q; want the same key's %q", again.KeyID(), li.KeyID())
	}
	if after, _ := os.ReadFile(keyFile); string(after) != string(keyPEM) {
		t.Error("signing key file changed on the second EnsureLocalIssuer")
	}

	// A token from the first instance verifies with the public key the
	// second one wrote: the same key.
	tok, err := li.Mint("alice", "acme", []string{auth.RoleOperator}, time.Hour)
	if err != nil {
		t.Fatalf("Mint = %v", err)
	}
	v := localVerifier(t, again)
	p, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatalf("Verify(minted) = %v", err)
	}
	want := auth.Principal{Subject: "alice", Org: "acme", Roles: []string{auth.RoleOperator}}
	got := *p
	if got.TokenID == "" {
		t.Error("Verify(minted): no TokenID; every local token has a jti, so that it can be revoked")
	}
	got.ExpiresAt, got.TokenID = time.Time{}, "" // checked on their own
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Verify(minted) = %+v; want %+v", got, want)
	}
}

// TestLocalIssuerConcurrentCreate: processes racing to create the key
// all end up with the one on disk.
func TestLocalIssuerConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	kids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range kids {
		wg.Go(func() {
			li, err := auth.EnsureLocalIssuer(dir)
			if err != nil {
				t.Errorf("EnsureLocalIssuer = %v", err)
				return
			}
			kids[i] = li.KeyID()
		})
	}
	wg.Wait()
	for _, k := range kids[1:] {
		if k != kids[0] {
			t.Fatalf("key IDs = %q; want all the same", kids)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("issuer dir holds %d files; want the key and the public key only", len(entries))
	}
}

// TestLocalIssuerRefusals: Mint's and EnsureLocalIssuer's errors.
func TestLocalIssuerRefusals(t *testing.T) {
	dir := t.TempDir()
	li, err := auth.EnsureLocalIssuer(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		subject string
		org     string
		roles   []string
		ttl     time.Duration
		want    string
	}{
		{name: "no subject", org: "acme", roles: []string{auth.RoleViewer}, ttl: time.Hour, want: "no subject"},
		{name: "no lifetime", subject: "a", org: "acme", roles: []string{auth.RoleViewer}, want: "must be positive"},
		{name: "no roles", subject: "a", org: "acme", ttl: time.Hour, want: "no roles"},
		{name: "unknown role", subject: "a", org: "acme", roles: []string{"root"}, ttl: time.Hour, want: `unknown role "root"`},
		{name: "viewer without org", subject: "a", roles: []string{auth.RoleViewer}, ttl: time.Hour, want: "needs an organisation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := li.Mint(tc.subject, tc.org, tc.roles, tc.ttl)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Mint = %q, %v; want an error containing %q", tok, err, tc.want)
			}
		})
	}

	if err := os.Chmod(filepath.Join(dir, "signing-key.pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.EnsureLocalIssuer(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("EnsureLocalIssuer with a world-readable key = %v; want a refusal", err)
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "signing-key.pem"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.EnsureLocalIssuer(bad); err == nil {
		t.Error("EnsureLocalIssuer with a junk key file = nil error; want one")
	}
}

// localKey reads the local issuer's private key from dir, to sign tokens
// the issuer would not (another kid, changed claims).
func localKey(t *testing.T, dir string) *ecdsa.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "signing-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("signing key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(*ecdsa.PrivateKey)
}

// TestLocalTokenKeyID: the local issuer's key is known by its kid (its
// thumbprint). A token signed by that key but naming another kid is
// refused as an unknown key, as docs/auth.md says; a token that was
// changed after signing is a bad signature, not an unknown key.
func TestLocalTokenKeyID(t *testing.T) {
	dir := t.TempDir()
	li, err := auth.EnsureLocalIssuer(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := localVerifier(t, li)
	key := localKey(t, dir)
	minted, err := li.Mint("olga", "acme", []string{auth.RoleOperator}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	claims := map[string]any{"iss": auth.LocalIssuerName, "aud": []string{auth.LocalAudience}, "sub": "olga",
		"org_id": "acme", "roles": []string{auth.RoleOperator}, "iat": now, "exp": now + 3600}
	tamper := func(tok string) string {
		parts := strings.Split(tok, ".")
		parts[1] = authtest.Segment(mustJSON(t, with(claims, "roles", []string{auth.RoleAdmin})))
		return strings.Join(parts, ".")
	}
	for _, tc := range []struct {
		name  string
		token string
		want  auth.Reason // "" means accepted
	}{
		{name: "minted", token: minted},
		{name: "the key's own kid", token: signWithEC(t, key, map[string]any{"alg": "ES256", "kid": li.KeyID()}, claims)},
		{name: "no kid: tried against every key", token: signWithEC(t, key, map[string]any{"alg": "ES256"}, claims)},
		{name: "the local key, an unknown kid", token: signWithEC(t, key, map[string]any{"alg": "ES256", "kid": "someone-else"}, claims),
			want: auth.ReasonUnknownKey},
		{name: "minted, claims changed", token: tamper(minted), want: auth.ReasonBadSignature},
		{name: "no kid, claims changed", token: tamper(signWithEC(t, key, map[string]any{"alg": "ES256"}, claims)),
			want: auth.ReasonBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify(context.Background(), tc.token)
			if tc.want == "" {
				if err != nil || p.Subject != "olga" {
					t.Fatalf("Verify = %+v, %v; want olga accepted", p, err)
				}
				return
			}
			checkRefusal(t, tc.token, err, tc.want)
		})
	}
}
