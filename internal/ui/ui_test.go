package ui_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/ui"
)

// principals stand in for verified tokens: "Authorization: Bearer NAME"
// (verification itself is internal/auth's, tested there).
var principals = map[string]*auth.Principal{
	"admin-token":  {Subject: "admin", Roles: []string{auth.RoleAdmin}},
	"viewer-token": {Subject: "acme-viewer", Org: "acme", Roles: []string{auth.RoleViewer}},
	"op-token":     {Subject: "acme-op", Org: "acme", Roles: []string{auth.RoleOperator}},
	// A viewer of no organisation: it may read no namespace's objects.
	"no-org-token": {Subject: "drifter", Roles: []string{auth.RoleViewer}},
}

func testAuthenticate(_ context.Context, h http.Header) (*auth.Principal, error) {
	name, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, errors.New("no bearer token")
	}
	p, ok := principals[name]
	if !ok {
		return nil, errors.New("unknown token")
	}
	return p, nil
}

type env struct {
	ui    *ui.UI
	logs  *logstore.Store
	st    *bolt.Store
	audit *audit.Log
	srv   *httptest.Server
}

// newEnv serves the UI over the API's services on a store of its own,
// with the view following the store.
func newEnv(t testing.TB) *env { t.Helper(); return newEnvWith(t, false, nil) }

// newEnvWith is newEnv over TLS when tls is set, with configure's
// changes to the UI's configuration and apiOpts' to the API's.
func newEnvWith(t testing.TB, tls bool, configure func(*ui.Config), apiOpts ...func(*api.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := bolt.Open(filepath.Join(dir, "anvil.db"), bolt.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := logstore.Open(logstore.Config{Dir: filepath.Join(dir, "logs"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	apiCfg := api.Config{Store: st, Logs: ls, Logger: log, Authenticate: testAuthenticate, Audit: al}
	for _, o := range apiOpts {
		o(&apiCfg)
	}
	svc := api.New(apiCfg)
	mux := http.NewServeMux()
	svc.Mount(mux)
	cfg := ui.Config{Store: st, Records: ls, Authenticate: testAuthenticate, API: mux, Logger: log}
	if configure != nil {
		configure(&cfg)
	}
	u, err := ui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	srv := httptest.NewUnstartedServer(u)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		cancel()
		srv.CloseClientConnections()
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		svc.Stop()
		al.Close()
		ls.Close()
		st.Close()
	})
	return &env{ui: u, logs: ls, st: st, audit: al, srv: srv}
}

func (e *env) create(t testing.TB, obj model.Object) model.Object {
	t.Helper()
	out, err := e.st.Create(context.Background(), obj)
	if err != nil {
		t.Fatalf("create %T: %v", obj, err)
	}
	return out
}

func hardware(ns, name, mac, ip string, labels map[string]string) *model.Hardware {
	return &model.Hardware{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindHardware},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: model.HardwareSpec{Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: mac,
			IP: &model.IP{Address: ip, Netmask: "255.255.255.0"}}}}},
	}
}

const templateData = `version: "0.1"
name: t1
tasks:
- name: os
  worker: "{{.device_1}}"
  actions:
  - {name: write, image: writefile, timeout: 60}
`

func template(ns string) *model.Template {
	data := templateData
	return &model.Template{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindTemplate},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: "t1"},
		Spec:       model.TemplateSpec{Data: &data},
	}
}

// workflow is a workflow on hw whose one action is in state.
func workflow(ns, name, hw string, state model.State, msg string) *model.Workflow {
	return &model.Workflow{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindWorkflow},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec:       model.WorkflowSpec{TemplateRef: "t1", HardwareRef: hw},
		Status: model.WorkflowStatus{State: state, Tasks: []model.Task{{Name: "os", AgentID: "a1",
			Actions: []model.Action{{Name: "write", Image: "writefile", State: state, Message: msg}}}}},
	}
}

// browser is a client with a cookie jar that does not follow redirects
// (the tests look at them).
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
}

func (e *env) browser(t testing.TB) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := e.srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: t, base: e.srv.URL, c: c}
}

func (b *browser) do(method, path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp, string(out)
}

