package workflow

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

func custombootWorkflow(name string, prep, post []model.BMCAction) *model.Workflow {
	wf := testWorkflow(name, "rack1-node07")
	wf.Spec.BootOptions = &model.BootOptions{BootMode: "customboot",
		CustombootConfig: &model.CustombootConfig{PreparingActions: prep, PostActions: post}}
	return wf
}

func powerTask(a string) model.BMCAction { return model.BMCAction{PowerAction: &a} }

// TestEngineCustombootJobs: a customboot workflow on a Hardware with a
// BMC runs its preparingActions as one Job before any action is handed
// out (both boot-device spellings kept as written), and its postActions
// as another once it has succeeded; a failed post Job fails the workflow.
func TestEngineCustombootJobs(t *testing.T) {
	prep := []model.BMCAction{powerTask("off"),
		{BootDevice: &model.BootDeviceConfig{Device: "pxe", EFIBoot: true}}, powerTask("on")}
	post := []model.BMCAction{powerTask("off"),
		{OneTimeBootDeviceAction: &model.OneTimeBootDeviceAction{Devices: []string{"disk"}, Persistent: true}}, powerTask("on")}
	for _, postOutcome := range []string{model.ConditionCompleted, model.ConditionFailed} {
		t.Run("post "+postOutcome, func(t *testing.T) {
			e := newEnv(t)
			e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), custombootWorkflow("wf", prep, post))
			e.waitWorkflow("wf", "preparing job set up", hasCondition(ConditionBootJobSetupComplete))
			name := CustombootPreparingJobName("wf")
			j := e.job(name)
			if got, want := describeTasks(j), "powerAction off; bootDevice pxe (efiBoot); powerAction on"; got != want || j.Spec.MachineRef.Name != "bmc-node07" {
				t.Fatalf("preparing job %s on %s: tasks %q, want %q", name, j.Spec.MachineRef.Name, got, want)
			}
			if na, err := e.engine.GetAction(context.Background(), mac, 0); !errors.Is(err, ErrNoAction) {
				t.Fatalf("GetAction while the preparing job runs: %+v, %v; want nothing", na, err)
			}
			e.endJob(name, model.ConditionCompleted, "3 tasks completed")
			e.waitWorkflow("wf", "preparing job complete", hasCondition(ConditionBootJobComplete))
			e.runAction(mac, "stream-image", model.StateSuccess)
			e.runAction(mac, "hostname", model.StateSuccess)
			e.runAction(mac, "reboot", model.StateSuccess)

			postName := CustombootPostJobName("wf")
			e.waitWorkflow("wf", "post job set up", func(w *model.Workflow) bool {
				c := FindCondition(&w.Status, ConditionBootJobSetupComplete)
				return w.Status.State == model.StateSuccess && c != nil && strings.Contains(c.Message, postName)
			})
			if got, want := describeTasks(e.job(postName)), "powerAction off; oneTimeBootDeviceAction disk; powerAction on"; got != want {
				t.Fatalf("post tasks %q, want %q", got, want)
			}
			e.endJob(postName, postOutcome, "task 2 (oneTimeBootDeviceAction disk), provider ipmitool: the BMC did not answer")
			if postOutcome == model.ConditionFailed {
				w := e.waitWorkflow("wf", "FAILED", stateIs(model.StateFailed))
				if last := w.Status.History[len(w.Status.History)-1].Message; !strings.HasPrefix(last, "customboot job "+postName+" failed: task 2") {
					t.Fatalf("last history %q", last)
				}
				return
			}
			w := e.waitWorkflow("wf", "post job complete", hasCondition(ConditionBootJobComplete))
			if c := FindCondition(&w.Status, ConditionBootJobComplete); !strings.Contains(c.Message, "customboot job "+postName+" completed") || w.Status.State != model.StateSuccess {
				t.Fatalf("state %s, BootJobComplete %+v", w.Status.State, c)
			}
		})
	}
}

// TestEngineCustombootNoPreparing: with postActions only, actions are
// handed out at once, and no preparing Job is written.
func TestEngineCustombootNoPreparing(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t),
		custombootWorkflow("wf", nil, []model.BMCAction{powerTask("off")}))
	e.waitWorkflow("wf", "rendered", rendered)
	e.runAction(mac, "stream-image", model.StateSuccess)
	if _, err := e.store.Get(context.Background(), model.KindJob, "default", CustombootPreparingJobName("wf")); err == nil {
		t.Fatal("a preparing job was written for an empty preparingActions")
	}
}
