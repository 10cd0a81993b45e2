package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
)

func TestCachingVerifier(t *testing.T) {
	ctx := context.Background()
	idp := authtest.NewIdP(t)
	clk := newClock()
	cfg := idp.Config()
	cfg.Clock = clk
	v := newVerifier(t, cfg)
	c := auth.NewCachingVerifier(v, time.Minute, 2)

	oldKID := idp.SigningKeyID()
	tok := idp.Sign(authtest.Claims("alice", "acme", auth.RoleViewer))
	p, err := c.Verify(ctx, tok)
	if err != nil || p.Subject != "alice" || p.Org != "acme" {
		t.Fatalf("first verification: %+v, %v", p, err)
	}

	// The key is retired: the verifier refuses the token at once, the
	// cache keeps trusting it only until its TTL ends.
	idp.Rotate()
	idp.Retire(oldKID)
	if err := v.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, tok); err == nil {
		t.Fatal("the verifier accepts a token of a retired key")
	}
	if _, err := c.Verify(ctx, tok); err != nil {
		t.Errorf("within the TTL the cached token was refused: %v", err)
	}
	clk.Advance(61 * time.Second)
	if _, err := c.Verify(ctx, tok); auth.ReasonOf(err) != auth.ReasonUnknownKey {
		t.Errorf("after the TTL: %v; want unknown key", err)
	}

	// A token expiring before the TTL is trusted only until its exp.
	claims := authtest.Claims("bob", "acme", auth.RoleViewer)
	claims["iat"] = clk.Now().Unix()
	claims["exp"] = clk.Now().Add(10 * time.Second).Unix()
	short := idp.Sign(claims)
	if _, err := c.Verify(ctx, short); err != nil {
		t.Fatal(err)
	}
	clk.Advance(45 * time.Second) // past exp and the 30 s skew, within the TTL
	if _, err := c.Verify(ctx, short); auth.ReasonOf(err) != auth.ReasonExpired {
		t.Errorf("after exp: %v; want expired", err)
	}

	// Refused tokens are not remembered; a full cache is emptied, not
	// grown.
	bad := tok[:len(tok)-4] + "AAAA"
	for range 3 {
		if _, err := c.Verify(ctx, bad); err == nil {
			t.Fatal("a tampered token was accepted")
		}
	}
	for i := range 5 {
		tk := idp.Sign(authtest.Claims("u"+string(rune('a'+i)), "acme", auth.RoleViewer))
		if _, err := c.Verify(ctx, tk); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
}
