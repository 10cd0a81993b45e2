package workflow

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

const testISO = "http://10.0.0.1:8080/iso/boot.iso"

func isobootWorkflow(name, url string) *model.Workflow {
	wf := testWorkflow(name, "rack1-node07")
	wf.Spec.BootOptions = &model.BootOptions{BootMode: "isoboot", ISOURL: url}
	return wf
}

// describeTasks names a Job's tasks, with the URL a virtualMediaAction
// inserts ("eject" when none).
func describeTasks(j *model.Job) string {
	var got []string
	for _, a := range j.Spec.Tasks {
		d := a.Describe()
		if v := a.VirtualMediaAction; v != nil {
			if v.MediaURL == "" {
				d += " eject"
			} else {
				d += " insert " + v.MediaURL
			}
		}
		got = append(got, d)
	}
	return strings.Join(got, "; ")
}

// TestEngineISOBootJobs: an isoboot workflow on a Hardware with a BMC
// gets Tinkerbell's iso-mount Job (power off, eject, insert the isoURL as
// CD, one-time CD boot, power on) before any action is handed out; once
// it completes the actions run; once the workflow succeeds the iso-eject
// Job takes the CD out, and its completion is recorded.
func TestEngineISOBootJobs(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), isobootWorkflow("wf", testISO))
	w := e.waitWorkflow("wf", "iso-mount job set up", hasCondition(ConditionBootJobSetupComplete))
	mount := ISOMountJobName("wf")
	if mount != "iso-mount-wf" {
		t.Fatalf("job name %s", mount)
	}
	if c := FindCondition(&w.Status, ConditionBootJobRunning); c == nil || c.Status != "True" {
		t.Fatalf("BootJobRunning %+v", c)
	}
	j := e.job(mount)
	if j.Spec.MachineRef.Name != "bmc-node07" || j.Labels[LabelWorkflow] != "wf" {
		t.Fatalf("job %+v", j)
	}
	want := "powerAction off; virtualMediaAction CD eject; virtualMediaAction CD insert " + testISO +
		"; oneTimeBootDeviceAction cdrom (efiBoot); powerAction on"
	if got := describeTasks(j); got != want {
		t.Fatalf("tasks\n%s\nwant\n%s", got, want)
	}
	if na, err := e.engine.GetAction(context.Background(), mac, 0); !errors.Is(err, ErrNoAction) {
		t.Fatalf("GetAction while the iso-mount job runs: %+v, %v; want nothing", na, err)
	}
	if _, err := e.store.Get(context.Background(), model.KindJob, "default", ISOEjectJobName("wf")); err == nil {
		t.Fatal("the iso-eject job exists before the workflow ran")
	}

	e.endJob(mount, model.ConditionCompleted, "5 tasks completed")
	e.waitWorkflow("wf", "iso-mount job complete", hasCondition(ConditionBootJobComplete))
	e.runAction(mac, "stream-image", model.StateSuccess)
	e.runAction(mac, "hostname", model.StateSuccess)
	e.runAction(mac, "reboot", model.StateSuccess)

	eject := ISOEjectJobName("wf")
	w = e.waitWorkflow("wf", "iso-eject job set up", func(w *model.Workflow) bool {
		c := FindCondition(&w.Status, ConditionBootJobSetupComplete)
		return c != nil && strings.Contains(c.Message, eject)
	})
	if w.Status.State != model.StateSuccess {
		t.Fatalf("state %s while ejecting", w.Status.State)
	}
	if c := FindCondition(&w.Status, ConditionBootJobComplete); c != nil {
		t.Fatalf("the mount's BootJobComplete is left while the eject runs: %+v", c)
	}
	if got := describeTasks(e.job(eject)); got != "virtualMediaAction CD eject" {
		t.Fatalf("eject tasks %q", got)
	}
	e.endJob(eject, model.ConditionCompleted, "1 task completed")
	w = e.waitWorkflow("wf", "iso-eject job complete", hasCondition(ConditionBootJobComplete))
	if c := FindCondition(&w.Status, ConditionBootJobComplete); !strings.Contains(c.Message, "iso-eject job iso-eject-wf completed") {
		t.Fatalf("BootJobComplete %+v", c)
	}
	if w.Status.State != model.StateSuccess {
		t.Fatalf("state %s after the eject", w.Status.State)
	}
}

