package workflow

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// bmcHardware is testHardware with a BMC.
func bmcHardware(t *testing.T) *model.Hardware {
	hw := testHardware(t)
	hw.Spec.BMCRef = &model.LocalObjectReference{Kind: "Machine", Name: "bmc-node07"}
	return hw
}

func netbootWorkflow(name string) *model.Workflow {
	wf := testWorkflow(name, "rack1-node07")
	wf.Spec.BootOptions = &model.BootOptions{BootMode: "netboot", ToggleAllowNetboot: true}
	return wf
}

func (e *env) job(name string) *model.Job {
	e.t.Helper()
	o, err := e.store.Get(context.Background(), model.KindJob, "default", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*model.Job)
}

// endJob writes what the BMC executor writes when a Job ends.
func (e *env) endJob(name, cond, msg string) {
	e.t.Helper()
	j := e.job(name)
	j.Status.Conditions = model.SetCondition(j.Status.Conditions, cond, model.ConditionTrue, msg)
	if _, err := e.store.Update(context.Background(), j); err != nil {
		e.t.Fatal(err)
	}
}

func hasCondition(typ string) func(*model.Workflow) bool {
	return func(w *model.Workflow) bool {
		c := FindCondition(&w.Status, typ)
		return c != nil && c.Status == "True"
	}
}

// TestEngineNetbootJob: a netboot workflow on a Hardware with a BMC gets
// Tinkerbell's Job (power off, one-time PXE in EFI mode for a UEFI
// interface, power on); no action is handed out until it completes; then
// the workflow runs as before, toggleAllowNetboot included.
func TestEngineNetbootJob(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), netbootWorkflow("wf"))
	e.waitWorkflow("wf", "netboot job set up", hasCondition(ConditionNetbootJobSetupComplete))
	name := model.NetbootJobName("rack1-node07")
	if name != "tink-controller-rack1-node07-one-time-netboot" {
		t.Fatalf("job name %s", name)
	}
	j := e.job(name)
	if j.Spec.MachineRef.Name != "bmc-node07" || j.Labels[LabelWorkflow] != "wf" {
		t.Fatalf("job %+v", j)
	}
	var got []string
	for _, a := range j.Spec.Tasks {
		got = append(got, a.Describe())
	}
	if strings.Join(got, "; ") != "powerAction off; oneTimeBootDeviceAction pxe (efiBoot); powerAction on" {
		t.Fatalf("tasks %q", got)
	}
	na, err := e.engine.GetAction(context.Background(), mac, 0)
	if !errors.Is(err, ErrNoAction) {
		t.Fatalf("GetAction while the netboot job runs: %+v, %v; want nothing", na, err)
	}

	e.endJob(name, model.ConditionCompleted, "3 tasks completed")
	w := e.waitWorkflow("wf", "netboot job complete", hasCondition(ConditionNetbootJobComplete))
	if c := FindCondition(&w.Status, ConditionNetbootJobRunning); c == nil || c.Status != "False" {
		t.Fatalf("NetbootJobRunning %+v", c)
	}
	if !model.BoolValue(e.hardware("rack1-node07").Spec.Interfaces[0].Netboot.AllowPXE, false) {
		t.Fatal("allowPXE not set (toggleAllowNetboot)")
	}
	e.runAction(mac, "stream-image", model.StateSuccess)
	e.runAction(mac, "hostname", model.StateSuccess)
	e.runAction(mac, "reboot", model.StateSuccess)
	e.waitWorkflow("wf", "SUCCESS", stateIs(model.StateSuccess))
}

// TestEngineNetbootJobFailed: the Job's failure fails the workflow with
// the Job's message, and nothing is handed out.
func TestEngineNetbootJobFailed(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), netbootWorkflow("wf"))
	e.waitWorkflow("wf", "netboot job set up", hasCondition(ConditionNetbootJobSetupComplete))
	name := model.NetbootJobName("rack1-node07")
	msg := "task 0 (powerAction off), provider ipmitool: open session with 10.0.0.57:623: the BMC did not answer"
	e.endJob(name, model.ConditionFailed, msg)
	w := e.waitWorkflow("wf", "FAILED", stateIs(model.StateFailed))
	last := w.Status.History[len(w.Status.History)-1].Message
	if last != "netboot job "+name+" failed: "+msg {
		t.Fatalf("last history %q", last)
	}
	if c := FindCondition(&w.Status, ConditionNetbootJobFailed); c == nil || c.Status != "True" || !strings.Contains(c.Message, msg) {
		t.Fatalf("NetbootJobFailed %+v", c)
	}
	if na, err := e.engine.GetAction(context.Background(), mac, 0); !errors.Is(err, ErrNoAction) {
		t.Fatalf("GetAction after the failure: %+v, %v", na, err)
	}
}