func (b *browser) get(path string) (*http.Response, string) { return b.do(http.MethodGet, path, nil) }

// login logs in with token and returns the session's CSRF token, read
// from the fleet page's logout form.
func (b *browser) login(token string) string {
	b.t.Helper()
	resp, _ := b.do(http.MethodPost, "/ui/login", url.Values{"token": {token}, "next": {"/ui/"}})
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("login with %s: status %d; want 303", token, resp.StatusCode)
	}
	_, page := b.get("/ui/")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("no CSRF token on the fleet page after login:\n%s", page)
	}
	return m[1]
}

func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)
	for _, path := range []string{"/ui/login", "/ui/", "/ui/static/app.js", "/ui/hardware"} {
		resp, _ := b.get(path)
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: Content-Security-Policy %q allows inline script or style", path, csp)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options = %q; want nosniff", path, got)
		}
		if got := resp.Header.Get("Referrer-Policy"); got != "same-origin" {
			t.Errorf("GET %s: Referrer-Policy = %q; want same-origin", path, got)
		}
	}
	// No page carries inline script: every <script> has a src of our own.
	_, page := b.get("/ui/login")
	for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
		if !strings.Contains(m, `src="/ui/static/`) {
			t.Errorf("login page has an inline or foreign script: %s", m)
		}
	}
}

