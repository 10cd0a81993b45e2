package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The agent tests run the real binaries without a VM: `anvil serve` and
// `anvil agent` (as on a machine that is already up) in a namespace, with
// image2disk writing to a file. They cover what the issue asks of failures:
// a bad URL ends the workflow FAILED with the reason in `anvil describe` and
// `anvil logs`; an action with retries succeeds on its second try.

// agentYAML is a Hardware, and a Template and Workflow named name with one
// image2disk action (with retries) writing url to disk.
func agentYAML(name, mac, url, disk string, retries int) string {
	return fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: agent-node
spec:
  interfaces:
    - dhcp: {mac: %[2]s}
      netboot: {allowPXE: true, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata:
  name: %[1]s
spec:
  data: |
    version: "0.1"
    name: %[1]s
    global_timeout: 120
    tasks:
      - name: install
        worker: "{{.device_1}}"
        actions:
          - name: stream-image
            image: quay.io/tinkerbell/actions/image2disk:v1.0.0
            timeout: 60
            retries: %[5]d
            environment:
              IMG_URL: %[3]s
              DEST_DISK: %[4]s
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata:
  name: %[1]s
spec:
  templateRef: %[1]s
  hardwareRef: agent-node
  hardwareMap: {device_1: %[2]s}
`, name, mac, url, disk, retries)
}

// runAgentProcess runs `anvil agent --exit-when-done` for mac in ns and
// returns its output and exit error.
func runAgentProcess(t *testing.T, a *anvil, mac string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The agent's token is in the machine's boot script, as a booted
	// machine gets it (the boot path needs no credentials).
	script, err := a.ns.exec(ctx, "curl", "-fsS", a.base+"/ipxe/script/"+mac+"/auto.ipxe")
	if err != nil {
		t.Fatalf("boot script of %s: %v\n%s", mac, err, script)
	}
	m := regexp.MustCompile(`anvil\.token=(\S+)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("the boot script of %s carries no anvil.token=:\n%s", mac, script)
	}
	return a.ns.exec(ctx, assets.anvil, "--server", a.base, "agent", "--worker-id", mac, "--token", m[1], "--exit-when-done")
}

func TestAgentFailureAndRetry(t *testing.T) {
	requireLab(t)
	ns := newNetns(t, "agent")
	a := startAnvil(t, ns, "127.0.0.1", "--no-dhcp", "--no-tftp", "--no-syslog")
	image := make([]byte, 3<<20+123)
	if _, err := rand.Read(image); err != nil {
		t.Fatal(err)
	}
	var flakyGets atomic.Int32
	images := http.NewServeMux()
	images.HandleFunc("/flaky.raw", func(w http.ResponseWriter, r *http.Request) {
		if flakyGets.Add(1) == 1 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		http.ServeContent(w, r, "flaky.raw", time.Time{}, bytes.NewReader(image))
	})
	imageAddr := listenInNetns(t, ns, "127.0.0.1:8097", images)
	mac := "52:54:00:77:02:01"
	dir := t.TempDir()
	// The "disks": image2disk writes to a device that exists.
	for _, f := range []string{"bad.raw", "flaky.raw"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A bad URL: FAILED, and the reason is where an operator looks.
	bad := "http://" + imageAddr + "/no-such-image.raw"
	a.apply(t, agentYAML("bad-url", mac, bad, filepath.Join(dir, "bad.raw"), 0))
	out, err := runAgentProcess(t, a, mac)
	if err == nil {
		t.Fatalf("anvil agent exited 0 for a failed workflow; output:\n%s", out)
	}
	if got := workflowState(a, "bad-url"); got != "FAILED" {
		t.Fatalf("workflow bad-url is %q; want FAILED\nagent output:\n%s", got, out)
	}
	describe := a.cli(t, "describe", "workflow", "bad-url")
	for _, want := range []string{"FAILED", "no-such-image.raw", "404"} {
		if !strings.Contains(describe, want) {
			t.Errorf("anvil describe lacks %q:\n%s", want, describe)
		}
	}
	logs := a.cli(t, "logs", "workflow/bad-url")
	if !strings.Contains(logs, "404") || !strings.Contains(logs, "stream-image") {
		t.Errorf("anvil logs lacks the failure:\n%s", logs)
	}

	// A flaky URL and retries: 1: the second attempt succeeds.
	disk := filepath.Join(dir, "flaky.raw")
	a.apply(t, agentYAML("retried", mac, "http://"+imageAddr+"/flaky.raw", disk, 1))
	out, err = runAgentProcess(t, a, mac)
	if err != nil {
		t.Fatalf("anvil agent: %v\n%s", err, out)
	}
	wf := getWorkflow(t, a, "retried")
	if wf.Status.State != "SUCCESS" {
		t.Fatalf("workflow retried is %s; want SUCCESS\n%s", wf.Status.State, out)
	}
	if act := wf.Status.Tasks[0].Actions[0]; act.Attempt != 2 {
		t.Errorf("stream-image attempt = %d; want 2 (failed once, then succeeded)", act.Attempt)
	}
	got, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, image) {
		t.Errorf("the disk file holds %d bytes that differ from the %d-byte image", len(got), len(image))
	}
	describe = a.cli(t, "describe", "workflow", "retried")
	if !strings.Contains(describe, "503") {
		t.Errorf("anvil describe does not show the first attempt's failure (503):\n%s", describe)
	}
}
