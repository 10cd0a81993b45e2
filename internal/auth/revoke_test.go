package auth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
	"github.com/anvilproj/anvil/internal/clock"
)

// revokeEnv is a local issuer and a verifier of its tokens that reads the
// revocation list in the same directory, on a clock the test advances.
type revokeEnv struct {
	li    *auth.LocalIssuer
	list  string
	clock *clock.Fake
	v     *auth.Verifier
	logs  *strings.Builder
}

func newRevokeEnv(t *testing.T) *revokeEnv {
	t.Helper()
	data := t.TempDir()
	li, err := auth.EnsureLocalIssuer(auth.LocalIssuerDir(data))
	if err != nil {
		t.Fatal(err)
	}
	e := &revokeEnv{li: li, list: auth.RevocationFile(data), clock: newClock(), logs: &strings.Builder{}}
	e.v = newVerifier(t, auth.Config{KeyFiles: []string{li.PublicKeyFile()}, RevocationFile: e.list, Clock: e.clock,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: e.logs}, nil))})
	return e
}

// lockedWriter serialises writes to w (the verifier logs from callers'
// goroutines).
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (e *revokeEnv) mint(t *testing.T, sub string) string {
	t.Helper()
	tok, err := e.li.Mint(sub, "acme", []string{auth.RoleOperator}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *revokeEnv) revoke(t *testing.T, tok, reason string) {
	t.Helper()
	r, err := auth.RevocationOf(tok)
	if err != nil {
		t.Fatalf("RevocationOf: %v", err)
	}
	r.Reason = reason
	if err := auth.Revoke(e.list, r, e.clock.Now()); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
}

// TestRevoke: a revoked token is refused as revoked once the verifier has
// read the list again (at most a second later), also when it was cached;
// other tokens of the same key still pass.
func TestRevoke(t *testing.T) {
	e := newRevokeEnv(t)
	cv := auth.NewCachingVerifier(e.v, time.Hour, 0)
	ctx := context.Background()
	leaked, kept := e.mint(t, "alice"), e.mint(t, "bob")
	for _, tok := range []string{leaked, kept} {
		if _, err := cv.Verify(ctx, tok); err != nil {
			t.Fatalf("before revocation: %v", err)
		}
	}
	e.revoke(t, leaked, "leaked in a ticket")
	e.clock.Advance(2 * time.Second)
	for name, v := range map[string]interface {
		Verify(context.Context, string) (*auth.Principal, error)
	}{"verifier": e.v, "cached": cv} {
		_, err := v.Verify(ctx, leaked)
		checkRefusal(t, leaked, err, auth.ReasonRevoked)
		if p, err := v.Verify(ctx, kept); err != nil || p.Subject != "bob" {
			t.Errorf("%s: the token not revoked: %+v, %v; want accepted", name, p, err)
		}
	}
	b, err := os.ReadFile(e.list)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"reason": "leaked in a ticket"`) || !strings.Contains(string(b), `"sub": "alice"`) {
		t.Errorf("revocation list:\n%s\nwant alice's entry with its reason", b)
	}
	if fi, err := os.Stat(e.list); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("revocation list mode: %v, %v; want 0600", fi.Mode(), err)
	}
}

// TestRevokeKeepsListUntilExpiry: an entry is dropped once its token has
// expired (no verifier accepts it any more), not before; revoking the
// same token twice keeps one entry.
func TestRevokeKeepsListUntilExpiry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "revoked.json")
	now := time.Now()
	add := func(id string, exp time.Time, at time.Time) {
		t.Helper()
		if err := auth.Revoke(path, auth.Revocation{ID: id, Expires: exp}, at); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var l struct{ Revoked []auth.Revocation }
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range l.Revoked {
			out = append(out, r.ID)
		}
		return out
	}
	add("short", now.Add(time.Minute), now)
	add("long", now.Add(time.Hour), now)
	add("long", now.Add(time.Hour), now)
	if got := ids(); !reflect.DeepEqual(got, []string{"short", "long"}) {
		t.Errorf("list = %q; want short, long", got)
	}
	add("later", now.Add(2*time.Hour), now.Add(2*time.Minute))
	if got := ids(); !reflect.DeepEqual(got, []string{"long", "later"}) {
		t.Errorf("list two minutes on = %q; want the expired short one dropped", got)
	}
	if err := auth.Revoke(path, auth.Revocation{ID: "no-exp"}, now); err == nil {
		t.Error("Revoke without an exp succeeded")
	}
}

// TestRevokeConcurrent: revocations made at the same time (the server's at
// start, an operator's) all land in the list.
func TestRevokeConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "revoked.json")
	now := time.Now()
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := auth.Revoke(path, auth.Revocation{ID: fmt.Sprint("t", i), Expires: now.Add(time.Hour)}, now); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !strings.Contains(string(b), fmt.Sprintf(`"jti": "t%d"`, i)) {
			t.Errorf("revocation t%d lost:\n%s", i, b)
		}
	}
}

// TestRevocationListErrors: a list that cannot be read stops a verifier
// from starting, is never overwritten by Revoke, and, when it goes bad
// under a running verifier, leaves the previous list in force.
func TestRevocationListErrors(t *testing.T) {
	e := newRevokeEnv(t)
	ctx := context.Background()
	leaked := e.mint(t, "alice")
	e.revoke(t, leaked, "")
	e.clock.Advance(2 * time.Second)
	_, err := e.v.Verify(ctx, leaked)
	checkRefusal(t, leaked, err, auth.ReasonRevoked)

	garbage := []byte(`{"revoked":[{"jti":"x"}]}`) // no exp
	if err := os.WriteFile(e.list, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	_, err = e.v.Verify(ctx, leaked)
	checkRefusal(t, leaked, err, auth.ReasonRevoked)
	if !strings.Contains(e.logs.String(), "keeping the previous list") {
		t.Errorf("a bad list was not logged:\n%s", e.logs)
	}
	if err := auth.Revoke(e.list, auth.Revocation{ID: "y", Expires: time.Now().Add(time.Hour)}, time.Now()); err == nil ||
		!strings.Contains(err.Error(), "jti and exp are required") {
		t.Errorf("Revoke onto a bad list = %v; want a refusal naming the problem", err)
	}
	if b, _ := os.ReadFile(e.list); string(b) != string(garbage) {
		t.Errorf("Revoke replaced a list it could not read: %s", b)
	}
	_, err = auth.NewVerifier(ctx, auth.Config{KeyFiles: []string{e.li.PublicKeyFile()}, RevocationFile: e.list})
	if err == nil || !strings.Contains(err.Error(), e.list) {
		t.Errorf("NewVerifier with a bad list = %v; want an error naming it", err)
	}

	if err := os.Remove(e.list); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	if _, err := e.v.Verify(ctx, leaked); err != nil {
		t.Errorf("after the list was removed: %v; want accepted (nothing is revoked)", err)
	}
}

// TestRevocationOf: what a token's revocation records, and the tokens
// that cannot be revoked alone.
func TestRevocationOf(t *testing.T) {
	idp := authtest.NewIdP(t)
	claims := authtest.Claims("alice", "acme", auth.RoleViewer)
	r, err := auth.RevocationOf(idp.Sign(with(claims, "jti", "abc")))
	exp := time.Unix(claims["exp"].(int64), 0)
	if err != nil || r.ID != "abc" || r.Subject != "alice" || r.Issuer != authtest.Issuer || !r.Expires.Equal(exp) {
		t.Errorf("RevocationOf = %+v, %v; want jti abc of alice, expiring %v", r, err, exp)
	}
	for _, tc := range []struct{ name, token, want string }{
		{"no jti", idp.Sign(claims), "no jti"},
		{"no exp", idp.Sign(with(claims, "jti", "abc", "exp", nil)), "no exp"},
		{"jti a number", idp.Sign(with(claims, "jti", 7)), "malformed"},
		{"not a JWS", "abc", "malformed"},
	} {
		if _, err := auth.RevocationOf(tc.token); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: RevocationOf = %v; want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// FuzzParseRevocations feeds arbitrary files to a verifier's revocation
// list. The properties: it never panics; a list it accepts keeps every
// entry it reads, so Revoke's rewrite of it (one entry added) holds each
// of them again plus the new one; and a list it refuses is left as it was.
func FuzzParseRevocations(f *testing.F) {
	for _, seed := range []string{
		``,   // empty: nothing revoked
		`{}`, // no list
		`{"revoked":[]}`,
		`{"revoked":[{"jti":"a","exp":"2030-01-01T00:00:00Z","revokedAt":"2026-01-01T00:00:00Z"}]}`,
		`{"revoked":[{"jti":"a","iss":"anvil-local","sub":"admin","exp":"2030-01-01T00:00:00Z","revokedAt":"2026-01-01T00:00:00Z","reason":"replaced"}]}`,
		`{"revoked":[{"jti":"a"}]}`,                                    // no exp
		`{"revoked":[{"exp":"2030-01-01T00:00:00Z"}]}`,                 // no jti
		`{"revoked":[{"jti":"a","exp":"2030-01-01T00:00:00Z","x":1}]}`, // unknown field
		`{"revoked":[]} {}`,                                            // trailing data
		`{"revoked":{}}`,                                               // wrong type
		`[{"jti":"a"}]`,                                                // not an object
		"\xff\xfe",                                                     // not UTF-8
	} {
		f.Add([]byte(seed))
	}
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "revoked.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		var before struct{ Revoked []auth.Revocation }
		parsed := json.Unmarshal(data, &before) == nil
		err := auth.Revoke(path, auth.Revocation{ID: "fuzz-new", Expires: now.Add(time.Hour)}, now)
		after, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			if string(after) != string(data) {
				t.Fatalf("Revoke refused the list (%v) but changed it", err)
			}
			return
		}
		var got struct{ Revoked []auth.Revocation }
		if err := json.Unmarshal(after, &got); err != nil {
			t.Fatalf("Revoke wrote a list that does not parse: %v\n%s", err, after)
		}
		want := map[string]bool{"fuzz-new": true}
		if parsed {
			for _, r := range before.Revoked {
				if !r.Expires.Before(now) {
					want[r.ID] = true
				}
			}
		}
		have := map[string]bool{}
		for _, r := range got.Revoked {
			have[r.ID] = true
		}
		if !reflect.DeepEqual(have, want) {
			t.Fatalf("list after Revoke holds %v; want %v (from %q)", have, want, data)
		}
	})
}
