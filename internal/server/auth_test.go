package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
)

// callJSON makes a Connect JSON call with an optional bearer token and
// returns the HTTP status and body.
func callJSON(t *testing.T, base, procedure, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const listHardware = "/anvil.v1.HardwareService/List"

func TestAuthWithIdentityProvider(t *testing.T) {
	idp := authtest.NewIdP(t)
	base, grpcAddr, _, _, logs := startWith(t, func(c *Config) {
		c.InsecureNoAuth = false
		c.Auth = idp.Config()
	})
	admin := idp.Sign(authtest.Claims("root", "", auth.RoleAdmin))
	viewer := idp.Sign(authtest.Claims("val", "acme", auth.RoleViewer))

	if code, body := callJSON(t, base, listHardware, "", `{}`); code != http.StatusUnauthorized || !strings.Contains(body, "unauthenticated") {
		t.Errorf("no token: %d %s; want 401 unauthenticated", code, body)
	}
	if code, body := callJSON(t, base, listHardware, "not.a.jwt", `{}`); code != http.StatusUnauthorized {
		t.Errorf("malformed token: %d %s; want 401", code, body)
	}
	if code, body := callJSON(t, base, listHardware, admin, `{}`); code != http.StatusOK {
		t.Errorf("admin: %d %s; want 200", code, body)
	}
	if code, body := callJSON(t, base, listHardware, viewer, `{"namespace":"globex"}`); code != http.StatusForbidden || !strings.Contains(body, `\"read\"`) && !strings.Contains(body, `"read"`) {
		t.Errorf("viewer of acme lists globex: %d %s; want 403 naming the read permission", code, body)
	}
	if code, body := callJSON(t, base, listHardware, viewer, `{"namespace":"acme"}`); code != http.StatusOK {
		t.Errorf("viewer of acme lists acme: %d %s; want 200", code, body)
	}

	// gRPC on the gRPC port: the same check.
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	hc := anvilv1connect.NewHardwareServiceClient(&http.Client{Transport: tr}, "http://"+grpcAddr, connect.WithGRPC())
	_, err := hc.List(context.Background(), connect.NewRequest(&v1.ListRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("gRPC without a token: %v; want UNAUTHENTICATED", err)
	}
	req := connect.NewRequest(&v1.ListRequest{})
	req.Header().Set("Authorization", "Bearer "+admin)
	if _, err := hc.List(context.Background(), req); err != nil {
		t.Errorf("gRPC with the admin's token: %v", err)
	}

	// The IdP rotates its key: a token of the new key is accepted at once
	// (the unknown kid makes the server fetch the JWKS again), and one of
	// the old key still works until it expires.
	idp.Rotate()
	fresh := idp.Sign(authtest.Claims("root", "", auth.RoleAdmin))
	if code, body := callJSON(t, base, listHardware, fresh, `{}`); code != http.StatusOK {
		t.Errorf("token of the rotated key: %d %s; want 200", code, body)
	}
	if code, body := callJSON(t, base, listHardware, admin, `{}`); code != http.StatusOK {
		t.Errorf("token of the old key after rotation: %d %s; want 200", code, body)
	}

	// The boot path needs no token.
	if code, _ := get(t, base+"/ipxe/binary/undionly.kpxe"); code != http.StatusOK {
		t.Errorf("boot file without a token: %d; want 200", code)
	}
	// Refusals are counted by reason.
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{`anvil_auth_tokens_refused_total{reason="no token"}`, `anvil_auth_tokens_refused_total{reason="malformed"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(logs.String(), "AUTHENTICATION IS OFF") {
		t.Error("the server says authentication is off while it is on")
	}
}

func TestAuthLocalIssuer(t *testing.T) {
	data := t.TempDir()
	base, _, _, _, _ := startWith(t, func(c *Config) {
		c.InsecureNoAuth = false
		c.DataDir = data
	})
	path := filepath.Join(data, "auth", "admin.token")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin token mode %v; want 0600", fi.Mode().Perm())
	}
	tok, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	admin := string(bytes.TrimSpace(tok))
	if code, body := callJSON(t, base, listHardware, "", `{}`); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %s; want 401", code, body)
	}
	if code, body := callJSON(t, base, listHardware, admin, `{}`); code != http.StatusOK {
		t.Errorf("the admin token: %d %s; want 200", code, body)
	}
	// anvil token create's tokens verify too.
	li, err := auth.EnsureLocalIssuer(auth.LocalIssuerDir(data))
	if err != nil {
		t.Fatal(err)
	}
	op, err := li.Mint("olga", "acme", []string{auth.RoleOperator}, 3600e9)
	if err != nil {
		t.Fatal(err)
	}
	const hwJSON = `{"hardware":{"metadata":{"namespace":"acme","name":"n1"},"spec":{"interfaces":[{"dhcp":{"mac":"52:54:00:00:00:01"}}]}}}`
	if code, body := callJSON(t, base, "/anvil.v1.HardwareService/Create", op, hwJSON); code != http.StatusForbidden {
		t.Errorf("operator creates hardware: %d %s; want 403", code, body)
	}
	if code, body := callJSON(t, base, "/anvil.v1.HardwareService/Create", admin, hwJSON); code != http.StatusOK {
		t.Errorf("admin creates hardware: %d %s; want 200", code, body)
	}
	// Both calls are in the audit log, with who made them and how they
	// ended, and the log is a file in the data directory.
	code, body := callJSON(t, base, "/anvil.v1.AuditService/List", admin, `{}`)
	if code != http.StatusOK || !strings.Contains(body, `"subject":"olga"`) || !strings.Contains(body, `"outcome":"permission_denied"`) ||
		!strings.Contains(body, `"subject":"admin"`) || !strings.Contains(body, `"outcome":"ok"`) {
		t.Errorf("audit list: %d %s; want olga's refused and admin's accepted create", code, body)
	}
	if b, err := os.ReadFile(filepath.Join(data, "audit", "audit.log")); err != nil || bytes.Count(b, []byte("\n")) != 2 {
		t.Errorf("audit file: %v, %q; want 2 records", err, b)
	}
}

func TestInsecureNoAuthIsLoud(t *testing.T) {
	base, _, _, _, logs := start(t) // start switches authentication off
	if code, body := callJSON(t, base, listHardware, "", `{}`); code != http.StatusOK {
		t.Errorf("no token with authentication off: %d %s; want 200", code, body)
	}
	if !strings.Contains(logs.String(), "AUTHENTICATION IS OFF") {
		t.Errorf("the log does not say authentication is off:\n%s", logs.String())
	}
}

// TestAdminTokenRotatesAtRestart: each start writes a new admin token and
// revokes the one it replaces, so a copy of an old admin token stops
// working at the next restart; tokens made with `anvil token create` are
// not touched, and one revoked while the server runs is refused within a
// second.
func TestAdminTokenRotatesAtRestart(t *testing.T) {
	data := t.TempDir()
	withAuth := func(c *Config) {
		c.InsecureNoAuth = false
		c.DataDir = data
	}
	adminToken := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(data, "auth", "admin.token"))
		if err != nil {
			t.Fatal(err)
		}
		return string(bytes.TrimSpace(b))
	}
	li, err := auth.EnsureLocalIssuer(auth.LocalIssuerDir(data))
	if err != nil {
		t.Fatal(err)
	}
	op, err := li.Mint("olga", "acme", []string{auth.RoleOperator}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const listAcme = `{"namespace":"acme"}`

	base, _, cancel, wait, _ := startWith(t, withAuth)
	first := adminToken()
	if code, body := callJSON(t, base, listHardware, first, `{}`); code != http.StatusOK {
		t.Fatalf("first start's admin token: %d %s; want 200", code, body)
	}
	cancel()
	if err := wait(); err != nil {
		t.Fatalf("first run: %v", err)
	}

	base, _, _, _, logs := startWith(t, withAuth)
	second := adminToken()
	if second == first {
		t.Fatal("the restart kept the admin token; want a new one")
	}
	if code, body := callJSON(t, base, listHardware, first, `{}`); code != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
		t.Errorf("the first start's admin token after a restart: %d %s; want 401 revoked", code, body)
	}
	if code, body := callJSON(t, base, listHardware, second, `{}`); code != http.StatusOK {
		t.Errorf("the new admin token: %d %s; want 200", code, body)
	}
	if code, body := callJSON(t, base, listHardware, op, listAcme); code != http.StatusOK {
		t.Errorf("an operator's token made before the restart: %d %s; want 200", code, body)
	}
	if !strings.Contains(logs.String(), "the previous admin token is revoked") {
		t.Errorf("the restart does not log the revocation:\n%s", logs)
	}

	// `anvil token revoke` while the server runs: the list is read again
	// within a second.
	r, err := auth.RevocationOf(op)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Revoke(auth.RevocationFile(data), r, time.Now()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := callJSON(t, base, listHardware, op, listAcme)
		if code == http.StatusUnauthorized && strings.Contains(body, "revoked") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked operator token: still %d %s after 10s; want 401 revoked within a second", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
