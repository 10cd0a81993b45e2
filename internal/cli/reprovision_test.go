package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/model"
)

// getObject returns `anvil get KIND NAME -o json` decoded.
func getObject[T any](t *testing.T, srv string, args ...string) T {
	t.Helper()
	var out T
	if err := json.Unmarshal([]byte(mustRun(t, srv, append([]string{"get"}, append(args, "-o", "json")...)...)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func allowPXE(t *testing.T, srv, hw string) []bool {
	t.Helper()
	h := getObject[model.Hardware](t, srv, "hardware", hw)
	var out []bool
	for _, i := range h.Spec.Interfaces {
		out = append(out, i.Netboot != nil && model.BoolValue(i.Netboot.AllowPXE, false))
	}
	return out
}

// waitState polls a workflow until its state is want.
func waitState(t *testing.T, srv, name string, want model.State) model.Workflow {
	t.Helper()
	for i := 0; ; i++ {
		w := getObject[model.Workflow](t, srv, "workflow", name)
		if w.Status.State == want {
			return w
		}
		if i > 500 {
			t.Fatalf("workflow %s is %q; want %s", name, w.Status.State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReprovision: a machine installed once is provisioned again — a new
// workflow from the template, netboot re-enabled — and runs it to the end;
// what cannot be done is refused with what to do instead.
func TestReprovision(t *testing.T) {
	srv := startServer(t)
	mustRun(t, srv, "apply", "-f", filepath.Join(examples, "hardware.yaml"), "-f", filepath.Join(examples, "template.yaml"))

	// Refusals that change nothing.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "no template flag", args: []string{"reprovision", "rack1-node07"}, want: "--template is required"},
		{name: "unknown hardware", args: []string{"reprovision", "nope", "--template", "debian-raw"},
			want: "hardware default/nope not found"},
		{name: "unknown template", args: []string{"reprovision", "rack1-node07", "--template", "nope"},
			want: "template default/nope not found"},
		{name: "other namespace", args: []string{"reprovision", "rack1-node07", "--template", "debian-raw", "-n", "lab"},
			want: "hardware lab/rack1-node07 not found"},
		{name: "bad name", args: []string{"reprovision", "rack1-node07", "--template", "debian-raw", "--name", "Not_A_Name"},
			want: "choose another name with --name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, srv, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("anvil %s: %v; want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
	if out := mustRun(t, srv, "get", "workflows"); !strings.Contains(out, "No workflow found") {
		t.Fatalf("a refused reprovision created a workflow:\n%s", out)
	}

	// The first install.
	out := mustRun(t, srv, "reprovision", "rack1-node07", "--template", "debian-raw", "--name", "install-1")
	for _, want := range []string{
		"workflow/install-1 created (template debian-raw, hardware rack1-node07)",
		"hardware/rack1-node07: allowPXE true on every interface (1); its next network boot runs the workflow",
		"follow it: anvil workflow watch install-1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reprovision output lacks %q:\n%s", want, out)
		}
	}
	wf := getObject[model.Workflow](t, srv, "workflow", "install-1")
	if wf.Spec.TemplateRef != "debian-raw" || wf.Spec.HardwareRef != "rack1-node07" ||
		wf.Spec.HardwareMap["device_1"] != "3c:ec:ef:12:34:07" || len(wf.Spec.HardwareMap) != 1 ||
		wf.Spec.BootOptions == nil || !wf.Spec.BootOptions.ToggleAllowNetboot || wf.Spec.BootOptions.BootMode != "netboot" {
		t.Errorf("workflow spec = %+v; want template debian-raw, hardware rack1-node07, device_1 its MAC, toggleAllowNetboot", wf.Spec)
	}

	// While it is unfinished, another is refused, naming it and the way out.
	_, _, err := run(t, srv, "reprovision", "rack1-node07", "--template", "debian-raw")
	if err == nil || !strings.Contains(err.Error(), "hardware default/rack1-node07 already has an unfinished workflow: install-1 (") ||
		!strings.Contains(err.Error(), "anvil delete workflow install-1 -n default") {
		t.Errorf("reprovision over an unfinished workflow: %v; want a refusal naming install-1 and how to delete it", err)
	}

	runAgent(t, srv, "install-1")
	waitState(t, srv, "install-1", model.StateSuccess)
	// toggleAllowNetboot: the finished install sends the machine to its disk.
	waitFor(t, "allowPXE false after SUCCESS", func() bool { return !allowPXE(t, srv, "rack1-node07")[0] })

	// Reprovision: netboot is back, and the new workflow runs.
	stdout, stderr, err := run(t, srv, "reprovision", "rack1-node07", "--template", "debian-raw")
	if err != nil {
		t.Fatalf("reprovision after SUCCESS: %v\n%s", err, stderr)
	}
	m := regexp.MustCompile(`workflow/(rack1-node07-\d{8}-\d{6}) created`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("reprovision output names no default workflow rack1-node07-YYYYMMDD-HHMMSS:\n%s", stdout)
	}
	if !strings.Contains(stdout, "allowPXE true on every interface (1)") || stderr != "" {
		t.Errorf("reprovision output = %q, stderr %q; want allowPXE on its one interface and no warning", stdout, stderr)
	}
	if got := allowPXE(t, srv, "rack1-node07"); len(got) != 1 || !got[0] {
		t.Errorf("allowPXE after reprovision = %v; want [true]", got)
	}
	w2 := waitState(t, srv, m[1], model.StatePending)
	if len(w2.Status.Tasks) == 0 || w2.Status.Tasks[0].AgentID != "3c:ec:ef:12:34:07" {
		t.Errorf("rendered tasks %+v; want the worker 3c:ec:ef:12:34:07", w2.Status.Tasks)
	}
	runAgent(t, srv, m[1])
	waitState(t, srv, m[1], model.StateSuccess)

	// A name that is taken is refused, not overwritten.
	_, _, err = run(t, srv, "reprovision", "rack1-node07", "--template", "debian-raw", "--name", "install-1")
	if err == nil || !strings.Contains(err.Error(), "a workflow default/install-1 already exists") {
		t.Errorf("reprovision with a taken name: %v; want it refused", err)
	}
	if w := getObject[model.Workflow](t, srv, "workflow", "install-1"); w.Status.State != model.StateSuccess {
		t.Errorf("install-1 is %s after a refused reprovision; want it untouched (SUCCESS)", w.Status.State)
	}
}

// runAgent drives the simulated agent of 3c:ec:ef:12:34:07 through workflow
// name.
func runAgent(t *testing.T, srv, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := agentsim.Run(ctx, agentsim.Config{
			Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, srv),
			AgentID: "3c:ec:ef:12:34:07", ActionTime: 5 * time.Millisecond, ProgressSteps: 1,
		})
		done <- err
	}()
	mustRun(t, srv, "workflow", "watch", name)
	if err := <-done; err != nil {
		t.Fatalf("agent: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 500 {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReprovisionOneAtATime: of concurrent reprovisions of one machine,
// exactly one creates a workflow; the others are told it is busy.
func TestReprovisionOneAtATime(t *testing.T) {
	srv := startServer(t)
	mustRun(t, srv, "apply", "-f", filepath.Join(examples, "hardware.yaml"), "-f", filepath.Join(examples, "template.yaml"))
	client := anvilv1connect.NewWorkflowServiceClient(http.DefaultClient, srv)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = client.Reprovision(context.Background(), connect.NewRequest(&v1.ReprovisionRequest{
				Hardware: "rack1-node07", Template: "debian-raw", Workflow: "race-" + string(rune('a'+i)),
			}))
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case connect.CodeOf(err) != connect.CodeFailedPrecondition:
			t.Errorf("a concurrent reprovision failed with %v; want FAILED_PRECONDITION", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d of %d concurrent reprovisions succeeded; want exactly 1", ok, n)
	}
	if out := mustRun(t, srv, "get", "workflows", "-o", "name"); strings.Count(out, "\n") != 1 {
		t.Errorf("workflows after the race:\n%s\nwant one", out)
	}
}

// TestReprovisionWarnsAboutAllowWorkflow: an interface that may not run
// workflows is reported, and the MAC of device_1 is canonical however the
// Hardware spells it.
func TestReprovisionWarnsAboutAllowWorkflow(t *testing.T) {
	srv := startServer(t)
	hw := filepath.Join(t.TempDir(), "hw.yaml")
	doc := `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m1, namespace: lab}
spec:
  interfaces:
    - dhcp: {mac: 5254.00AA.BB01}
      netboot: {allowWorkflow: false}
    - dhcp: {mac: 52-54-00-AA-BB-02}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: t1, namespace: lab}
spec:
  data: |
    version: "0.1"
    name: t1
    global_timeout: 60
    tasks:
      - name: one
        worker: "{{.device_1}}"
        actions:
          - {name: a, image: quay.io/tinkerbell/actions/cexec:v1.0.0, timeout: 10}
`
	if err := os.WriteFile(hw, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, srv, "apply", "-f", hw)
	stdout, stderr, err := run(t, srv, "reprovision", "m1", "-t", "t1", "-n", "lab", "--name", "again")
	if err != nil {
		t.Fatalf("reprovision: %v", err)
	}
	if !strings.Contains(stderr, "warning: spec.interfaces[0].netboot.allowWorkflow is false") {
		t.Errorf("stderr = %q; want a warning about allowWorkflow", stderr)
	}
	if !strings.Contains(stdout, "allowPXE true on every interface (2)") || !strings.Contains(stdout, "follow it: anvil workflow watch again -n lab") {
		t.Errorf("stdout = %q; want allowPXE on both interfaces and the watch command with -n lab", stdout)
	}
	wf := getObject[model.Workflow](t, srv, "workflow", "again", "-n", "lab")
	if got := wf.Spec.HardwareMap["device_1"]; got != "52:54:00:aa:bb:01" {
		t.Errorf("device_1 = %q; want the canonical first MAC 52:54:00:aa:bb:01", got)
	}
	h := getObject[model.Hardware](t, srv, "hardware", "m1", "-n", "lab")
	if h.Spec.Interfaces[0].DHCP.MAC != "5254.00AA.BB01" {
		t.Errorf("the Hardware's MAC became %q; reprovision must keep its spelling", h.Spec.Interfaces[0].DHCP.MAC)
	}
	for i, ifc := range h.Spec.Interfaces {
		if ifc.Netboot == nil || !model.BoolValue(ifc.Netboot.AllowPXE, false) ||
			i == 0 && model.BoolValue(ifc.Netboot.AllowWorkflow, true) {
			t.Errorf("interface %d netboot = %+v; want allowPXE true (and interface 0's allowWorkflow kept false)", i, ifc.Netboot)
		}
	}
}
