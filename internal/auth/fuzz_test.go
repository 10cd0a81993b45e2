package auth_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
		p, err := v.Verify(ctx, raw)
		if err == nil {
			if !genuine[raw] {
				t.Fatalf("Verify accepted a token nobody issued: %q", raw)
			}
			if p == nil || p.Subject == "" {
				t.Fatalf("Verify(genuine) = %+v, nil; want a principal", p)
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
