package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/model"
)

// commissionFixture: two machines, a commissioning template of two
// checks, a workflow of it for each machine.
const commissionFixture = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m1}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:00:00:01", ip: {address: 127.0.0.1, netmask: 255.0.0.0}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m2}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:00:00:02", ip: {address: 10.9.9.9, netmask: 255.0.0.0}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: commission}
spec:
  data: |
    version: "0.1"
    name: commission
    tasks:
    - name: commission
      worker: "{{.device_1}}"
      actions:
      - {name: smart, image: anvil/commission-smart, timeout: 60}
      - {name: memory, image: commission-memory, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: c1}
spec: {templateRef: commission, hardwareRef: m1, hardwareMap: {device_1: "3c:ec:ef:00:00:01"}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: c2}
spec: {templateRef: commission, hardwareRef: m2, hardwareMap: {device_1: "3c:ec:ef:00:00:02"}}
`

// agentDriver plays a machine's agent against the API.
type agentDriver struct {
	t     *testing.T
	e     *env
	agent string
	token string
}

func (d *agentDriver) header(r interface{ Header() http.Header }) {
	if d.token != "" {
		r.Header().Set(v1.AgentTokenHeader, d.token)
	}
}

func (d *agentDriver) next() *v1.GetActionResponse {
	d.t.Helper()
	for range 20 { // the engine renders the workflow asynchronously
		r := connect.NewRequest(&v1.GetActionRequest{AgentId: d.agent, Wait: durationpb.New(5 * time.Second)})
		d.header(r)
		resp, err := d.e.ag.GetAction(context.Background(), r)
		if connect.CodeOf(err) == connect.CodeNotFound {
			continue
		}
		if err != nil {
			d.t.Fatalf("GetAction for %s: %v", d.agent, err)
		}
		return resp.Msg
	}
	d.t.Fatalf("no action for %s after 20 polls", d.agent)
	return nil
}

// run reports a start and an end of a, with checks at the end; it returns
// the workflow's state.
func (d *agentDriver) run(a *v1.GetActionResponse, state v1.ActionState, checks ...*v1.CommissioningCheck) string {
	d.t.Helper()
	var ws string
	for i, st := range []v1.ActionState{v1.ActionState_ACTION_STATE_RUNNING, state} {
		m := &v1.ReportActionStatusRequest{WorkflowId: a.GetWorkflowId(), AgentId: d.agent, TaskId: a.GetTaskId(),
			ActionId: a.GetActionId(), ActionName: a.GetName(), ActionState: st}
		if i == 1 {
			m.Checks = checks
		}
		r := connect.NewRequest(m)
		d.header(r)
		resp, err := d.e.ag.ReportActionStatus(context.Background(), r)
		if err != nil {
			d.t.Fatalf("report %s %v: %v", a.GetName(), st, err)
		}
		ws = resp.Msg.GetWorkflowState()
	}
	return ws
}

func chk(name, result, detail string, values map[string]string) *v1.CommissioningCheck {
	return &v1.CommissioningCheck{Name: name, Result: result, Detail: detail, Values: values,
		Time: timestamppb.New(time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))}
}

func hardware(t *testing.T, e *env, name string) *model.Hardware {
	t.Helper()
	obj, err := e.st.Get(context.Background(), model.KindHardware, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*model.Hardware)
}

// TestCommissioningStored: the checks an agent reports land on its own
// Hardware's status.commissioning, action by action; the machine is
// labelled passed once its workflow ends SUCCESS. A report forged for
// another machine's workflow is refused and writes nothing anywhere.
func TestCommissioningStored(t *testing.T) {
	key, err := auth.NewAgentKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{engine: true, configure: func(c *api.Config) { c.AgentKey = key }})
	ctx := context.Background()
	if _, err := apply(e, commissionFixture, false); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		obj, err := e.st.Get(ctx, model.KindWorkflow, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		return key.Token("default/"+name, obj.GetObjectMeta().UID)
	}
	m1 := &agentDriver{t: t, e: e, agent: "3c:ec:ef:00:00:01", token: token("c1")}

	a := m1.next()
	if a.GetName() != "smart" || a.GetImage() != "anvil/commission-smart" {
		t.Fatalf("first action %s %s", a.GetName(), a.GetImage())
	}
	m1.run(a, v1.ActionState_ACTION_STATE_SUCCESS,
		chk("smart/nvme0n1", "passed", "NVMe health: no critical warning", map[string]string{"mediaErrors": "0", "percentageUsed": "3"}),
		chk("smart/vda", "unsupported", "neither NVMe nor SCSI", nil))
	c := hardware(t, e, "m1").Status.Commissioning
	if c == nil || c.Workflow != "default/c1" || c.Result != "" || len(c.Checks) != 2 ||
		c.Checks[0].Values["percentageUsed"] != "3" || c.Checks[1].Result != "unsupported" || c.Checks[0].Time == nil {
		t.Fatalf("after the first action, status.commissioning = %+v", c)
	}
	if l, ok := hardware(t, e, "m1").Labels[model.LabelCommissioning]; ok {
		t.Fatalf("labelled %q before the workflow ended", l)
	}

	// A forged report: m1's agent, with m1's token, on m2's workflow.
	forged := connect.NewRequest(&v1.ReportActionStatusRequest{WorkflowId: "default/c2", AgentId: "3c:ec:ef:00:00:02",
		TaskId: a.GetTaskId(), ActionId: a.GetActionId(), ActionName: "smart", ActionState: v1.ActionState_ACTION_STATE_FAILED,
		Checks: []*v1.CommissioningCheck{chk("smart/sda", "failed", "forged", nil)}})
	m1.header(forged)
	_, err = e.ag.ReportActionStatus(ctx, forged)
	wantCode(t, "a report with checks on another machine's workflow", err, connect.CodePermissionDenied)
	if m2 := hardware(t, e, "m2"); m2.Status.Commissioning != nil || m2.Labels[model.LabelCommissioning] != "" {
		t.Fatalf("the forged report wrote on m2: %+v %v", m2.Status.Commissioning, m2.Labels)
	}

	a = m1.next()
	if ws := m1.run(a, v1.ActionState_ACTION_STATE_SUCCESS, chk("memory", "passed", "MemTotal 1.9 GiB", map[string]string{"memTotalBytes": "2062475264"})); ws != "SUCCESS" {
		t.Fatalf("workflow %s after its last action", ws)
	}
	hw := hardware(t, e, "m1")
	c = hw.Status.Commissioning
	if hw.Labels[model.LabelCommissioning] != "passed" || c.Result != "passed" || len(c.Checks) != 3 || c.Checks[2].Name != "memory" {
		t.Fatalf("after the workflow: label %q, status.commissioning %+v", hw.Labels[model.LabelCommissioning], c)
	}
	if hw.Status.Commissioning.Checks[0].Name != "smart/nvme0n1" {
		t.Errorf("checks out of their reported order: %+v", c.Checks)
	}
}

// TestCommissioningFailedRefusesWorkflows: a failed check marks the
// machine at once; no new workflow may then target it, by hardwareRef or
// by a hardwareMap MAC, and the refusal says how to clear it. Removing the
// label clears it.
func TestCommissioningFailedRefusesWorkflows(t *testing.T) {
	e := newEnv(t, envOptions{engine: true})
	ctx := context.Background()
	if _, err := apply(e, commissionFixture, false); err != nil {
		t.Fatal(err)
	}
	m2 := &agentDriver{t: t, e: e, agent: "3c:ec:ef:00:00:02"}
	a := m2.next()
	ws := m2.run(a, v1.ActionState_ACTION_STATE_FAILED,
		chk("smart/nvme0n1", "failed", "critical warning 0x04 (reliability degraded by media or internal errors)", map[string]string{"criticalWarning": "0x04"}),
		chk("smart/sda", "bogus", strings.Repeat("x", 5000), nil))
	if ws != "FAILED" {
		t.Fatalf("workflow %s after a failed action", ws)
	}
	hw := hardware(t, e, "m2")
	c := hw.Status.Commissioning
	if hw.Labels[model.LabelCommissioning] != "failed" || c == nil || c.Result != "failed" || !strings.Contains(c.Message, "smart/nvme0n1") {
		t.Fatalf("label %q, status.commissioning %+v", hw.Labels[model.LabelCommissioning], c)
	}
	// An unknown result is a failure; an over-long detail is cut.
	if got := c.Checks[1]; got.Result != "failed" || !strings.HasPrefix(got.Detail, `unknown result "bogus"`) || len(got.Detail) > 1024 {
		t.Errorf("the bogus check is stored as %s, %d bytes of detail", got.Result, len(got.Detail))
	}

	byRef := `apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: install-m2}
