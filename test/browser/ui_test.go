// Package browser_test drives the web UI (internal/ui) in headless
// Chromium (Debian's chromium, through chromedp): an operator logs in,
// reprovisions a machine, and watches the simulated install reach
// SUCCESS on the workflow page without reloading it; a viewer sees no
// mutating button; with 10,000 machines, the fleet page counts them right
// and the hardware list pages through them (fleet10k_test.go). Screenshots of each page are saved as artifacts
// (ANVIL_ARTIFACTS_DIR, else bin/artifacts/browser under the module).
package browser_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/headless"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/ui"
	"github.com/anvilproj/anvil/internal/workflow"
)

// testBound keeps a broken browser session from hanging the test: a
// bound, never a measure.
const testBound = 3 * time.Minute

// tokens stand in for verified tokens ("Authorization: Bearer NAME").
var tokens = map[string]*auth.Principal{
	"op-token":     {Subject: "acme-op", Org: "acme", Roles: []string{auth.RoleOperator}},
	"viewer-token": {Subject: "acme-viewer", Org: "acme", Roles: []string{auth.RoleViewer}},
	"admin-token":  {Subject: "admin", Roles: []string{auth.RoleAdmin}},
	// A viewer of the organisation (namespace) of internal/benchfleet's machines.
	"fleet-viewer-token": {Subject: "fleet-viewer", Org: benchfleet.Namespace, Roles: []string{auth.RoleViewer}},
}

func authenticate(_ context.Context, h http.Header) (*auth.Principal, error) {
	p := tokens[strings.TrimPrefix(h.Get("Authorization"), "Bearer ")]
	if p == nil {
		return nil, errors.New("unknown token")
	}
	return p, nil
}

const mac = "52:54:00:0d:00:01"

const templateData = `version: "0.1"
name: install
tasks:
- name: os
  worker: "{{.device_1}}"
  actions:
  - {name: stream-image, image: quay.io/tinkerbell/actions/image2disk:latest, timeout: 600}
  - {name: write-config, image: quay.io/tinkerbell/actions/writefile:latest, timeout: 60}
  - {name: reboot, image: quay.io/tinkerbell/actions/reboot:latest, timeout: 60}
`

// serveOption adds to what serve stores and runs.
type serveOption func(*serveConfig)

type serveConfig struct {
	objects []model.Object                              // stored with the machine and the template
	run     []func(ctx context.Context, st store.Store) // run beside the engine until the server stops
	api     []func(*api.Config)                         // change the API's configuration first
	ui      []func(*ui.Config)                          // change the UI's configuration first

	listener     net.Listener // serve on it (its port known beforehand), with TLS; nil: plain HTTP on a new port
	authenticate func(context.Context, http.Header) (*auth.Principal, error)
}

// onTLSListener serves over TLS (httptest's certificate) on ln.
func onTLSListener(ln net.Listener) serveOption {
	return func(sc *serveConfig) { sc.listener = ln }
}

// withAuthenticate authenticates with f instead of the tokens map.
func withAuthenticate(f func(context.Context, http.Header) (*auth.Principal, error)) serveOption {
	return func(sc *serveConfig) { sc.authenticate = f }
}

// withOIDC turns OIDC login on.
func withOIDC(c ui.OIDC) serveOption {
	return func(sc *serveConfig) { sc.ui = append(sc.ui, func(u *ui.Config) { u.OIDC = &c }) }
}

// withLogs gives the API (StreamLogs) and the UI (the pages' logs) a log
// store, as anvil serve does.
func withLogs(ls *logstore.Store) serveOption {
	return func(sc *serveConfig) {
		sc.api = append(sc.api, func(a *api.Config) { a.Logs = ls })
		sc.ui = append(sc.ui, func(u *ui.Config) { u.Records = ls })
	}
}

// withObjects puts objs in the store too, in the same one Apply (a whole
// fleet is one write).
func withObjects(objs ...model.Object) serveOption {
	return func(sc *serveConfig) { sc.objects = append(sc.objects, objs...) }
}

// serve runs the API (with the workflow engine) and the UI on one
// loopback server, as anvil serve routes them, over a store holding one
// machine and one template in namespace acme, and what opts add.
func serve(t *testing.T, opts ...serveOption) string {
	t.Helper()
	sc := serveConfig{authenticate: authenticate}
	for _, o := range opts {
		o(&sc)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := bolt.Open(filepath.Join(t.TempDir(), "anvil.db"), bolt.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	data := templateData
	if _, err := st.Apply(context.Background(), append([]model.Object{
		&model.Hardware{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindHardware},
			ObjectMeta: model.ObjectMeta{Namespace: "acme", Name: "rack1-node07", Labels: map[string]string{"rack": "1"}},
			Spec: model.HardwareSpec{Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: mac, Hostname: "node07",
				IP: &model.IP{Address: "10.0.4.7", Netmask: "255.255.255.0"}}}}}},
		&model.Template{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindTemplate},
			ObjectMeta: model.ObjectMeta{Namespace: "acme", Name: "install"}, Spec: model.TemplateSpec{Data: &data}},
	}, sc.objects...)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	eng := workflow.New(workflow.Config{Store: st, Logger: log})
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(ctx) }()
	var extra sync.WaitGroup
	for _, run := range sc.run {
		extra.Add(1)
		go func() { defer extra.Done(); run(ctx, st) }()
	}
	apiCfg := api.Config{Store: st, Engine: eng, Logger: log, Authenticate: sc.authenticate}
	for _, c := range sc.api {
		c(&apiCfg)
	}
	apiMux := http.NewServeMux()
	uiCfg := ui.Config{Store: st, Authenticate: sc.authenticate, API: apiMux, Logger: log}
	for _, c := range sc.ui {
		c(&uiCfg)
	}
	svc := api.New(apiCfg)
	svc.Mount(apiMux)
	web, err := ui.New(uiCfg)
	if err != nil {
		t.Fatal(err)
	}
	uiDone := make(chan error, 1)
	go func() { uiDone <- web.Run(ctx) }()
	mux := http.NewServeMux()
	mux.Handle("/ui/", web)
	mux.Handle("/", apiMux)
	srv := httptest.NewUnstartedServer(mux)
	if sc.listener != nil {
		srv.Listener.Close()
		srv.Listener = sc.listener
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		cancel()
		srv.CloseClientConnections()
		srv.Close()
		svc.Stop()
		<-uiDone
		<-engDone
		extra.Wait()
		st.Close()
	})
	return srv.URL
}

