package browser_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/ui"
)

// The UI's client registration at the test provider.
const (
	oidcClient = "anvil"
	oidcSecret = "s3cret-for-the-test"
)

// idpUsers are the provider's users: the anvil scope puts org and roles
// into their ID tokens as org_id and roles.
var idpUsers = map[string]map[string]any{
	"olga": {"password": "correct horse", "org": "acme", "roles": []string{auth.RoleOperator}},
}

// startIdP runs the real OpenID Provider (tools/oidc: zitadel/oidc's
// example OP, built by `make oidc` into .cache/oidc/bin) on a loopback
// port, with the UI's client registered for redirect, and returns its
// issuer.
func startIdP(t *testing.T, redirect string) string {
	t.Helper()
	bin := os.Getenv("ANVIL_TEST_IDP")
	if bin == "" {
		bin = filepath.Join(testtool.ModuleRoot(t), ".cache", "oidc", "bin", "anvil-test-idp")
	}
	if _, err := os.Stat(bin); err != nil {
		testtool.Need(t, "the test OpenID Provider %s (make oidc, or scripts/fetch-oidc.sh, builds it)", bin)
	}
	users, err := json.Marshal(idpUsers)
	if err != nil {
		t.Fatal(err)
	}
	usersFile := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(usersFile, users, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-users", usersFile, "-client", oidcClient, "-secret", oidcSecret, "-redirect-uri", redirect)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the provider's log:\n%s", stderr.String())
		}
	})
	issuer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		issuer <- strings.TrimSpace(strings.TrimPrefix(line, "issuer "))
	}()
	iss := testtool.Receive(t, issuer, "the test provider to print its issuer")
	if !strings.HasPrefix(iss, "http://localhost:") {
		t.Fatalf("the test provider did not start (it printed %q)", iss)
	}
	return iss
}

// jwtLike matches a JWT or JWE (its base64url header starts {"…).
var jwtLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.`)

// tokenInURL says what in raw looks like a token: a parameter named like
// one (access_token, id_token, token) in the query or fragment, or a
// JWT-like value other than the authorization code, which is no token
// (it is worth nothing without the PKCE verifier and the client's
// secret, and this provider makes it a JWE).
func tokenInURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "unparsable"
	}
	frag, _ := url.ParseQuery(u.Fragment)
	for _, q := range []url.Values{u.Query(), frag} {
		for k, vs := range q {
			if strings.Contains(k, "token") {
				return "parameter " + k
			}
			for _, v := range vs {
				if k != "code" && jwtLike.MatchString(v) {
					return "a JWT in " + k
				}
			}
		}
	}
	if jwtLike.MatchString(u.Path) {
		return "a JWT in the path"
	}
	return ""
}

// TestOIDCLogin: "Log in with" the provider, its own login form, and back
// on the fleet page as the provider's user, with the organisation and role
// its ID token's claims give — through the API's own verifier of the
// provider's tokens (JWKS, iss, aud), as `anvil serve --auth-jwks-url`
// configures it. No URL the browser is sent to carries a token.
func TestOIDCLogin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + ln.Addr().String()
	issuer := startIdP(t, base+"/ui/oidc/callback")

	// The API trusts the provider's tokens for the audience anvil: the
	// UI's client ID, so its ID tokens are the API's tokens.
	v, err := auth.NewVerifier(context.Background(), auth.Config{JWKSURL: issuer + "keys", Issuer: issuer, Audience: oidcClient})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	apiAuth := func(ctx context.Context, h http.Header) (*auth.Principal, error) {
		tok, err := auth.BearerToken(h)
		if err != nil {
			return nil, err
		}
		return v.Verify(ctx, tok)
	}
	serve(t, onTLSListener(ln), withAuthenticate(apiAuth), withOIDC(ui.OIDC{Issuer: issuer, ClientID: oidcClient,
		ClientSecret: oidcSecret, Scopes: []string{"anvil"}}))

	// httptest's certificate is its own; the test trusts it as an
	// operator trusts `anvil tls ca`.
	ctx := browser(t, chromedp.Flag("ignore-certificate-errors", true))
	var mu sync.Mutex
	var urls []string
	// chromedp enables the network domain: every request is seen here.
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			urls = append(urls, e.Request.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("oidc-login")),
	); err != nil {
		t.Fatalf("login page: %v", err)
	}
	label, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("oidc-login")))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Log in with " + strings.TrimSuffix(strings.TrimPrefix(issuer, "http://"), "/"); label != want {
		t.Errorf("the button says %q; want %q", label, want)
	}
	screenshot(t, ctx, "login-oidc.png")

	// The provider's own form, on its own site.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("oidc-login")),
		chromedp.WaitVisible(chromedp.ID("username")),
	); err != nil {
		t.Fatalf("to the provider's login form: %v", err)
	}
	at, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(at, issuer) {
		t.Fatalf("the login form is at %s; want the provider's (%s)", at, issuer)
	}
	screenshot(t, ctx, "oidc-provider-login.png")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("username"), "olga"),
		chromedp.SendKeys(chromedp.ID("password"), "correct horse"),
		chromedp.Submit(chromedp.ID("password")),
		// Back on one of Anvil's pages: the fleet page, or the login
		// page with the reason it refused.
		chromedp.WaitVisible(chromedp.CSS("main h1")),
	); err != nil {
		t.Fatalf("log in at the provider and come back: %v", err)
	}
	if title, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main h1"))); err != nil || title != "Fleet" {
		at, _ := chromedp.Run(ctx, chromedp.Location())
		msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector("main .error") || {}).textContent || ""`))
		screenshot(t, ctx, "fleet-oidc.png")
		t.Fatalf("after the provider's login the browser is on %q at %s (%v), not the fleet page; error shown: %q", title, at, err, msg)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".who")))
	if err != nil {
		t.Fatal(err)
	}
	if who != "olga" {
		t.Errorf("logged in as %q; want the provider's user olga", who)
	}
	screenshot(t, ctx, "fleet-oidc.png")

	// acme's machine, and an operator's Reprovision: the org and role of
	// the token's claims, as the API maps them.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/hardware/acme/rack1-node07"),
		chromedp.WaitVisible(chromedp.CSS(`form[action$="/reprovision"] button`)),
	); err != nil {
		t.Fatalf("an operator of acme should see acme's machine with Reprovision: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	var sawCallback bool
	for _, raw := range urls {
		sawCallback = sawCallback || strings.HasPrefix(raw, base+"/ui/oidc/callback?")
		if leak := tokenInURL(raw); leak != "" {
			t.Errorf("the browser was sent to a URL carrying a token (%s): %s", leak, raw)
		}
	}
	if !sawCallback {
		t.Errorf("the browser never came back through /ui/oidc/callback; URLs: %q", urls)
	}
}