spec: {templateRef: commission, hardwareRef: m2, hardwareMap: {device_1: "3c:ec:ef:00:00:02"}}
`
	byMAC := `apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: install-m2-by-mac}
spec: {templateRef: commission, hardwareMap: {device_1: "3C-EC-EF-00-00-02"}}
`
	for what, doc := range map[string]string{"spec.hardwareRef": byRef, "spec.hardwareMap.device_1": byMAC} {
		_, err := apply(e, doc, false)
		if err == nil {
			t.Fatalf("a workflow for the failed machine by %s was admitted", what)
		}
		for _, want := range []string{what, "Hardware default/m2 failed commissioning (failed: smart/nvme0n1, smart/sda)",
			"anvil.io/commissioning=failed", "re-commission it", "remove the label"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal by %s does not say %q: %v", what, want, err)
			}
		}
	}
	// The API's Create refuses it too.
	wf := &v1.Workflow{ApiVersion: model.APIVersion, Kind: model.KindWorkflow, Metadata: &v1.ObjectMeta{Name: "created"},
		Spec: mustStruct(t, `{"templateRef": "commission", "hardwareRef": "m2"}`)}
	_, err := e.wf.Create(ctx, connect.NewRequest(&v1.CreateWorkflowRequest{Workflow: wf}))
	if err == nil || !strings.Contains(err.Error(), "failed commissioning") {
		t.Errorf("Create of a workflow for the failed machine: %v", err)
	}
	// The machine's own workflow can still be changed (and deleted); m1's
	// cannot be pointed at it. (Workflows alone: the fixture's Hardware
	// has no label, and applying it would clear the mark.)
	wfDoc := func(name, hw, mac, extra string) string {
		return "apiVersion: tinkerbell.org/v1alpha1\nkind: Workflow\nmetadata: {name: " + name + "}\n" +
			"spec: {templateRef: commission, hardwareRef: " + hw + ", hardwareMap: {device_1: \"" + mac + "\"}" + extra + "}\n"
	}
	if _, err := apply(e, wfDoc("c2", "m2", "3c:ec:ef:00:00:02", ", disabled: true"), false); err != nil {
		t.Errorf("changing the failed machine's existing workflow: %v", err)
	}
	if _, err := apply(e, wfDoc("c1", "m2", "3c:ec:ef:00:00:02", ""), false); err == nil || !strings.Contains(err.Error(), "failed commissioning") {
		t.Errorf("another workflow pointed at the failed machine: %v", err)
	}
	if !hardware(t, e, "m2").CommissioningFailed() {
		t.Fatal("the failed mark is gone")
	}

	// Removing the label clears it: applying the Hardware's manifest,
	// which has no such label, sets its labels as written, and keeps its
	// status.
	if _, err := apply(e, commissionFixture, false); err != nil {
		t.Fatal(err)
	}
	if hw := hardware(t, e, "m2"); hw.Labels[model.LabelCommissioning] != "" || hw.Status.Commissioning == nil {
		t.Fatalf("after the manifest was applied again: labels %v, status.commissioning %+v", hw.Labels, hw.Status.Commissioning)
	}
	if _, err := apply(e, byRef, false); err != nil {
		t.Fatalf("after the label was removed: %v", err)
	}
}