// TestEngineNetbootJobReplacesOld: the Job of an earlier workflow on the
// same Hardware is replaced by the new workflow's (Tinkerbell deletes it
// too), and a Job deleted while the workflow waits fails the workflow.
func TestEngineNetbootJobReplacesOld(t *testing.T) {
	e := newEnv(t)
	name := model.NetbootJobName("rack1-node07")
	off := model.PowerActionOff
	old := &model.Job{TypeMeta: model.TypeMeta{APIVersion: model.BMCAPIVersion, Kind: model.KindJob},
		ObjectMeta: model.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{LabelWorkflow: "earlier"}},
		Spec:       model.JobSpec{MachineRef: model.ObjectReference{Name: "bmc-node07"}, Tasks: []model.BMCAction{{PowerAction: &off}}}}
	e.create(old, loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), netbootWorkflow("wf"))
	e.waitWorkflow("wf", "netboot job set up", hasCondition(ConditionNetbootJobSetupComplete))
	if j := e.job(name); j.Labels[LabelWorkflow] != "wf" || len(j.Spec.Tasks) != 3 {
		t.Fatalf("job not replaced: %+v", j)
	}
	if err := e.store.Delete(context.Background(), model.KindJob, "default", name, ""); err != nil {
		t.Fatal(err)
	}
	w := e.waitWorkflow("wf", "FAILED", stateIs(model.StateFailed))
	if c := FindCondition(&w.Status, ConditionNetbootJobFailed); c == nil || !strings.Contains(c.Message, "deleted before it finished") {
		t.Fatalf("NetbootJobFailed %+v", c)
	}
}

// TestEngineNetbootWithoutBMC: without a bmcRef the netboot mode changes
// nothing: no Job, the machine (powered by hand) gets its actions.
func TestEngineNetbootWithoutBMC(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), netbootWorkflow("wf"))
	e.waitWorkflow("wf", "rendered", rendered)
	e.runAction(mac, "stream-image", model.StateSuccess)
	w := e.workflow("wf")
	if c := FindCondition(&w.Status, ConditionNetbootJobSetupComplete); c != nil {
		t.Fatalf("a netboot job was set up without a BMC: %+v", c)
	}
	if _, err := e.store.Get(context.Background(), model.KindJob, "default", model.NetbootJobName("rack1-node07")); err == nil {
		t.Fatal("a Job exists")
	}
}

// TestCreateNetbootJobAdoptsOwn: a reconcile that created the Job and then
// lost its status write finds the Job again by the workflow's UID and
// leaves it be (it may be running); a workflow of another UID replaces it.
func TestCreateNetbootJobAdoptsOwn(t *testing.T) {
	e := newEnv(t)
	e.create(bmcHardware(t))
	name := model.NetbootJobName("rack1-node07")
	off := model.PowerActionOff
	e.create(&model.Job{TypeMeta: model.TypeMeta{APIVersion: model.BMCAPIVersion, Kind: model.KindJob},
		ObjectMeta: model.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"marker": "first"},
			Annotations: map[string]string{annotationWorkflowUID: "uid-1"}},
		Spec: model.JobSpec{MachineRef: model.ObjectReference{Name: "bmc-node07"}, Tasks: []model.BMCAction{{PowerAction: &off}}}})
	for _, tc := range []struct {
		uid      string
		replaced bool
	}{{"uid-1", false}, {"uid-2", true}} {
		wf := netbootWorkflow("wf")
		wf.UID = tc.uid
		wf.Status.State = model.StatePending
		changed, err := e.engine.createNetbootJob(context.Background(), wf, t0)
		if err != nil || !changed || !NetbootJobPending(&wf.Status) {
			t.Fatalf("uid %s: changed %v, err %v, status %+v", tc.uid, changed, err, wf.Status.Conditions)
		}
		if got := e.job(name).Labels["marker"] == ""; got != tc.replaced {
			t.Errorf("uid %s: replaced = %v; want %v", tc.uid, got, tc.replaced)
		}
	}
}
