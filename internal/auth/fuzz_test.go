package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
)

// FuzzVerify feeds arbitrary strings to Verify. The properties: it never
// panics; it accepts nothing but the genuine tokens of the seed corpus
// (one token, one spelling: no mutation of a good token is good); every
// refusal is a *TokenError; and no refusal quotes the input back.
func FuzzVerify(f *testing.F) {
	idp := authtest.NewIdP(f)
	li, err := auth.EnsureLocalIssuer(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	cfg := idp.Config()
	cfg.Issuer = "" // the IdP's and the local issuer's tokens
	cfg.KeyFiles = []string{li.PublicKeyFile()}
	v := newVerifier(f, cfg)

	claims := authtest.Claims("alice", "acme", auth.RoleOperator)
	local, err := li.Mint("root", "", []string{auth.RoleAdmin}, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	genuine := map[string]bool{
		idp.Sign(claims): true,
		idp.Sign(claims, authtest.WithKey(authtest.ECKeyID)):      true,
		idp.Sign(claims, authtest.WithKey(authtest.Ed25519KeyID)): true,
		idp.Sign(claims, authtest.WithKID("")):                    true, // tried against every key
		local:                                                     true,
	}
	for tok := range genuine {
		f.Add(tok)
	}
	for _, seed := range []string{
		"",         // no token
		".",        // two empty parts
		"..",       // three empty parts
		"a.b.c",    // parts that are not JSON
		"e30.e30.", // {} header and payload, no signature
		authtest.SigningInput(f, map[string]any{"alg": "none"}, claims) + ".",                      // unsigned
		authtest.SigningInput(f, map[string]any{"alg": "HS256", "kid": "rsa-1"}, claims) + ".c2ln", // HMAC
		authtest.SigningInput(f, map[string]any{"alg": "RS256", "kid": "nope"}, claims) + ".c2ln",  // unknown kid
		authtest.SigningInput(f, map[string]any{"alg": "ES256", "crit": []string{"b64"}}, claims) + ".c2ln",
		idp.Sign(authtest.Claims("alice", "acme")) + "x",                 // trailing junk
		idp.Sign(map[string]any{"exp": 1, "sub": "x", "aud": "anvil"}),   // expired, validly signed
		idp.SignPayload([]byte(`[1,2,3]`)),                               // payload not an object
		idp.SignPayload([]byte(`{"exp":1e400,"sub":"x","aud":"anvil"}`)), // number out of range
		idp.SignPayload([]byte(`{"exp":9e300,"sub":{"a":1},"aud":["anvil",{}]}`)),
		strings.Repeat("A", 70_000), // too long
		"\xff\xfe.\x00.\x80",        // not UTF-8
	} {
		f.Add(seed)
	}

	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw string) {
		// RevocationOf reads the same tokens, unverified: it never
		// panics, and what it takes from a genuine token is its jti.
		if r, err := auth.RevocationOf(raw); err == nil && (r.ID == "" || r.Expires.IsZero()) {
			t.Fatalf("RevocationOf = %+v without a jti or an exp", r)
		}
		p, err := v.Verify(ctx, raw)
		if err == nil {
			if !genuine[raw] {
				t.Fatalf("Verify accepted a token nobody issued: %q", raw)
			}
			if p == nil || p.Subject == "" {
				t.Fatalf("Verify(genuine) = %+v, nil; want a principal", p)
			}
			if r, err := auth.RevocationOf(raw); p.TokenID != "" && (err != nil || r.ID != p.TokenID) {
				t.Fatalf("RevocationOf(genuine) = %+v, %v; want jti %q", r, err, p.TokenID)
			}
			return
		}
		if p != nil {
			t.Fatalf("Verify returned a principal with error %v", err)
		}
		if auth.ReasonOf(err) == "" {
			t.Fatalf("Verify error %v (%T) is not a *TokenError", err, err)
		}
		if len(raw) >= 16 && strings.Contains(err.Error(), raw) {
			t.Fatalf("Verify error quotes the input: %v", err)
		}
	})
}