func TestLoginSessionAndLogout(t *testing.T) {
	e := newEnv(t)
	b := e.browser(t)

	resp, _ := b.get("/ui/hardware")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/login?") {
		t.Fatalf("GET /ui/hardware without a session = %d to %q; want 303 to the login page", resp.StatusCode, loc)
	}

	resp, page := b.do(http.MethodPost, "/ui/login", url.Values{"token": {"not-a-token"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "not accepted") {
		t.Errorf("login with a bad token = %d; want 401 and a page saying so", resp.StatusCode)
	}
	if len(resp.Cookies()) != 0 {
		t.Errorf("a refused login set cookies %v", resp.Cookies())
	}

	// A next that leaves the UI is not followed.
	resp, _ = b.do(http.MethodPost, "/ui/login", url.Values{"token": {"op-token"}, "next": {"//evil.example/"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("login = %d to %q; want 303 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if strings.Contains(resp.Header.Get("Location"), "op-token") {
		t.Errorf("the login's redirect carries the token: %s", resp.Header.Get("Location"))
	}
	var sess *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "anvil_session" {
			sess = c
		}
	}
	switch {
	case sess == nil:
		t.Fatal("login set no session cookie")
	case !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/ui/":
		t.Errorf("session cookie %+v; want HttpOnly, SameSite=Strict, Path=/ui/", sess)
	case strings.Contains(sess.Value, "op-token"):
		t.Errorf("the session cookie holds the token")
	}
	resp, page = b.get("/ui/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "acme-op") {
		t.Fatalf("fleet page after login = %d; want 200 naming acme-op", resp.StatusCode)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)[1]

	// Logout without the CSRF token is refused; with it, the session ends.
	if resp, _ := b.do(http.MethodPost, "/ui/logout", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without CSRF token = %d; want 403", resp.StatusCode)
	}
	if resp, _ := b.do(http.MethodPost, "/ui/logout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout = %d; want 303", resp.StatusCode)
	}
	if resp, _ := b.get("/ui/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("fleet page after logout = %d; want 303 to login", resp.StatusCode)
	}
}

func TestSecureCookieOverTLS(t *testing.T) {
	e := newEnvWith(t, true, nil)
	b := e.browser(t)
	resp, _ := b.do(http.MethodPost, "/ui/login", url.Values{"token": {"op-token"}})
	cs := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cs) != 1 || !cs[0].Secure {
		t.Errorf("login over TLS = %d, cookies %v; want 303 and one Secure cookie", resp.StatusCode, cs)
	}
}

func TestPlainHTTPSentToTLS(t *testing.T) {
	e := newEnvWith(t, false, func(c *ui.Config) { c.HTTPSPort = 7443 })
	b := e.browser(t)
	resp, _ := b.do(http.MethodPost, "/ui/login", url.Values{"token": {"op-token"}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "https://127.0.0.1:7443/ui/login" {
		t.Errorf("login over plain HTTP = %d to %q; want 303 to https://127.0.0.1:7443/ui/login", resp.StatusCode, loc)
	}
	if len(resp.Cookies()) != 0 {
		t.Errorf("login over plain HTTP set cookies %v", resp.Cookies())
	}
}

func TestCrossSiteLoginRefused(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"other origin", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"opaque origin", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": e.srv.URL}, http.StatusForbidden},
		{"same-site fetch", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"own page", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": e.srv.URL}, http.StatusSeeOther},
		{"own origin, no fetch metadata", map[string]string{"Origin": e.srv.URL}, http.StatusSeeOther},
	} {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/ui/login", strings.NewReader("token=op-token"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == http.StatusForbidden) != (len(resp.Cookies()) == 0) {
			t.Errorf("%s: login = %d with cookies %v; want %d", tc.name, resp.StatusCode, resp.Cookies(), tc.want)
		}
	}
}

// setupAcme makes machine n1 and template t1 in namespace acme.
func (e *env) setupAcme(t testing.TB) {
	e.create(t, hardware("acme", "n1", "52:54:00:0a:00:01", "10.0.1.11", nil))
	e.create(t, template("acme"))
}

func (e *env) workflowsOf(t *testing.T, hw string) []model.Object {
	objs, err := e.st.ByIndex(context.Background(), model.KindWorkflow, store.IndexHardwareRef, hw)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// waitPage waits until the view shows what want matches on path.
func waitPage(t testing.TB, b *browser, path, want string) {
	t.Helper()
	testtool.WaitFor(t, path+" to show "+want, func() bool {
		_, page := b.get(path)
		return strings.Contains(page, want)
	})
}

func TestReprovisionCSRF(t *testing.T) {
	e := newEnv(t)
	e.setupAcme(t)
	b := e.browser(t)
	csrf := b.login("op-token")
	waitPage(t, b, "/ui/hardware/acme/n1", "Reprovision")
	for name, form := range map[string]url.Values{
		"no token":    {"template": {"t1"}},
		"wrong token": {"template": {"t1"}, "csrf": {csrf + "x"}},
	} {
		resp, _ := b.do(http.MethodPost, "/ui/hardware/acme/n1/reprovision", form)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: reprovision = %d; want 403", name, resp.StatusCode)
		}
	}
	if n := len(e.workflowsOf(t, "n1")); n != 0 {
		t.Errorf("refused reprovisions made %d workflows", n)
	}
}

func TestReprovisionThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	e.setupAcme(t)
	b := e.browser(t)
	csrf := b.login("op-token")
	waitPage(t, b, "/ui/hardware/acme/n1", "Reprovision")
	resp, page := b.do(http.MethodPost, "/ui/hardware/acme/n1/reprovision", url.Values{"template": {"t1"}, "csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/workflows/acme/n1-") {
		t.Fatalf("reprovision = %d to %q; want 303 to the new workflow\n%s", resp.StatusCode, resp.Header.Get("Location"), page)
	}
	if n := len(e.workflowsOf(t, "n1")); n != 1 {
		t.Fatalf("reprovision made %d workflows; want 1", n)
	}
	recs, err := e.audit.List(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Subject != "acme-op" || !strings.HasSuffix(recs[0].Procedure, "/Reprovision") || recs[0].Outcome != "ok" {
		t.Errorf("audit = %+v; want one ok Reprovision by acme-op", recs)
	}
	// A second one is refused by the API (an unfinished workflow is on
	// the machine) and the page says why.
	resp, page = b.do(http.MethodPost, "/ui/hardware/acme/n1/reprovision", url.Values{"template": {"t1"}, "csrf": {csrf}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, "already has an unfinished workflow") {
		t.Errorf("second reprovision = %d; want 409 saying why\n%s", resp.StatusCode, page)
	}
}

func TestViewerSeesNoButtonAndForgedPostRefused(t *testing.T) {
	e := newEnv(t)
	e.setupAcme(t)
	b := e.browser(t)
	csrf := b.login("viewer-token")
	waitPage(t, b, "/ui/hardware/acme/n1", "52:54:00:0a:00:01")
	_, page := b.get("/ui/hardware/acme/n1")
	if strings.Contains(page, "reprovision") || strings.Contains(page, "<button type=\"submit\">Reprovision") {
		t.Errorf("a viewer's hardware page offers reprovision:\n%s", page)
	}
	// The viewer forges the form the operator would see, with its own
	// valid CSRF token: the API refuses it.
	resp, page := b.do(http.MethodPost, "/ui/hardware/acme/n1/reprovision", url.Values{"template": {"t1"}, "csrf": {csrf}})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "permission denied") {
		t.Errorf("viewer's forged reprovision = %d; want 403 permission denied\n%s", resp.StatusCode, page)
	}
	if n := len(e.workflowsOf(t, "n1")); n != 0 {
		t.Errorf("the viewer's reprovision made %d workflows", n)
	}
	recs, err := e.audit.List(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Subject != "acme-viewer" || recs[0].Outcome == "ok" {
		t.Errorf("audit = %+v; want the viewer's refused Reprovision", recs)
	}
}

func TestHTMLEscaped(t *testing.T) {
	e := newEnv(t)
	e.setupAcme(t)
	hw, err := e.st.Get(context.Background(), model.KindHardware, "acme", "n1")
	if err != nil {
		t.Fatal(err)
	}
	h := hw.(*model.Hardware)
	const evil = `<img src=x onerror=alert(1)>`
	h.Status.Attributes = &model.Attributes{Product: &model.Product{Name: evil}}
	if _, err := e.st.Update(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	e.create(t, workflow("acme", "w1", "n1", model.StateFailed, "<script>alert(2)</script>"))
	if err := e.logs.Append(logstore.Line{HardwareID: "acme/n1", Stream: "syslog", Time: time.Now(),
		Line: `kernel: <iframe src="//evil.example">`}); err != nil {
		t.Fatal(err)
	}
	b := e.browser(t)
	b.login("admin-token")
	waitPage(t, b, "/ui/hardware/acme/n1", "&lt;img src=x onerror=alert(1)&gt;")
	waitPage(t, b, "/ui/workflows/acme/w1", "&lt;script&gt;alert(2)&lt;/script&gt;")
	if _, page := b.get("/ui/hardware/acme/n1"); !strings.Contains(page, "kernel: &lt;iframe") || strings.Contains(page, "<iframe") {
		t.Errorf("the machine's record line is not shown escaped")
	}
	for _, path := range []string{"/ui/hardware/acme/n1", "/ui/workflows/acme/w1", "/ui/"} {
		_, page := b.get(path)
		if strings.Contains(page, evil) || strings.Contains(page, "<script>alert") {
			t.Errorf("%s shows a machine's or agent's text unescaped", path)
		}
	}
}

func TestHardwarePaginationAndFilters(t *testing.T) {
	e := newEnv(t)
	for i := range 120 {
		rack := "a"
		if i%2 == 1 {
			rack = "b"
		}
		e.create(t, hardware("acme", fmt.Sprintf("m%03d", i), fmt.Sprintf("52:54:00:0a:01:%02x", i),
			fmt.Sprintf("10.0.1.%d", i+1), map[string]string{"rack": rack}))
	}
	e.create(t, hardware("globex", "g1", "52:54:00:0b:00:01", "10.0.2.1", nil))
	e.create(t, workflow("acme", "w7", "m007", model.StateFailed, "disk gone"))
	e.create(t, workflow("acme", "w8", "m008", model.StateRunning, ""))
	b := e.browser(t)
	b.login("viewer-token")
	waitPage(t, b, "/ui/hardware?state=RUNNING", "m008")

	rows := regexp.MustCompile(`<td><a href="/ui/hardware/([^"]+)">`)
	names := func(path string) []string {
		resp, page := b.get(path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d", path, resp.StatusCode)
		}
		var out []string
		for _, m := range rows.FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	for _, tc := range []struct {
		name, path  string
		n           int
		first, last string
	}{
		{"first page", "/ui/hardware", 50, "acme/m000", "acme/m049"},
		{"last page", "/ui/hardware?page=3", 20, "acme/m100", "acme/m119"},
		{"label", "/ui/hardware?labels=rack%3Db&page=2", 10, "acme/m101", "acme/m119"},
		{"mac", "/ui/hardware?mac=52-54-00-0A-01-05", 1, "acme/m005", "acme/m005"},
		{"ip", "/ui/hardware?ip=10.0.1.10", 1, "acme/m009", "acme/m009"},
		{"failed", "/ui/hardware?state=FAILED", 1, "acme/m007", "acme/m007"},
		{"name", "/ui/hardware?q=m11", 10, "acme/m110", "acme/m119"},
		{"other org's mac", "/ui/hardware?mac=52:54:00:0b:00:01", 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := names(tc.path)
			if len(got) != tc.n {
				t.Fatalf("%s: %d rows; want %d: %v", tc.path, len(got), tc.n, got)
			}
			if tc.n > 0 && (got[0] != tc.first || got[len(got)-1] != tc.last) {
				t.Errorf("%s: rows %s … %s; want %s … %s", tc.path, got[0], got[len(got)-1], tc.first, tc.last)
			}
		})
	}
	for _, bad := range []string{"/ui/hardware?labels=%3D%3D", "/ui/hardware?state=BOGUS", "/ui/hardware?mac=zz", "/ui/hardware?page=0"} {
		if resp, _ := b.get(bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s = %d; want 400", bad, resp.StatusCode)
		}
	}
	_, page := b.get("/ui/")
	for _, want := range []string{"120 machines by state", "disk gone", "/ui/workflows/acme/w8"} {
		if !strings.Contains(page, want) {
			t.Errorf("fleet page lacks %q", want)
		}
	}
	if i, j := strings.Index(page, "Failed installs"), strings.Index(page, "Installs in progress"); i < 0 || j < i {
		t.Errorf("fleet page does not list failures first")
	}
}

func TestWorkflowEvents(t *testing.T) {
	e := newEnv(t)
	e.setupAcme(t)
	e.create(t, workflow("acme", "w1", "n1", model.StateRunning, ""))
	b := e.browser(t)
	b.login("viewer-token")
	waitPage(t, b, "/ui/workflows/acme/w1", "RUNNING")

	req, _ := http.NewRequest(http.MethodGet, b.base+"/ui/workflows/acme/w1/events", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("events = %d %q; want 200 text/event-stream", resp.StatusCode, ct)
	}
	events := make(chan string, 10)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev strings.Builder
		for sc.Scan() {
			if sc.Text() == "" {
				events <- ev.String()
				ev.Reset()
				continue
			}
			ev.WriteString(sc.Text() + "\n")
		}
	}()
	first := testtool.Receive(t, events, "the first event")
	if !strings.HasPrefix(first, "event: actions\n") || !strings.Contains(first, "RUNNING") {
		t.Fatalf("first event %q; want the actions fragment, RUNNING", first)
	}
	obj, err := e.st.Get(context.Background(), model.KindWorkflow, "acme", "w1")
	if err != nil {
		t.Fatal(err)
	}
	wf := obj.(*model.Workflow)
	wf.Status.State = model.StateSuccess
	wf.Status.Tasks[0].Actions[0].State = model.StateSuccess
	if _, err := e.st.Update(context.Background(), wf); err != nil {
		t.Fatal(err)
	}
	next := testtool.Receive(t, events, "the event of the change")
	if !strings.Contains(next, `id="wf-state">SUCCESS`) {
		t.Errorf("event after the change %q; want the workflow SUCCESS", next)
	}

	// Another organisation's workflow has no stream for this viewer.
	e.create(t, hardware("globex", "g1", "52:54:00:0b:00:01", "10.0.2.1", nil))
	e.create(t, workflow("globex", "gw", "g1", model.StateRunning, ""))
	if resp, _ := b.get("/ui/workflows/globex/gw/events"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("events of another organisation's workflow = %d; want 404", resp.StatusCode)
	}

	// Stop (the server shutting down) ends the stream.
	e.ui.Stop()
	ended := make(chan struct{})
	go func() {
		for range events {
		}
		close(ended)
	}()
	testtool.Receive(t, ended, "the event stream to end at Stop")
}
