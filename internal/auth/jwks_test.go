package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
)

// TestUnknownKidRefetchesOnce: a kid the verifier does not hold sends for
// the JWKS once, then is refused; more bogus kids within
// MinRefreshInterval do not fetch again, however many and however
// concurrent; after the interval one more fetch is allowed.
func TestUnknownKidRefetchesOnce(t *testing.T) {
	idp := authtest.NewIdP(t)
	clk := newClock()
	cfg := idp.Config()
	cfg.Clock = clk
	v := newVerifier(t, cfg)
	claims := authtest.Claims("alice", "acme", auth.RoleViewer)
	ctx := context.Background()

	if got := idp.Fetches(); got != 1 {
		t.Fatalf("fetches after NewVerifier = %d; want 1", got)
	}
	bogus := func(kid string) {
		t.Helper()
		tok := idp.Sign(claims, authtest.WithKID(kid))
		_, err := v.Verify(ctx, tok)
		if auth.ReasonOf(err) != auth.ReasonUnknownKey {
			t.Fatalf("Verify(kid %q) = %v; want %q", kid, err, auth.ReasonUnknownKey)
		}
	}
	bogus("bogus-1")
	if got := idp.Fetches(); got != 2 {
		t.Fatalf("fetches after an unknown kid = %d; want 2 (one refresh)", got)
	}
	bogus("bogus-2")
	clk.Advance(auth.DefaultMinRefreshInterval - time.Second)
	bogus("bogus-3")
	if got := idp.Fetches(); got != 2 {
		t.Fatalf("fetches after more unknown kids within MinRefreshInterval = %d; want still 2", got)
	}

	// A flood after the interval: one fetch, shared.
	clk.Advance(2 * time.Second)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			tok := idp.Sign(claims, authtest.WithKID("flood-"+string(rune('a'+i))))
			if _, err := v.Verify(ctx, tok); auth.ReasonOf(err) != auth.ReasonUnknownKey {
				t.Errorf("Verify(flood) = %v; want %q", err, auth.ReasonUnknownKey)
			}
		})
	}
	wg.Wait()
	if got := idp.Fetches(); got != 3 {
		t.Fatalf("fetches after a flood of unknown kids = %d; want 3", got)
	}

	// Known kids never fetch.
	if _, err := v.Verify(ctx, idp.Sign(claims)); err != nil {
		t.Fatalf("Verify(good) = %v", err)
	}
	if got := idp.Fetches(); got != 3 {
		t.Errorf("fetches after a good token = %d; want 3", got)
	}
}

// TestKeyRotation: the IdP rotates its signing key mid-run. The new key's
// tokens are accepted without a restart (an unknown kid refreshes the
// JWKS), the old key's tokens stay good until the old key is retired and
// the verifier has refreshed.
func TestKeyRotation(t *testing.T) {
	idp := authtest.NewIdP(t)
	clk := newClock()
	cfg := idp.Config()
	cfg.Clock = clk
	v := newVerifier(t, cfg)
	ctx := context.Background()
	claims := authtest.Claims("alice", "acme", auth.RoleViewer)

	oldTok := idp.Sign(claims)
	if _, err := v.Verify(ctx, oldTok); err != nil {
		t.Fatalf("Verify(old key) before rotation = %v", err)
	}
	oldKID := idp.SigningKeyID()
	newKID := idp.Rotate()
	newTok := idp.Sign(claims)
	if !strings.Contains(newKID, "rotated") || newKID == oldKID {
		t.Fatalf("Rotate() = %q; want a new kid", newKID)
	}
	before := idp.Fetches()
	if _, err := v.Verify(ctx, newTok); err != nil {
		t.Fatalf("Verify(new key) after rotation = %v; want accepted after a refresh", err)
	}
	if got := idp.Fetches(); got != before+1 {
		t.Errorf("fetches for the new kid = %d; want %d", got, before+1)
	}
	if _, err := v.Verify(ctx, oldTok); err != nil {
		t.Fatalf("Verify(old key) while still published = %v; want accepted", err)
	}

	idp.Retire(oldKID)
	// Until the verifier refreshes, it still holds the old key.
	if _, err := v.Verify(ctx, oldTok); err != nil {
		t.Fatalf("Verify(old key) retired but not yet refreshed = %v; want accepted", err)
	}
	if err := v.Refresh(ctx); err != nil {
		t.Fatalf("Refresh = %v", err)
	}
	_, err := v.Verify(ctx, oldTok)
	checkRefusal(t, oldTok, err, auth.ReasonUnknownKey)
	if _, err := v.Verify(ctx, newTok); err != nil {
		t.Fatalf("Verify(new key) after retiring the old = %v", err)
	}
}

// handTicker is a Config.NewTicker ticked by the test. Its channel is
// unbuffered: a tick is handed over only when the refresh loop takes it,
// so a second tick taken proves the fetch of the first has finished.
type handTicker struct {
	c       chan time.Time
	mu      sync.Mutex
	every   time.Duration
	stopped bool
}

func newHandTicker() *handTicker { return &handTicker{c: make(chan time.Time)} }

func (h *handTicker) New(d time.Duration) (<-chan time.Time, func()) {
	h.mu.Lock()
	h.every = d
	h.mu.Unlock()
	return h.c, func() {
		h.mu.Lock()
		h.stopped = true
		h.mu.Unlock()
	}
}

