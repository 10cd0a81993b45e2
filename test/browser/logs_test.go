package browser_test

import (
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/testtool"
)

// logCell is the XPath of a log row's text cell holding exactly text.
func logCell(text string) string {
	return `//tbody[@id="log-lines"]//td[@class="line"][text()="` + text + `"]`
}

// TestLogsLive: the simulated agent's output lines (StreamLogs, as a
// machine's agent sends them) appear on the open workflow page without a
// reload, tagged by action; a line holding HTML shows as text; then the
// machine's page shows a new record line (a DHCP event) live too.
func TestLogsLive(t *testing.T) {
	ls, err := logstore.Open(logstore.Config{Dir: filepath.Join(t.TempDir(), "logs"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	base := serve(t, withLogs(ls))
	ctx := browser(t)
	login(t, ctx, base, "op-token")
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/hardware/acme/rack1-node07"),
		chromedp.Click(chromedp.CSS(`form[action$="/reprovision"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#progress[data-live="1"]`)),
	); err != nil {
		t.Fatalf("reprovision: %v", err)
	}
	page, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	_, name, ok := strings.Cut(page, "/ui/workflows/acme/")
	if !ok {
		t.Fatalf("reprovision landed on %s; want a workflow page", page)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.anvilTestMark = "same page"`)); err != nil {
		t.Fatal(err)
	}

	agentDone := make(chan error, 1)
	go func() {
		_, err := agentsim.Run(ctx, agentsim.Config{
			Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, base),
			AgentID: mac, ActionTime: 500 * time.Millisecond, Wait: time.Second, StreamLogs: true,
		})
		agentDone <- err
	}()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(logCell("simulated stream-image starting")))); err != nil {
		t.Fatalf("waiting for the agent's first line: %v", err)
	}
	// A line holding HTML, through the store as StreamLogs appends it.
	evil := `<img src=x onerror="window.anvilXSS=1"><script>window.anvilXSS=2</script>`
	if err := ls.Append(logstore.Line{WorkflowID: "acme/" + name, AgentID: mac, TaskName: "os", ActionName: "stream-image",
		Time: time.Now(), Stream: "stderr", Line: evil}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//span[@id="wf-state"][text()="SUCCESS"]`)),
		chromedp.WaitVisible(chromedp.Search(logCell("simulated reboot starting")))); err != nil {
		t.Fatalf("waiting for SUCCESS and the last action's line: %v", err)
	}
	if err := testtool.Receive(t, agentDone, "the simulated agent to finish"); err != nil {
		t.Errorf("agent: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`(() => {
		const rows = Array.from(document.querySelectorAll("#log-lines tr")).map(r => Array.from(r.cells).map(c => c.textContent));
		return {mark: window.anvilTestMark || "reloaded", xss: String(window.anvilXSS), rows: rows,
			injected: document.querySelectorAll("#log-lines img, #log-lines script").length};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if got["mark"] != "same page" {
		t.Errorf("the page reloaded (mark %v); want the lines pushed to the same page", got["mark"])
	}
	if got["xss"] != "undefined" || got["injected"] != float64(0) {
		t.Errorf("the HTML line became markup (anvilXSS %v, %v elements)", got["xss"], got["injected"])
	}
	rows, _ := got["rows"].([]any)
	var text []string
	for _, r := range rows {
		cells, _ := r.([]any)
		if len(cells) == 3 {
			text = append(text, cells[1].(string)+" | "+cells[2].(string))
		}
	}
	for _, want := range []string{"os/stream-image | simulated stream-image starting", "os/stream-image stderr | " + evil,
		"os/write-config | done", "os/reboot | simulated reboot starting"} {
		found := false
		for _, r := range text {
			found = found || r == want
		}
		if !found {
			t.Errorf("the page's log lacks the row %q; rows:\n%s", want, strings.Join(text, "\n"))
		}
	}
	screenshot(t, ctx, "workflow-logs.png")

	// The machine's page: its record holds the agent's lines, and a DHCP
	// event recorded now appears without a reload.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/hardware/acme/rack1-node07"),
		chromedp.WaitVisible(chromedp.CSS(`#log-lines[data-live="1"]`)),
	); err != nil {
		t.Fatalf("machine page: %v", err)
	}
	dhcp := "DISCOVER from " + mac + " (uefi-x86_64, PXEClient) [acme/rack1-node07]: OFFER 10.0.4.7, netboot is not allowed: no boot file"
	if err := ls.Append(logstore.Line{HardwareID: "acme/rack1-node07", Time: time.Now(), Stream: "dhcp", Line: dhcp}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(logCell(dhcp)))); err != nil {
		t.Fatalf("waiting for the DHCP line on the machine's page: %v", err)
	}
	screenshot(t, ctx, "hardware-record-live.png")
}