// browser starts headless Chromium (internal/headless), with extra
// flags.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := testtool.RequireBinary(t, "chromium", "chromium")
	ctx, stop := headless.Start(context.Background(), path, extra...)
	ctx, cancelBound := context.WithTimeout(ctx, testBound)
	t.Cleanup(func() { cancelBound(); stop() })
	return ctx
}

// artifacts is where screenshots go.
func artifacts(t *testing.T) string {
	dir := os.Getenv("ANVIL_ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join(testtool.ModuleRoot(t), "bin", "artifacts", "browser")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifacts(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func login(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("counts")),
	); err != nil {
		t.Fatalf("log in as %s: %v", token, err)
	}
}

// TestOperatorWatchesInstallLive: log in, reprovision, and see the
// workflow page follow the simulated agent to SUCCESS with no reload.
func TestOperatorWatchesInstallLive(t *testing.T) {
	base := serve(t)
	ctx := browser(t)
	login(t, ctx, base, "op-token")
	url, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(url, "op-token") {
		t.Errorf("the token is in the URL after login: %s", url)
	}
	screenshot(t, ctx, "fleet.png")

	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/hardware?labels=rack%3D1"),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/hardware/acme/rack1-node07"]`)),
	); err != nil {
		t.Fatalf("hardware list: %v", err)
	}
	screenshot(t, ctx, "hardware.png")

	// Reprovision from the machine's page: the API creates the workflow
	// and the browser lands on its page, which subscribes to its events.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a[href="/ui/hardware/acme/rack1-node07"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action$="/reprovision"] button`)),
	); err != nil {
		t.Fatalf("hardware page: %v", err)
	}
	screenshot(t, ctx, "hardware-detail.png")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`form[action$="/reprovision"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#progress[data-live="1"]`)),
	); err != nil {
		t.Fatalf("reprovision: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.anvilTestMark = "same page"`)); err != nil {
		t.Fatalf("reprovision: %v", err)
	}

	// The simulated agent runs the three actions.
	agentDone := make(chan error, 1)
	go func() {
		_, err := agentsim.Run(ctx, agentsim.Config{
			Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, base),
			AgentID: mac, ActionTime: 700 * time.Millisecond, ProgressSteps: 4, Wait: time.Second,
		})
		agentDone <- err
	}()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//span[@id="wf-state"][text()="RUNNING"]`))); err != nil {
		t.Fatalf("waiting for RUNNING: %v", err)
	}
	screenshot(t, ctx, "workflow-running.png")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//span[@id="wf-state"][text()="SUCCESS"]`))); err != nil {
		t.Fatalf("waiting for SUCCESS: %v", err)
	}
	mark, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.anvilTestMark || "reloaded"`))
	if err != nil {
		t.Fatal(err)
	}
	if mark != "same page" {
		t.Errorf("the page reloaded to show SUCCESS (mark %q); want it pushed to the same page", mark)
	}
	screenshot(t, ctx, "workflow-success.png")
	if err := testtool.Receive(t, agentDone, "the simulated agent to finish"); err != nil {
		t.Errorf("agent: %v", err)
	}

	// At a phone's width, in the dark theme: the page follows the
	// system's colour scheme and nothing but the tables' own scrolling
	// boxes is wider than the screen.
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	bg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
	if err != nil {
		t.Fatal(err)
	}
	if bg != "rgb(13, 17, 23)" {
		t.Errorf("body background in the dark scheme = %s; want the dark theme's rgb(13, 17, 23)", bg)
	}
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	if err != nil {
		t.Fatal(err)
	}
	if overflow {
		t.Errorf("the workflow page is wider than a 390 px screen")
	}
	screenshot(t, ctx, "workflow-phone-dark.png")
}

// TestViewerHasNoReprovision: a viewer of the same organisation sees the
// machine but no mutating button.
func TestViewerHasNoReprovision(t *testing.T) {
	base := serve(t)
	ctx := browser(t)
	login(t, ctx, base, "viewer-token")
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/hardware/acme/rack1-node07"),
		chromedp.WaitVisible(chromedp.ID("ifaces")),
	); err != nil {
		t.Fatalf("hardware page: %v", err)
	}
	forms, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("form")).map(f => f.getAttribute("action"))`))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forms {
		if f != "/ui/logout" {
			t.Errorf("a viewer's hardware page has a form to %s; want only logout", f)
		}
	}
	screenshot(t, ctx, "hardware-detail-viewer.png")
}
