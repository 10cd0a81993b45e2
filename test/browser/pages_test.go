package browser_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"

	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
)

// brokenTemplate misspells a key of the machine's data on line 5.
const brokenTemplate = `apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: broken, namespace: acme}
spec:
  data: |
    version: "0.1"
    name: broken
    tasks:
    - name: os
      worker: "{{ .hardware.metadata.nmae }}"
      actions:
      - {name: reboot, image: quay.io/tinkerbell/actions/reboot:latest}
`

// withAudit gives the API an audit log, for the audit page.
func withAudit(t *testing.T) serveOption {
	return func(sc *serveConfig) {
		sc.api = append(sc.api, func(c *api.Config) {
			al, err := audit.Open(filepath.Join(t.TempDir(), "audit.log"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { al.Close() })
			c.Audit = al
		})
	}
}

// TestTemplatesJobsAuditPages: an operator opens the templates page,
// previews the template against the machine it chooses, reprovisions
// the machine, and finds the job and its audit record on their pages.
func TestTemplatesJobsAuditPages(t *testing.T) {
	base := serve(t, withAudit(t))
	ctx := browser(t)
	login(t, ctx, base, "op-token")

	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`nav a[href="/ui/templates"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#templates a[href="/ui/templates/acme/install"]`)),
	); err != nil {
		t.Fatalf("templates page: %v", err)
	}
	screenshot(t, ctx, "templates.png")

	// Choose the machine and preview: a GET form, so the preview's URL
	// names the machine and can be shared.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#templates a[href="/ui/templates/acme/install"]`)),
		chromedp.WaitVisible(chromedp.ID("hardware")),
		chromedp.SendKeys(chromedp.ID("hardware"), "rack1-node07"),
		chromedp.Submit(chromedp.ID("hardware")),
		chromedp.WaitVisible(chromedp.ID("rendered")),
	); err != nil {
		t.Fatalf("preview: %v", err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(loc, "/ui/templates/acme/install?hardware=rack1-node07") {
		t.Errorf("the preview's URL is %s; want it to name the machine", loc)
	}
	rendered, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("rendered")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rendered, `worker: "`+mac+`"`) {
		t.Errorf("the preview's worker is not the machine's MAC:\n%s", rendered)
	}
	screenshot(t, ctx, "template-preview.png")

	// A template with a typo: the preview says what and where.
	apply := connect.NewRequest(&v1.ApplyRequest{Source: "broken.yaml", Content: brokenTemplate})
	apply.Header().Set("Authorization", "Bearer admin-token") // templates are an admin's to write
	if _, err := anvilv1connect.NewManifestServiceClient(http.DefaultClient, base).Apply(ctx, apply); err != nil {
		t.Fatalf("apply the broken template: %v", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/templates/acme/broken?hardware=rack1-node07"),
		chromedp.WaitVisible(chromedp.ID("render-error")),
	); err != nil {
		t.Fatalf("preview of a broken template: %v", err)
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("render-error")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "(line 5)") || !strings.Contains(msg, `map has no entry for key "nmae"`) {
		t.Errorf("the render error says %q; want line 5 and the missing key", msg)
	}
	screenshot(t, ctx, "template-preview-error.png")

	// Reprovision, then the job and the audit record.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/hardware/acme/rack1-node07"),
		chromedp.Click(chromedp.CSS(`form[action$="/reprovision"] button`)),
		chromedp.WaitVisible(chromedp.ID("progress")),
		chromedp.Click(chromedp.CSS(`nav a[href="/ui/jobs"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#jobs a[href^="/ui/workflows/acme/rack1-node07-"]`)),
	); err != nil {
		t.Fatalf("jobs page: %v", err)
	}
	screenshot(t, ctx, "jobs.png")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`nav a[href="/ui/audit"]`)),
		chromedp.WaitVisible(chromedp.ID("audit")),
	); err != nil {
		t.Fatalf("audit page: %v", err)
	}
	what, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("audit")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(what, "WorkflowService/Reprovision") || !strings.Contains(what, "acme-op") {
		t.Errorf("the audit page does not show the operator's Reprovision:\n%s", what)
	}
	screenshot(t, ctx, "audit.png")
}
