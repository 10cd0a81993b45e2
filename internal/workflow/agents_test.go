package workflow

import (
	"context"
	"errors"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// A Hardware's spec.agentID is its machine's name wherever a worker meets
// an agent: a workflow whose hardwareMap names the machine by MAC runs for
// an agent that reports as the agent ID (as Hook's worker_id= and Anvil's
// boot script give it), one that names it by agent ID runs for an agent
// that reports as a MAC, and an agent booted from a second NIC is the same
// machine.
func TestEngineWorkerByMACOrAgentID(t *testing.T) {
	const (
		agentID = "rack1-agent-07"
		mac2    = "3c:ec:ef:12:34:08"
	)
	cases := []struct {
		name    string
		worker  string // hardwareMap's device_1
		reports string // what the agent calls itself
	}{
		{"worker MAC, agent reports agentID", mac, agentID},
		{"worker MAC in upper case, agent reports agentID", "3C-EC-EF-12-34-07", agentID},
		{"worker agentID, agent reports first MAC", agentID, mac},
		{"worker MAC, agent reports second MAC", mac, mac2},
		{"worker second MAC, agent reports agentID", mac2, agentID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			hw := testHardware(t)
			hw.Spec.AgentID = agentID
			hw.Spec.Interfaces = append(hw.Spec.Interfaces, model.Interface{DHCP: &model.DHCP{MAC: mac2}})
			wf := testWorkflow("wf", "rack1-node07")
			wf.Spec.HardwareMap["device_1"] = tc.worker
			e.create(loadYAML[model.Template](t, "testdata/template.yaml"), hw, wf)
			got := e.waitWorkflow("wf", "rendered", rendered)
			if a := got.Status.Tasks[0].AgentID; a != agentID {
				t.Fatalf("task agent = %q; want the Hardware's agent ID %q", a, agentID)
			}
			for _, n := range []string{"stream-image", "hostname", "reboot"} {
				e.runAction(tc.reports, n, model.StateSuccess)
			}
			if s := e.workflow("wf").Status.State; s != model.StateSuccess {
				t.Fatalf("workflow %s; want SUCCESS", s)
			}
		})
	}
}

// Another machine's agent gets nothing and its reports are refused, however
// it names itself.
func TestEngineOtherMachineIsNotTheWorker(t *testing.T) {
	e := newEnv(t)
	hw := testHardware(t)
	hw.Spec.AgentID = "rack1-agent-07"
	other := testHardware(t)
	other.Name = "rack1-node09"
	other.Spec.AgentID = ""
	other.Spec.Interfaces[0].DHCP.MAC = "3c:ec:ef:12:34:09"
	other.Spec.Interfaces[0].DHCP.IP.Address = "10.20.0.19"
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), hw, other, testWorkflow("wf", "rack1-node07"))
	wf := e.waitWorkflow("wf", "rendered", rendered)
	for _, id := range []string{"3c:ec:ef:12:34:09", "rack1-node09", "unknown-agent"} {
		if na, err := e.engine.GetAction(context.Background(), id, 0); !errors.Is(err, ErrNoAction) {
			t.Errorf("GetAction(%s) = %+v, %v; want ErrNoAction", id, na, err)
		}
		_, err := e.engine.ReportActionStatus(context.Background(), ActionReport{WorkflowID: "default/wf", AgentID: id,
			TaskID: wf.Status.Tasks[0].ID, ActionID: wf.Status.Tasks[0].Actions[0].ID, State: model.StateRunning})
		if !errors.Is(err, ErrBadReport) {
			t.Errorf("report as %s: %v; want ErrBadReport", id, err)
		}
	}
}

func TestResolveAgent(t *testing.T) {
	e := newEnv(t)
	a := testHardware(t)
	a.Spec.AgentID = "agent-a"
	b := testHardware(t)
	b.Name, b.Namespace = "b", "other"
	b.Spec.Interfaces[0].DHCP.MAC = "3c:ec:ef:12:34:0b"
	twin := testHardware(t) // the same MAC in another namespace
	twin.Name, twin.Namespace = "twin", "other"
	twin.Spec.Interfaces[0].DHCP.IP.Address = "10.20.0.99"
	e.create(a, b, twin)
	cases := []struct{ ns, id, want string }{
		{"default", mac, "agent-a"},
		{"default", "agent-a", "agent-a"},
		{"other", mac, mac},                            // twin has no agent ID: its first MAC
		{"", mac, mac},                                 // a and twin: ambiguous, the MAC as it is
		{"", "3C:EC:EF:12:34:0B", "3c:ec:ef:12:34:0b"}, // b, by its MAC in another spelling
		{"default", "3c:ec:ef:12:34:0b", "3c:ec:ef:12:34:0b"},
		{"", "nobody", "nobody"},
	}
	for _, tc := range cases {
		got, err := ResolveAgent(context.Background(), e.store, tc.ns, ParseAgentName(tc.id))
		if err != nil || got != tc.want {
			t.Errorf("ResolveAgent(%q, %q) = %q, %v; want %q", tc.ns, tc.id, got, err, tc.want)
		}
	}
}
