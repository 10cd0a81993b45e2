package api_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	tinkproto "github.com/anvilproj/anvil/api/proto"
	"github.com/anvilproj/anvil/api/proto/tinkprotoconnect"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/model"
)

// The requests in testdata/tink-agent-*.bin are what the real tink-agent
// (../shared/tinkerbell/tink-agent.xz, tinkerbell/tinkerbell at 9111b51c)
// sent, byte for byte, to a logging WorkflowService: its first GetAction
// (with the attributes it found on the lab machine) and its RUNNING and
// SUCCESS reports of one action.
func TestTinkDecodesRealAgentRequests(t *testing.T) {
	var get tinkproto.ActionRequest
	mustDecode(t, "testdata/tink-agent-getaction.bin", &get)
	a := get.GetAgentAttributes()
	if get.GetAgentId() != "52:54:00:aa:bb:01" || a.GetCpu().GetTotalCores() == 0 || a.GetMemory().GetTotal() == "" ||
		len(a.GetBlock()) == 0 || a.GetBlock()[0].GetName() != "vda" || len(a.GetNetwork()) == 0 || a.GetNetwork()[0].GetMac() == "" ||
		a.GetProduct().GetName() == "" {
		t.Errorf("GetAction decoded as %v; want the agent ID and its machine's CPU, memory, disk vda, NICs and product", &get)
	}
	var running, success tinkproto.ActionStatusRequest
	mustDecode(t, "testdata/tink-agent-report-running.bin", &running)
	mustDecode(t, "testdata/tink-agent-report-success.bin", &success)
	for _, r := range []*tinkproto.ActionStatusRequest{&running, &success} {
		if r.GetWorkflowId() != "default/wf" || r.GetAgentId() != "52:54:00:aa:bb:01" || r.GetTaskId() != "t1" ||
			r.GetActionId() != "a1" || r.GetActionName() != "one" {
			t.Errorf("report decoded as %v; want workflow default/wf, agent, task t1, action a1 \"one\"", r)
		}
	}
	if running.GetActionState() != tinkproto.ActionStatusRequest_RUNNING || running.GetMessage().GetMessage() != "running action" ||
		running.GetExecutionStart().AsTime().Year() != 1 {
		t.Errorf("RUNNING report decoded as %v; want RUNNING, \"running action\", a zero start time", &running)
	}
	if success.GetActionState() != tinkproto.ActionStatusRequest_SUCCESS || success.GetExecutionDuration() == "" ||
		!success.GetExecutionStop().AsTime().After(success.GetExecutionStart().AsTime()) {
		t.Errorf("SUCCESS report decoded as %v; want SUCCESS with its times and duration", &success)
	}
}

func mustDecode(t *testing.T, path string, m proto.Message) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// tinkFixture: m1 has an agent ID and an address, m2 an address, m3 none.
// w1 runs three actions on m1 (named by MAC in hardwareMap), w2 one on m2,
// w3 one task on each of m1 and m2.
const tinkFixture = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m1}
spec:
  agentID: tink-m1
  interfaces:
  - dhcp: {mac: "3c:ec:ef:00:01:01", ip: {address: 10.0.0.1, netmask: 255.255.255.0}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m2}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:00:01:02", hostname: m2-secret-host, ip: {address: 10.0.0.2, netmask: 255.255.255.0}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m3}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:00:01:03"}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: three}
spec:
  data: |
    version: "0.1"
    name: three
    global_timeout: 600
    tasks:
    - name: os
      worker: "{{.device_1}}"
      volumes: [/dev:/dev]
      environment: {B: task, Z: task}
      actions:
      - {name: one, image: quay.io/tinkerbell/actions/one:v1, timeout: 60, command: [sh, -c, "echo one"], volumes: ["/tmp:/out"], environment: {A: action, B: action}, pid: host}
      - {name: two, image: quay.io/tinkerbell/actions/two:v1, timeout: 60}
      - {name: three, image: quay.io/tinkerbell/actions/three:v1, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: one}
spec:
  data: |
    version: "0.1"
    name: one
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - {name: write, image: writefile, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: pair}
spec:
  data: |
    version: "0.1"
    name: pair
    tasks:
    - name: first
      worker: "{{.device_1}}"
      actions:
      - {name: first, image: writefile, timeout: 60}
    - name: second
      worker: "{{.device_2}}"
      actions:
      - {name: second, image: writefile, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w1}
