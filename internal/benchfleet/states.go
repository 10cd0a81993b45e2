package benchfleet

import (
	"fmt"

	"github.com/anvilproj/anvil/internal/model"
)

// A fleet at rest, for what reads the store rather than drives agents
// (the UI benchmark, bench/ui, and the browser test of the UI at 10,000
// machines): N Hardware as Name, MAC and MachineIP give them, and one in
// WorkflowEvery with a Workflow that has already got somewhere — in
// WorkflowStates, cycling — with its status written as the engine and an
// agent would have left it. The same objects, marshalled, are what a peer
// is given, so both sides show the same machines.

// WorkflowEvery: machine i has a Workflow when i%WorkflowEvery == 0.
const WorkflowEvery = 5

// WorkflowStates are the states of the fleet's Workflows, cycling: the
// k-th Workflow (machine k*WorkflowEvery) is in WorkflowStates[k%len].
var WorkflowStates = []model.State{model.StateSuccess, model.StateFailed, model.StateRunning, model.StatePending,
	model.StateSuccess, model.StateTimeout, model.StateSuccess, model.StateCancelled}

// restActions are the actions of a Workflow of the fleet at rest.
var restActions = []string{"stream-image", "write-config", "reboot"}

// StateOf is machine i's Workflow's state, and false when it has none.
func StateOf(i int) (model.State, bool) {
	if i%WorkflowEvery != 0 {
		return "", false
	}
	return WorkflowStates[(i/WorkflowEvery)%len(WorkflowStates)], true
}

// WorkflowName is machine i's Workflow's name (when StateOf says it has one).
func WorkflowName(i int) string { return Name(i) + "-install" }

// RestObjects is the fleet at rest: the Template its Workflows name, then
// machine 0's Hardware (and Workflow), machine 1's, and so on, all in
// Namespace.
func RestObjects(n int) []model.Object {
	data := "version: \"0.1\"\nname: " + TemplateName + "\ntasks:\n- name: os\n  worker: \"{{.device_1}}\"\n  actions:\n"
	for _, a := range restActions {
		data += fmt.Sprintf("  - {name: %s, image: quay.io/tinkerbell/actions/%s:latest, timeout: 600}\n", a, a)
	}
	objs := make([]model.Object, 0, 1+n+n/WorkflowEvery+1)
	objs = append(objs, &model.Template{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindTemplate},
		ObjectMeta: model.ObjectMeta{Namespace: Namespace, Name: TemplateName}, Spec: model.TemplateSpec{Data: &data}})
	for i := range n {
		name, mac := Name(i), MAC(i)
		objs = append(objs, &model.Hardware{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindHardware},
			ObjectMeta: model.ObjectMeta{Namespace: Namespace, Name: name, Labels: map[string]string{"rack": fmt.Sprint(i % 10)}},
			Spec: model.HardwareSpec{Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: mac, Hostname: name,
				IP: &model.IP{Address: MachineIP(i), Netmask: "255.0.0.0", Gateway: "10.0.0.1"}}}}}})
		if state, ok := StateOf(i); ok {
			objs = append(objs, restWorkflow(i, state))
		}
	}
	return objs
}

// restWorkflow is machine i's Workflow in state: the actions before the
// current one done, a running workflow in its second action, a pending
// one not started, a finished one's last action in its final state.
func restWorkflow(i int, state model.State) *model.Workflow {
	cur, msg := len(restActions)-1, ""
	switch state {
	case model.StatePending:
		cur = -1
	case model.StateRunning:
		cur = 1
	case model.StateFailed:
		msg = "image2disk: write /dev/vda: input/output error"
	case model.StateTimeout:
		msg = "action timed out after 600s"
	}
	var acts []model.Action
	for k, a := range restActions {
		st := model.StatePending
		switch {
		case k < cur:
			st = model.StateSuccess
		case k == cur:
			st = state
		}
		act := model.Action{ID: fmt.Sprintf("%s-%d", WorkflowName(i), k), Name: a, Image: "quay.io/tinkerbell/actions/" + a + ":latest", Timeout: 600, State: st}
		if k == cur {
			act.Message = msg
		}
		acts = append(acts, act)
	}
	return &model.Workflow{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindWorkflow},
		ObjectMeta: model.ObjectMeta{Namespace: Namespace, Name: WorkflowName(i)},
		Spec: model.WorkflowSpec{TemplateRef: TemplateName, HardwareRef: Name(i),
			HardwareMap: map[string]string{"device_1": MAC(i)}},
		Status: model.WorkflowStatus{State: state, Tasks: []model.Task{{ID: WorkflowName(i) + "-os", Name: "os", AgentID: MAC(i), Actions: acts}}}}
}