// FuzzVerifySigned signs tokens with fuzzed headers, so that its properties
// reach past the signature check that FuzzVerify's arbitrary strings never
// pass (which is why FuzzVerify could not find that a trusted key verified
// a token naming another kid). Two keys are trusted: one from a PEM file,
// known by its RFC 7638 thumbprint, and one from a JWKS file under its own
// kid; a third is not. The properties:
//   - a token signed by a trusted key is accepted exactly when its header
//     names that key's kid or none;
//   - a refused token naming a kid no trusted key has is an unknown key;
//   - a token whose claims were changed after signing is never accepted,
//     and is a bad signature unless its kid is unknown.
func FuzzVerifySigned(f *testing.F) {
	dir := f.TempDir()
	pemKey, jwksKey, stranger := ecKey(f), ecKey(f), ecKey(f)
	pemFile, jwksFile := filepath.Join(dir, "key.pem"), filepath.Join(dir, "jwks.json")
	der, err := x509.MarshalPKIXPublicKey(&pemKey.PublicKey)
	if err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		f.Fatal(err)
	}
	const jwksKID = "jwks-1"
	jk, err := jwk.FromRaw(&jwksKey.PublicKey)
	if err != nil {
		f.Fatal(err)
	}
	if err := jk.Set(jwk.KeyIDKey, jwksKID); err != nil {
		f.Fatal(err)
	}
	set := jwk.NewSet()
	if err := set.AddKey(jk); err != nil {
		f.Fatal(err)
	}
	b, err := json.Marshal(set)
	if err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(jwksFile, b, 0o644); err != nil {
		f.Fatal(err)
	}
	v := newVerifier(f, auth.Config{KeyFiles: []string{pemFile, jwksFile}})
	pemKID := thumbprint(f, &pemKey.PublicKey)

	signers := []struct {
		key *ecdsa.PrivateKey
		kid string // the kid it is trusted under; "" for the stranger
	}{{pemKey, pemKID}, {jwksKey, jwksKID}, {stranger, ""}}
	known := map[string]bool{pemKID: true, jwksKID: true}

	// Seeds: each key under its own kid, no kid, the other key's kid and
	// one nobody has; unchanged and with changed claims.
	for i := range signers {
		for _, kid := range []string{pemKID, jwksKID, "", "someone-else"} {
			f.Add(kid, uint8(i), uint16(0))
			f.Add(kid, uint8(i), uint16(7))
		}
	}

	claims := authtest.Claims("alice", "acme", auth.RoleOperator)
	delete(claims, "iss") // the verifier checks no issuer
	f.Fuzz(func(t *testing.T, kid string, who uint8, flip uint16) {
		s := signers[int(who)%len(signers)]
		hdr := map[string]any{"alg": "ES256"}
		if kid != "" {
			hdr["kid"] = kid
		}
		tok := signWithEC(t, s.key, hdr, claims)
		if flip != 0 {
			// Change one bit of the signed claims, keeping header and
			// signature: what a forger who cannot sign does.
			parts := strings.Split(tok, ".")
			payload, err := base64.RawURLEncoding.DecodeString(parts[1])
			if err != nil {
				t.Fatal(err)
			}
			payload[int(flip)%len(payload)] ^= 1 << (flip % 8)
			parts[1] = authtest.Segment(payload)
			tok = strings.Join(parts, ".")
		}
		_, err := v.Verify(context.Background(), tok)
		genuine := s.kid != "" && (kid == "" || kid == s.kid)
		reason := auth.ReasonOf(err)
		switch {
		case flip == 0 && genuine:
			if err != nil {
				t.Fatalf("a token of a trusted key naming kid %q was refused: %v", kid, err)
			}
		case err == nil:
			t.Fatalf("accepted a token it must refuse (kid %q, signer %d, changed bit %d)", kid, who, flip)
		case kid != "" && !known[kid]:
			if reason != auth.ReasonUnknownKey {
				t.Fatalf("token naming the unknown kid %q: reason %q (%v); want %q", kid, reason, err, auth.ReasonUnknownKey)
			}
		case reason != auth.ReasonBadSignature:
			// The claims are read only once the signature verifies, so
			// a changed bit that breaks their JSON is a bad signature too.
			t.Fatalf("kid %q, signer %d, changed bit %d: reason %q (%v); want %q", kid, who, flip, reason, err, auth.ReasonBadSignature)
		}
	})
}

func ecKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
