package workflow

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// Two organisations' machines, as namespaces: acme's workflows must never
// hand an action to globex's machine, whatever their hardwareMap says.
const (
	acmeMAC   = "52:54:00:0a:00:01"
	globexMAC = "52:54:00:0b:00:01"
)

func orgHardware(ns, name, mac string) *model.Hardware {
	return &model.Hardware{
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec: model.HardwareSpec{Interfaces: []model.Interface{{
			DHCP: &model.DHCP{MAC: mac, Hostname: name + "-secret-host"}}}},
	}
}

func orgTemplate(ns string) *model.Template {
	tmpl := templateOf(minimalHead + "  - name: os\n    worker: \"{{.device_1}}\"\n    actions: [{name: write, image: writefile}]\n")
	tmpl.Namespace, tmpl.Name = ns, "t"
	return tmpl
}

func orgWorkflow(ns, name, hwRef, device string) *model.Workflow {
	return &model.Workflow{
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec: model.WorkflowSpec{TemplateRef: "t", HardwareRef: hwRef,
			HardwareMap: map[string]string{"device_1": device}},
	}
}

func (e *env) waitFor(ns, name, what string, cond func(*model.Workflow) bool) *model.Workflow {
	e.t.Helper()
	var last *model.Workflow
	e.waitUntil(ns+"/"+name+" "+what, func() bool {
		o, err := e.store.Get(context.Background(), model.KindWorkflow, ns, name)
		if err != nil {
			return false
		}
		last = o.(*model.Workflow)
		return cond(last)
	})
	return last
}

// TestEngineRefusesForeignWorker: a workflow whose worker is another
// organisation's machine (stored before admission checked it, or its
// template changed since) fails to render, and its message names only its
// own namespace and the worker it was given.
func TestEngineRefusesForeignWorker(t *testing.T) {
	e := newEnv(t)
	e.create(orgHardware("acme", "a1", acmeMAC), orgHardware("globex", "g1", globexMAC), orgTemplate("acme"),
		orgWorkflow("acme", "evil", "a1", globexMAC),
		orgWorkflow("acme", "nobody", "a1", "52:54:00:ff:ff:ff"), // no Hardware anywhere
		orgWorkflow("acme", "own", "", strings.ToUpper(acmeMAC)))
	for _, name := range []string{"evil", "nobody"} {
		wf := e.waitFor("acme", name, "FAILED", stateIs(model.StateFailed))
		c := FindCondition(&wf.Status, ConditionTemplateRendered)
		if c == nil || !strings.Contains(c.Message, "is not a MAC or agent ID of any Hardware in namespace acme") {
			t.Errorf("%s: condition %+v; want the worker refused", name, c)
		}
		if c != nil && (strings.Contains(c.Message, "globex") || strings.Contains(c.Message, "g1")) {
			t.Errorf("%s: the refusal names the other organisation's objects: %s", name, c.Message)
		}
	}
	e.waitFor("acme", "own", "rendered", stateIs(model.StatePending))
	if _, err := e.engine.GetAction(context.Background(), globexMAC, 0); !errors.Is(err, ErrNoAction) {
		t.Errorf("globex's agent was offered %v; want no action", err)
	}
}

// TestEngineWorkerOfAnotherOrganisation: where the engine hands out an
// action it checks the agent belongs to the workflow's namespace, so a
// workflow rendered before that rule (or whose Hardware has since moved to
// another organisation) cannot capture a machine, nor keep the machine's
// own organisation's workflow from it.
func TestEngineWorkerOfAnotherOrganisation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// acme's workflow rendered for a MAC that was acme's...
	e.create(orgHardware("acme", "moved", globexMAC), orgTemplate("acme"), orgTemplate("globex"),
		orgWorkflow("acme", "old", "moved", globexMAC))
	e.waitFor("acme", "old", "rendered", stateIs(model.StatePending))
	// ...and is globex's now.
	if err := e.store.Delete(ctx, model.KindHardware, "acme", "moved", ""); err != nil {
		t.Fatal(err)
	}
	e.create(orgHardware("globex", "g1", globexMAC))
	if _, err := e.engine.GetAction(ctx, globexMAC, 0); !errors.Is(err, ErrNoAction) {
		t.Fatalf("globex's machine was offered acme's action (%v); want none", err)
	}
	// globex's own workflow, younger than acme's, is the one it gets.
	e.create(orgWorkflow("globex", "mine", "g1", globexMAC))
	e.waitFor("globex", "mine", "rendered", stateIs(model.StatePending))
	na, err := e.engine.GetAction(ctx, globexMAC, 0)
	if err != nil || na.WorkflowID != "globex/mine" {
		t.Fatalf("GetAction(globex's machine) = %+v, %v; want globex/mine's action", na, err)
	}
	if wf := e.waitFor("acme", "old", "unchanged", func(*model.Workflow) bool { return true }); wf.Status.State != model.StatePending {
		t.Errorf("acme/old: %s; want it left PENDING, never run", wf.Status.State)
	}
}
