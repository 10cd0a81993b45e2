package e2e

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// slowTemplateYAML is a Template whose rendering runs until its time budget
// ends (each of its 10^12 iterations hashes a password), and a Workflow
// that renders it.
const slowTemplateYAML = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: budget-node
spec:
  interfaces:
    - dhcp: {mac: "52:54:00:77:03:01"}
      netboot: {allowPXE: true, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata:
  name: slow
spec:
  data: |
    version: "0.1"
    name: slow
    tasks:
      - name: t
        worker: "{{ .device_1 }}"
        actions: [{name: a, image: i}]
    {{ range (atoi .count) }}{{ $_ := htpasswd "u" "p" }}{{ end }}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata:
  name: slow
spec:
  templateRef: slow
  hardwareRef: budget-node
  hardwareMap: {device_1: "52:54:00:77:03:01", count: "1000000000000"}
`

// TestShutdownDuringTemplateRendering: SIGTERM to `anvil serve` while the
// workflow engine renders a Template that would run for as long as its
// budget allows ends the server: the rendering stops with the engine's
// context instead of holding shutdown. (Before template budgets such a
// rendering ran forever and SIGTERM never returned.)
func TestShutdownDuringTemplateRendering(t *testing.T) {
	requireLab(t)
	ns := newNetns(t, "budget")
	a := startAnvil(t, ns, "127.0.0.1", "--no-dhcp", "--no-tftp", "--no-syslog")
	a.apply(t, slowTemplateYAML)

	// The rendering is under way when the server's own gauge says so.
	deadline := time.Now().Add(60 * time.Second)
	for a.metric(t, "anvil_template_renders_in_progress") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the workflow's rendering was never seen in progress (anvil_template_renders_in_progress)\n%s", tail(a.p.output(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// A bound for a loaded machine, not a measure: a server that waits on
	// the rendering never exits at all.
	select {
	case <-a.p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("anvil serve did not exit after SIGTERM while a template was rendering\n%s", tail(a.p.output(), 40))
	}
	var exitErr *exec.ExitError
	if err := a.p.err; err != nil && !(errors.As(err, &exitErr) && exitErr.ExitCode() == 0) {
		t.Fatalf("anvil serve exited with %v after SIGTERM\n%s", err, tail(a.p.output(), 40))
	}
	if out := a.p.output(); strings.Contains(out, "workflow template rendering failed") {
		t.Errorf("the rendering was recorded as failed (the server's shutdown, not the template, stopped it):\n%s", tail(out, 40))
	}
}