// tick hands a tick to the refresh loop, failing the test if the loop
// does not take it within 10 s.
func (h *handTicker) tick(t *testing.T) {
	t.Helper()
	select {
	case h.c <- time.Now():
	case <-time.After(10 * time.Second):
		t.Fatal("the refresh loop took no tick within 10 s")
	}
}

func (h *handTicker) isStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// TestBackgroundRefresh: the periodic refresh drops a retired key by
// itself, every RefreshInterval, and Close stops it: the ticker is stopped
// and no tick is taken any more.
func TestBackgroundRefresh(t *testing.T) {
	idp := authtest.NewIdP(t)
	ticker := newHandTicker()
	cfg := idp.Config()
	cfg.RefreshInterval = 42 * time.Minute
	cfg.NewTicker = ticker.New
	v := newVerifier(t, cfg)
	if ticker.every != cfg.RefreshInterval {
		t.Errorf("ticker every %v; want RefreshInterval %v", ticker.every, cfg.RefreshInterval)
	}
	ctx := context.Background()
	claims := authtest.Claims("alice", "acme", auth.RoleViewer)
	oldTok := idp.Sign(claims)
	oldKID := idp.SigningKeyID()
	idp.Rotate()
	idp.Retire(oldKID)
	if _, err := v.Verify(ctx, oldTok); err != nil {
		t.Fatalf("Verify(retired key) before any refresh = %v; want accepted (the key is still held)", err)
	}
	before := idp.Fetches()
	ticker.tick(t) // the loop fetches…
	ticker.tick(t) // …and is back for the next tick: that fetch is done
	_, err := v.Verify(ctx, oldTok)
	checkRefusal(t, oldTok, err, auth.ReasonUnknownKey)
	if got := idp.Fetches(); got < before+1 {
		t.Errorf("fetches = %d after a tick; want at least %d", got, before+1)
	}

	v.Close()
	if !ticker.isStopped() {
		t.Error("Close returned with the refresh's ticker running")
	}
	// The loop is gone: nobody takes a tick (it would, waiting in its
	// select, were it still running).
	select {
	case ticker.c <- time.Now():
		t.Error("a tick was taken after Close: the refresh goes on")
	default:
	}
}

// TestJWKSUnavailable: a failed first fetch is an error unless
// AllowStartWithoutKeys; then tokens are refused until the IdP answers,
// and a failed refresh keeps the keys already held.
func TestJWKSUnavailable(t *testing.T) {
	idp := authtest.NewIdP(t)
	clk := newClock()
	cfg := idp.Config()
	cfg.Clock = clk
	ctx := context.Background()
	tok := idp.Sign(authtest.Claims("alice", "acme", auth.RoleViewer))

	idp.SetFailing(true)
	if v, err := auth.NewVerifier(ctx, cfg); err == nil {
		v.Close()
		t.Fatal("NewVerifier with the IdP down = nil error; want one")
	} else if !strings.Contains(err.Error(), "503") {
		t.Errorf("NewVerifier with the IdP down = %v; want the status in it", err)
	}

	cfg.AllowStartWithoutKeys = true
	v := newVerifier(t, cfg)
	_, err := v.Verify(ctx, tok)
	checkRefusal(t, tok, err, auth.ReasonUnknownKey)

	idp.SetFailing(false)
	clk.Advance(auth.DefaultMinRefreshInterval)
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatalf("Verify once the IdP is back = %v; want accepted", err)
	}

	idp.SetFailing(true)
	if err := v.Refresh(ctx); err == nil {
		t.Error("Refresh with the IdP down = nil; want an error")
	}
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatalf("Verify after a failed refresh = %v; want the held keys to stay", err)
	}
}

// TestJWKSOverTLS: an IdP behind a private CA is trusted with JWKSCAFile,
// and not without.
func TestJWKSOverTLS(t *testing.T) {
	idp := authtest.NewIdP(t, authtest.WithTLS())
	ctx := context.Background()
	v := newVerifier(t, idp.Config())
	if _, err := v.Verify(ctx, idp.Sign(authtest.Claims("alice", "acme", auth.RoleViewer))); err != nil {
		t.Fatalf("Verify = %v", err)
	}
	cfg := idp.Config()
	cfg.JWKSCAFile = ""
	if v, err := auth.NewVerifier(ctx, cfg); err == nil {
		v.Close()
		t.Fatal("NewVerifier without the IdP's CA = nil error; want a certificate error")
	}
}

// TestJWKSRedirectToHTTP: a redirect may not take the JWKS fetch to plain
// http.
func TestJWKSRedirectToHTTP(t *testing.T) {
	srv := httptest.NewServer(http.RedirectHandler("http://idp.example.com/jwks", http.StatusFound))
	t.Cleanup(srv.Close)
	cfg := auth.Config{JWKSURL: srv.URL + "/jwks", Audience: authtest.Audience}
	v, err := auth.NewVerifier(context.Background(), cfg)
	if err == nil {
		v.Close()
		t.Fatal("NewVerifier following a redirect to http = nil error; want one")
	}
	if !strings.Contains(err.Error(), "must be https") {
		t.Errorf("NewVerifier = %v; want the redirect refused", err)
	}
}