spec: {templateRef: three, hardwareRef: m1, hardwareMap: {device_1: "3c:ec:ef:00:01:01"}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w2}
spec: {templateRef: one, hardwareRef: m2, hardwareMap: {device_1: "3c:ec:ef:00:01:02"}}
`

// tinkEnv is an API server with agent checks on, whose callers' address
// the test chooses (as a trusted proxy's X-Forwarded-For would).
type tinkEnv struct {
	*env
	tink  tinkprotoconnect.WorkflowServiceClient
	from  atomic.Value // string: the caller's address
	audit *audit.Log
}

func newTinkEnv(t *testing.T) *tinkEnv {
	t.Helper()
	key, err := auth.NewAgentKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(t.TempDir() + "/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	te := &tinkEnv{audit: al}
	te.from.Store("")
	te.env = newEnv(t, envOptions{engine: true, configure: func(c *api.Config) {
		c.AgentKey = key
		c.Audit = al
		c.MaxWait = 5 * time.Second
		c.ClientIP = func(context.Context) string { return te.from.Load().(string) }
	}})
	te.tink = tinkprotoconnect.NewWorkflowServiceClient(te.http, te.url, connect.WithGRPC())
	if _, err := apply(te.env, tinkFixture, false); err != nil {
		t.Fatal(err)
	}
	return te
}

// getAction asks as agent from address ip, as often as it takes the engine
// to render the workflows.
func (te *tinkEnv) getAction(t *testing.T, agent, ip string, attrs *tinkproto.AgentAttributes) (*tinkproto.ActionResponse, error) {
	t.Helper()
	te.from.Store(ip)
	for range 20 {
		resp, err := te.tink.GetAction(context.Background(), connect.NewRequest(&tinkproto.ActionRequest{AgentId: agent, AgentAttributes: attrs}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	t.Fatalf("GetAction as %s: nothing after 20 polls", agent)
	return nil, nil
}

func (te *tinkEnv) report(agent, ip string, a *tinkproto.ActionResponse, wfID string, state tinkproto.ActionStatusRequest_StateType) error {
	te.from.Store(ip)
	// As tink-agent sends it: the agent's own times (zero when it starts).
	_, err := te.tink.ReportActionStatus(context.Background(), connect.NewRequest(&tinkproto.ActionStatusRequest{
		WorkflowId: wfID, AgentId: agent, TaskId: a.GetTaskId(), ActionId: a.GetActionId(), ActionName: a.GetName(),
		ActionState: state, ExecutionDuration: "1s", Message: &tinkproto.ActionMessage{Message: "action completed"},
	}))
	return err
}

func (te *tinkEnv) workflow(t *testing.T, name string) *model.Workflow {
	t.Helper()
	obj, err := te.st.Get(context.Background(), model.KindWorkflow, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*model.Workflow)
}

// A tink-agent runs its machine's workflow to SUCCESS over Tinkerbell's
// protocol: the action as upstream's server hands it out, the reports
// recorded on the server's clock, its attributes kept on its Hardware.
func TestTinkAgentRunsWorkflow(t *testing.T) {
	te := newTinkEnv(t)
	attrs := &tinkproto.AgentAttributes{
		Cpu:     &tinkproto.CPU{TotalCores: 4, Processors: []*tinkproto.Processor{{Cores: 4, Vendor: "GenuineIntel"}}},
		Memory:  &tinkproto.Memory{Total: "8GB"},
		Block:   []*tinkproto.Block{{Name: "nvme0n1", Size: "512GB", SerialNumber: "S1"}},
		Network: []*tinkproto.Network{{Name: "eth0", Mac: "3c:ec:ef:00:01:01"}},
		Product: &tinkproto.Product{Name: "R640"},
	}
	start := time.Now()
	a, err := te.getAction(t, "tink-m1", "10.0.0.1", attrs)
	if err != nil {
		t.Fatalf("m1's agent from its address: %v", err)
	}
	want := &tinkproto.ActionResponse{
		WorkflowId: "default/w1", TaskId: a.GetTaskId(), AgentId: "tink-m1", ActionId: a.GetActionId(), Name: "one",
		Image: "quay.io/tinkerbell/actions/one:v1", Timeout: 60, Command: []string{"sh", "-c", "echo one"},
		Volumes:     []string{"/dev:/dev", "/tmp:/out"},
		Environment: []string{"A=action", "B=action", "Z=task"},
		Pid:         "host",
	}
	if !proto.Equal(a, want) || a.GetTaskId() == "" || a.GetActionId() == "" {
		t.Errorf("GetAction = %v\nwant %v", a, want)
	}

	// The attributes, on m1 in Tinkerbell's shape.
	obj, err := te.st.Get(context.Background(), model.KindHardware, "default", "m1")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(obj.(*model.Hardware).Annotations[model.AgentAttributesAnnotation]), &got); err != nil {
		t.Fatalf("annotation %s: %v", model.AgentAttributesAnnotation, err)
	}
	wantAttrs := `{"blockDevices":[{"name":"nvme0n1","serialNumber":"S1","size":"512GB"}],"cpu":{"processors":[{"cores":4,"vendor":"GenuineIntel"}],"totalCores":4},"memory":{"total":"8GB"},"networkInterfaces":[{"mac":"3c:ec:ef:00:01:01","name":"eth0"}],"product":{"name":"R640"}}`
	if b, _ := json.Marshal(got); string(b) != wantAttrs {
		t.Errorf("attributes on m1:\n%s\nwant\n%s", b, wantAttrs)
	}
	// And as its status.attributes, typed.
	if st := obj.(*model.Hardware).Status.Attributes; st == nil || st.CPU == nil || st.CPU.TotalCores != 4 ||
		len(st.BlockDevices) != 1 || st.BlockDevices[0].SerialNumber != "S1" || st.Product == nil || st.Product.Name != "R640" {
		t.Errorf("status.attributes on m1 = %+v; want the attributes sent", st)
	}
	rv := obj.GetObjectMeta().ResourceVersion

	for i, name := range []string{"one", "two", "three"} {
		if i > 0 {
			if a, err = te.getAction(t, "tink-m1", "10.0.0.1", attrs); err != nil || a.GetName() != name {
				t.Fatalf("action %d: %v, %v; want %s", i+1, a, err, name)
			}
		}
		for _, s := range []tinkproto.ActionStatusRequest_StateType{tinkproto.ActionStatusRequest_RUNNING, tinkproto.ActionStatusRequest_SUCCESS} {
			if err := te.report("tink-m1", "10.0.0.1", a, "default/w1", s); err != nil {
				t.Fatalf("report %s %s: %v", name, s, err)
			}
		}
	}
	// A final report sent again (the agent missed our answer) changes nothing.
	if err := te.report("tink-m1", "10.0.0.1", a, "default/w1", tinkproto.ActionStatusRequest_SUCCESS); err != nil {
		t.Errorf("repeated final report: %v", err)
	}
	wf := te.workflow(t, "w1")
	if wf.Status.State != model.StateSuccess {
		t.Fatalf("w1 is %s; want SUCCESS", wf.Status.State)
	}
	for _, act := range wf.Status.Tasks[0].Actions {
		if act.State != model.StateSuccess || act.ExecutionStart == nil || act.ExecutionStart.Before(start.Add(-time.Second)) ||
			act.ExecutionStop == nil || act.Message != "action completed" {
			t.Errorf("action %s: state %s, start %v, stop %v, message %q; want SUCCESS on the server's clock",
				act.Name, act.State, act.ExecutionStart, act.ExecutionStop, act.Message)
		}
	}
	// Unchanged attributes are not written again.
	obj, err = te.st.Get(context.Background(), model.KindHardware, "default", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if obj.GetObjectMeta().ResourceVersion != rv {
		t.Errorf("m1 was written again (resourceVersion %s, then %s) for the same attributes", rv, obj.GetObjectMeta().ResourceVersion)
	}
}

// refusedTink checks a refusal: PERMISSION_DENIED, naming nothing of m2's
// beyond what the caller sent itself.
func refusedTink(t *testing.T, what string, err error, sent ...string) {
	t.Helper()
	wantCode(t, what, err, connect.CodePermissionDenied)
	for _, secret := range []string{"m2", "10.0.0.2", "3c:ec:ef:00:01:02", "w2", "m2-secret-host"} {
		if err != nil && strings.Contains(err.Error(), secret) && !slices.Contains(sent, secret) {
			t.Errorf("%s: the refusal names %q: %v", what, secret, err)
		}
	}
}

// refusals returns anvil_agent_refused_total{protocol="tinkerbell"} by reason.
func refusals(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "anvil_agent_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["protocol"] == "tinkerbell" {
				out[labels["reason"]] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// A tink-agent gets and reports only its own machine's actions: a call is
// bound to a Hardware by its agent ID and the caller's address, and a
// report on another machine's workflow or task is refused — logged,
// counted, audited, and naming nothing of the other machine's.
func TestTinkForgedCalls(t *testing.T) {
	te := newTinkEnv(t)
	before := refusals(t)
	m2, err := te.getAction(t, "3c:ec:ef:00:01:02", "10.0.0.2", nil)
	if err != nil || m2.GetWorkflowId() != "default/w2" {
		t.Fatalf("m2's own agent: %v, %v", m2, err)
	}
	m1, err := te.getAction(t, "tink-m1", "10.0.0.1", nil)
	if err != nil {
		t.Fatal(err)
	}

	_, err = te.getAction(t, "3c:ec:ef:00:01:02", "10.0.0.1", nil)
	refusedTink(t, "GetAction as m2 from m1's address", err, "3c:ec:ef:00:01:02")
	_, err = te.getAction(t, "tink-m1", "10.0.0.2", nil)
	refusedTink(t, "GetAction as m1 from m2's address", err, "10.0.0.2")
	_, err = te.getAction(t, "nobody", "10.0.0.1", nil)
	refusedTink(t, "GetAction as an unknown agent", err)
	_, err = te.getAction(t, "3c:ec:ef:00:01:03", "10.0.0.3", nil)
	refusedTink(t, "GetAction as m3, whose Hardware has no address", err)
	_, err = te.getAction(t, strings.Repeat("x", 300), "10.0.0.1", nil)
	wantCode(t, "GetAction with a 300-byte agent ID", err, connect.CodeInvalidArgument)
	if err != nil && strings.Contains(err.Error(), "xxxx") {
		t.Errorf("the refusal repeats the 300-byte agent ID: %v", err)
	}

	refusedTink(t, "m1 reports on m2's workflow",
		te.report("tink-m1", "10.0.0.1", m2, "default/w2", tinkproto.ActionStatusRequest_RUNNING))
	refusedTink(t, "m1 reports as m2 on m2's workflow",
		te.report("3c:ec:ef:00:01:02", "10.0.0.1", m2, "default/w2", tinkproto.ActionStatusRequest_RUNNING), "3c:ec:ef:00:01:02")
	refusedTink(t, "m1 reports on a workflow that does not exist",
		te.report("tink-m1", "10.0.0.1", m1, "default/nope", tinkproto.ActionStatusRequest_RUNNING))

	// Nothing changed w2; m2's own report passes.
	if s := te.workflow(t, "w2").Status.Tasks[0].Actions[0].State; s != model.StatePending {
		t.Errorf("w2's action after the forged reports: %s; want PENDING", s)
	}
	if err := te.report("3c:ec:ef:00:01:02", "10.0.0.2", m2, "default/w2", tinkproto.ActionStatusRequest_RUNNING); err != nil {
		t.Errorf("m2's own report: %v", err)
	}

	after := refusals(t)
	for reason, n := range map[string]float64{"wrong_ip": 3, "unknown_agent": 1, "no_address": 1, "wrong_agent": 1, "unknown_workflow": 1} {
		if d := after[reason] - before[reason]; d != n {
			t.Errorf("anvil_agent_refused_total{protocol=tinkerbell, reason=%s} rose by %v; want %v", reason, d, n)
		}
	}
	recs, err := te.audit.List(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var reports int
	for _, r := range recs {
		if r.Procedure == tinkprotoconnect.WorkflowServiceReportActionStatusProcedure && r.Outcome == "permission_denied" &&
			r.ClientIP == "10.0.0.1" && r.Unauthenticated && strings.HasPrefix(r.Subject, "agent:") && r.Namespace == "default" &&
			strings.HasPrefix(r.Object, "workflow=") {
			reports++
		}
	}
	if reports != 3 {
		t.Errorf("audit log: %d refused reports from 10.0.0.1; want 3\n%+v", reports, recs)
	}
}

// In a workflow with a task for each of two machines, each agent reports
// only on its own task.
func TestTinkReportOnlyOwnTask(t *testing.T) {
	te := newTinkEnv(t)
	if _, err := apply(te.env, `apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w3}
spec: {templateRef: pair, hardwareMap: {device_1: "3c:ec:ef:00:01:01", device_2: "3c:ec:ef:00:01:02"}}
`, false); err != nil {
		t.Fatal(err)
	}
	w3 := te.workflow(t, "w3")
	for deadline := time.Now().Add(10 * time.Second); len(w3.Status.Tasks) < 2; w3 = te.workflow(t, "w3") {
		if time.Now().After(deadline) {
			t.Fatal("w3 not rendered after 10s")
		}
		time.Sleep(5 * time.Millisecond) // the engine renders in the background
	}
	second := &tinkproto.ActionResponse{TaskId: w3.Status.Tasks[1].ID, ActionId: w3.Status.Tasks[1].Actions[0].ID, Name: "second"}
	err := te.report("tink-m1", "10.0.0.1", second, "default/w3", tinkproto.ActionStatusRequest_RUNNING)
	refusedTink(t, "m1 reports on m2's task of a shared workflow", err)
	if !strings.Contains(err.Error(), "not one of its own") {
		t.Errorf("refusal %v; want it to say the action is not the agent's own", err)
	}
}
