package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

// TestProvisionThroughBMC: ProvisionDevice and Reprovision of a Hardware
// with a spec.bmcRef power it through its BMC: their workflow's netboot
// Job (power off, one-time PXE, power on) names the Hardware's Machine, and
// the machine gets no action until the Job has completed.
func TestProvisionThroughBMC(t *testing.T) {
	for _, how := range []string{"ProvisionDevice", "Reprovision"} {
		t.Run(how, func(t *testing.T) {
			e := newJobsEnv(t, true)
			ctx := context.Background()
			o, err := e.st.Get(ctx, model.KindHardware, "default", "node1")
			if err != nil {
				t.Fatal(err)
			}
			hw := o.(*model.Hardware)
			hw.Spec.BMCRef = &model.LocalObjectReference{Kind: "Machine", Name: "bmc-node1"}
			if _, err := e.st.Update(ctx, hw); err != nil {
				t.Fatal(err)
			}
			jobID := ""
			if how == "ProvisionDevice" {
				r := e.provision(t, "", &v1.ProvisionDeviceRequest{DeviceId: "node1", Template: "install",
					Parameters: map[string]string{"image": "http://img/debian.raw"}})
				if !strings.HasSuffix(r.GetMessage(), "; its BMC (machine/bmc-node1) powers it on to that network boot") {
					t.Errorf("ProvisionDevice message %q", r.GetMessage())
				}
				jobID = r.GetJobId()
			} else if _, err := e.wf.Reprovision(ctx, by("", &v1.ReprovisionRequest{Hardware: "node1", Template: "install"})); err != nil {
				t.Fatal(err)
			}
			name := model.NetbootJobName("node1")
			var job *model.Job
			deadline := time.Now().Add(10 * time.Second)
			for {
				if o, err := e.st.Get(ctx, model.KindJob, "default", name); err == nil {
					job = o.(*model.Job)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no Job %s", name)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if job.Spec.MachineRef.Name != "bmc-node1" || len(job.Spec.Tasks) != 3 || job.Spec.Tasks[1].Describe() != "oneTimeBootDeviceAction pxe" {
				t.Fatalf("job spec %+v", job.Spec)
			}
			if _, err := e.ag.GetAction(ctx, by("", &v1.GetActionRequest{AgentId: macOf(1)})); err == nil {
				t.Fatal("an action was handed out before the netboot job completed")
			}
			if jobID != "" {
				// The engine writes the Job, then the workflow's status
				// that the job status reads: wait for the second write.
				want := "waiting for the BMC: netboot job " + name + " created: machine bmc-node1 powered off, next boot pxe, powered on"
				var m string
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					if m = e.status(t, jobID).GetMessage(); m == want || time.Now().After(deadline) {
						break
					}
				}
				if m != want {
					t.Errorf("job status message %q; want %q", m, want)
				}
			}
			job.Status.Conditions = model.SetCondition(job.Status.Conditions, model.ConditionCompleted, model.ConditionTrue, "3 tasks completed")
			if _, err := e.st.Update(ctx, job); err != nil {
				t.Fatal(err)
			}
			if a := e.nextAction(t, macOf(1)); a.GetName() != "write" {
				t.Fatalf("first action %q; want write", a.GetName())
			}
		})
	}
}