// TestEngineISOBootJobFailed: a failed iso-mount Job fails the workflow
// with the Job's message, and nothing is handed out; a failed iso-eject
// Job fails the succeeded workflow with its message (upstream's post
// actions do the same).
func TestEngineISOBootJobFailed(t *testing.T) {
	msg := "task 2 (virtualMediaAction CD), provider redfish: insert media: 404 the image is not found"
	t.Run("mount", func(t *testing.T) {
		e := newEnv(t)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), isobootWorkflow("wf", testISO))
		e.waitWorkflow("wf", "iso-mount job set up", hasCondition(ConditionBootJobSetupComplete))
		e.endJob(ISOMountJobName("wf"), model.ConditionFailed, msg)
		w := e.waitWorkflow("wf", "FAILED", stateIs(model.StateFailed))
		if last := w.Status.History[len(w.Status.History)-1].Message; last != "iso-mount job iso-mount-wf failed: "+msg {
			t.Fatalf("last history %q", last)
		}
		if c := FindCondition(&w.Status, ConditionBootJobFailed); c == nil || c.Status != "True" || !strings.Contains(c.Message, msg) {
			t.Fatalf("BootJobFailed %+v", c)
		}
		if na, err := e.engine.GetAction(context.Background(), mac, 0); !errors.Is(err, ErrNoAction) {
			t.Fatalf("GetAction after the failure: %+v, %v", na, err)
		}
	})
	t.Run("eject", func(t *testing.T) {
		e := newEnv(t)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), isobootWorkflow("wf", testISO))
		e.waitWorkflow("wf", "iso-mount job set up", hasCondition(ConditionBootJobSetupComplete))
		e.endJob(ISOMountJobName("wf"), model.ConditionCompleted, "")
		e.waitWorkflow("wf", "iso-mount job complete", hasCondition(ConditionBootJobComplete))
		e.runAction(mac, "stream-image", model.StateSuccess)
		e.runAction(mac, "hostname", model.StateSuccess)
		e.runAction(mac, "reboot", model.StateSuccess)
		e.waitWorkflow("wf", "iso-eject job set up", func(w *model.Workflow) bool {
			c := FindCondition(&w.Status, ConditionBootJobRunning)
			return w.Status.State == model.StateSuccess && c != nil && c.Status == "True"
		})
		e.endJob(ISOEjectJobName("wf"), model.ConditionFailed, "eject: the BMC did not answer")
		w := e.waitWorkflow("wf", "FAILED", stateIs(model.StateFailed))
		if last := w.Status.History[len(w.Status.History)-1].Message; last != "iso-eject job iso-eject-wf failed: eject: the BMC did not answer" {
			t.Fatalf("last history %q", last)
		}
	})
}

// TestEngineISOBootURL: without bootOptions.isoURL the workflow boots the
// server's own ISO for its Hardware (Config.ISOURL); a server without one
// fails the workflow saying so, and writes no Job.
func TestEngineISOBootURL(t *testing.T) {
	t.Run("server's ISO", func(t *testing.T) {
		e := &env{t: t, path: filepath.Join(t.TempDir(), "anvil.db"), clock: newFakeClock(),
			isoURL: func(hw *model.Hardware) string {
				return "http://anvil/iso/" + hw.Spec.Interfaces[0].DHCP.MAC + "/anvil.iso"
			}}
		e.start()
		t.Cleanup(e.stop)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), isobootWorkflow("wf", ""))
		e.waitWorkflow("wf", "iso-mount job set up", hasCondition(ConditionBootJobSetupComplete))
		if got := describeTasks(e.job(ISOMountJobName("wf"))); !strings.Contains(got, "insert http://anvil/iso/"+mac+"/anvil.iso;") {
			t.Fatalf("tasks %q", got)
		}
	})
	t.Run("no MAC", func(t *testing.T) {
		e := &env{t: t, path: filepath.Join(t.TempDir(), "anvil.db"), clock: newFakeClock(),
			isoURL: func(*model.Hardware) string { return "" }}
		e.start()
		t.Cleanup(e.stop)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), isobootWorkflow("wf", ""))
		w := e.waitWorkflow("wf", "FAILED", stateIs(model.StateFailed))
		if c := FindCondition(&w.Status, ConditionBootJobSetupFailed); c == nil || !strings.HasSuffix(c.Message, `hardware "rack1-node07" has no interface with a dhcp.mac to name its boot ISO by`) {
			t.Fatalf("BootJobSetupFailed %+v", c)
		}
	})
	t.Run("none", func(t *testing.T) {
		e := newEnv(t)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), bmcHardware(t), isobootWorkflow("wf", ""))
		w := e.waitWorkflow("wf", "FAILED", stateIs(model.StateFailed))
		c := FindCondition(&w.Status, ConditionBootJobSetupFailed)
		if c == nil || c.Message != "iso-mount job iso-mount-wf not created: spec.bootOptions.isoURL is empty and this server serves no boot ISO" {
			t.Fatalf("BootJobSetupFailed %+v", c)
		}
		if _, err := e.store.Get(context.Background(), model.KindJob, "default", ISOMountJobName("wf")); err == nil {
			t.Fatal("a Job exists")
		}
	})
}
