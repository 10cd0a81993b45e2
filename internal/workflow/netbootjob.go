package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// A Workflow with bootOptions.bootMode netboot whose Hardware has a
// spec.bmcRef gets its machine network booted through the BMC, as
// Tinkerbell's tink controller does it: before the first action is handed
// out the engine creates a bmc.tinkerbell.org Job (hard power off, one-time
// PXE boot — in EFI mode when an interface of the Hardware boots UEFI —,
// power on) and holds the workflow until the Job ends. The BMC executor
// (internal/bmc) runs the Job; the engine only writes it and reads its
// conditions. A failed Job fails the workflow with the Job's message.
//
// Without a bmcRef nothing changes: somebody powers the machine on.

// Workflow condition types of the netboot Job, Tinkerbell's names.
const (
	// ConditionNetbootJobSetupComplete: True once the Job is created; the
	// message names it.
	ConditionNetbootJobSetupComplete = "NetbootJobSetupComplete"
	// ConditionNetbootJobRunning: True while the Job runs.
	ConditionNetbootJobRunning = "NetbootJobRunning"
	// ConditionNetbootJobComplete: True once every task of the Job
	// succeeded; only then are actions handed out.
	ConditionNetbootJobComplete = "NetbootJobComplete"
	// ConditionNetbootJobFailed: True when the Job failed (the workflow
	// is FAILED with the Job's message).
	ConditionNetbootJobFailed = "NetbootJobFailed"
)

// LabelWorkflow is the label on a Job the engine created, naming the
// workflow (of the Job's namespace) it was created for; the engine's
// watch of Jobs reconciles that workflow when the Job changes.
const LabelWorkflow = "anvil.dev/workflow"

// annotationWorkflowUID is the UID of the workflow a Job was created for:
// a reconcile that created the Job and then lost its status write to a
// conflict finds it again by it, instead of replacing a Job that may be
// running (a workflow deleted and created again under the same name has
// another UID, and gets a new Job).
const annotationWorkflowUID = "anvil.dev/workflow-uid"

// labelAutoCreated marks the Jobs the engine made, as Tinkerbell marks
// its own.
const labelAutoCreated = "tink-controller-auto-created"

// bootJob is one Job the engine writes for a workflow's boot mode: its
// name, its tasks, the workflow conditions that follow it and the words of
// its messages. Netboot, iso-mount and iso-eject differ only in these.
type bootJob struct {
	name  string
	what  string // "netboot job", "iso-mount job", …: the start of messages
	conds jobConds
	tasks []model.BMCAction
	// created and done are the history messages when the Job is written
	// and when it completes.
	created, done string
}

// jobConds are the workflow condition types that follow a boot Job.
type jobConds struct{ setup, running, complete, failed string }

var (
	netbootConds = jobConds{ConditionNetbootJobSetupComplete, ConditionNetbootJobRunning, ConditionNetbootJobComplete, ConditionNetbootJobFailed}
	isoConds     = jobConds{ConditionBootJobSetupComplete, ConditionBootJobRunning, ConditionBootJobComplete, ConditionBootJobFailed}
)

// wantsBMCNetboot reports whether wf asks for the netboot boot mode.
func wantsBMCNetboot(wf *model.Workflow) bool {
	b := wf.Spec.BootOptions
	return b != nil && b.BootMode == "netboot" && wf.Spec.HardwareRef != ""
}

// PendingBootJob returns the setup condition of the boot Job (netboot or
// iso-mount) st waits for: set up and neither complete nor failed; nil
// when it waits for none. No action is handed out meanwhile.
func PendingBootJob(st *model.WorkflowStatus) *model.Condition {
	for _, cs := range []jobConds{netbootConds, isoConds} {
		c := FindCondition(st, cs.setup)
		if c == nil || c.Status != "True" {
			continue
		}
		if done := FindCondition(st, cs.complete); done == nil || done.Status != "True" {
			return c
		}
	}
	return nil
}

// NetbootJobPending reports whether st waits for a boot Job.
func NetbootJobPending(st *model.WorkflowStatus) bool { return PendingBootJob(st) != nil }

// bootJobFailed ends st FAILED because its boot Job failed with msg.
func bootJobFailed(st *model.WorkflowStatus, bj bootJob, msg string, now time.Time) {
	full := fmt.Sprintf("%s %s failed: %s", bj.what, bj.name, msg)
	SetCondition(st, model.Condition{Type: bj.conds.running, Status: "False", Reason: "Failed", Time: &now})
	SetCondition(st, model.Condition{Type: bj.conds.failed, Status: "True", Reason: "Error", Message: full, Time: &now})
	wfState{st}.end(model.StateFailed, full, now)
}

// netbootJob brings wf's netboot Job forward: creates it when wf is about
// to start, and follows it. It reports whether wf's status changed.
func (e *Engine) netbootJob(ctx context.Context, wf *model.Workflow, now time.Time) (bool, error) {
	st := &wf.Status
	if c := FindCondition(st, ConditionNetbootJobSetupComplete); c == nil {
		if st.StartTime != nil || st.State != model.StatePending {
			return false, nil // already started (or made before this rule): leave it be
		}
		return e.createNetbootJob(ctx, wf, now)
	}
	return e.followBootJob(ctx, wf, bootJob{name: model.NetbootJobName(wf.Spec.HardwareRef), what: "netboot job", conds: netbootConds,
		done: fmt.Sprintf("netboot job %s completed: the machine is powered on to boot from the network", model.NetbootJobName(wf.Spec.HardwareRef))}, now)
}

// followBootJob reads bj (set up earlier) and records its end on wf. It
// reports whether wf's status changed.
func (e *Engine) followBootJob(ctx context.Context, wf *model.Workflow, bj bootJob, now time.Time) (bool, error) {
	st := &wf.Status
	if c := FindCondition(st, bj.conds.running); c == nil || c.Status != "True" {
		return false, nil // ended, and recorded
	}
	obj, err := e.store.Get(ctx, model.KindJob, wf.Namespace, bj.name)
	if errors.Is(err, store.ErrNotFound) {
		bootJobFailed(st, bj, "the job was deleted before it finished", now)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	job := obj.(*model.Job)
	if job.Labels[LabelWorkflow] != wf.Name {
		bootJobFailed(st, bj, fmt.Sprintf("the job was replaced by one of workflow %q before it finished", job.Labels[LabelWorkflow]), now)
		return true, nil
	}
	switch {
	case model.HasCondition(job.Status.Conditions, model.ConditionFailed):
		bootJobFailed(st, bj, jobMessage(job, model.ConditionFailed), now)
		return true, nil
	case model.HasCondition(job.Status.Conditions, model.ConditionCompleted):
		SetCondition(st, model.Condition{Type: bj.conds.running, Status: "False", Reason: "Complete", Time: &now})
		SetCondition(st, model.Condition{Type: bj.conds.complete, Status: "True", Reason: "Complete", Message: bj.done, Time: &now})
		AddHistory(st, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: st.State, Message: bj.done})
		return true, nil
	}
	return false, nil
}

// jobMessage is the message of the Job's condition t.
func jobMessage(j *model.Job, t string) string {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Message != "" {
			return c.Message
		}
	}
	return "no message"
}

// bmcHardware returns wf's Hardware if it has a BMC; nil when it has none
// or does not exist (the workflow waits for its Hardware as before).
func (e *Engine) bmcHardware(ctx context.Context, wf *model.Workflow) (*model.Hardware, error) {
	obj, err := e.store.Get(ctx, model.KindHardware, wf.Namespace, wf.Spec.HardwareRef)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	hw := obj.(*model.Hardware)
	if hw.Spec.BMCRef == nil || hw.Spec.BMCRef.Name == "" {
		return nil, nil // powered by hand (apply warned)
	}
	return hw, nil
}

// efiBoot reports whether an interface of hw boots UEFI: the one-time
// boot device is then set in EFI mode, as upstream does.
func efiBoot(hw *model.Hardware) bool {
	for _, ifc := range hw.Spec.Interfaces {
		if ifc.DHCP != nil && model.BoolValue(ifc.DHCP.UEFI, false) {
			return true
		}
	}
	return false
}

// createNetbootJob writes the netboot Job of wf's Hardware, replacing a
// previous one, if the Hardware has a BMC.
func (e *Engine) createNetbootJob(ctx context.Context, wf *model.Workflow, now time.Time) (bool, error) {
	hw, err := e.bmcHardware(ctx, wf)
	if hw == nil || err != nil {
		return false, err
	}
	efi := efiBoot(hw)
	off, on := model.PowerActionOff, model.PowerActionOn
	boot := "pxe"
	if efi {
		boot += " (efiBoot)"
	}
	name := model.NetbootJobName(hw.Name)
	return e.putBootJob(ctx, wf, hw, bootJob{name: name, what: "netboot job", conds: netbootConds,
		tasks: []model.BMCAction{
			{PowerAction: &off},
			{OneTimeBootDeviceAction: &model.OneTimeBootDeviceAction{Devices: []string{model.BootDevicePXE}, EFIBoot: efi}},
			{PowerAction: &on},
		},
		created: fmt.Sprintf("netboot job %s created: machine %s powered off, next boot %s, powered on", name, hw.Spec.BMCRef.Name, boot)}, now)
}

// putBootJob writes bj for wf's Hardware hw, replacing a Job of the same
// name made for another workflow, and marks it set up and running on wf.
func (e *Engine) putBootJob(ctx context.Context, wf *model.Workflow, hw *model.Hardware, bj bootJob, now time.Time) (bool, error) {
	job := &model.Job{
		TypeMeta: model.TypeMeta{APIVersion: model.BMCAPIVersion, Kind: model.KindJob},
		ObjectMeta: model.ObjectMeta{Namespace: wf.Namespace, Name: bj.name,
			Labels:      map[string]string{labelAutoCreated: "true", LabelWorkflow: wf.Name},
			Annotations: map[string]string{labelAutoCreated: "true", annotationWorkflowUID: wf.UID}},
		Spec: model.JobSpec{
			MachineRef: model.ObjectReference{Name: hw.Spec.BMCRef.Name, Namespace: wf.Namespace},
			Tasks:      bj.tasks,
		},
	}
	old, err := e.store.Get(ctx, model.KindJob, wf.Namespace, bj.name)
	switch {
	case err == nil && wf.UID != "" && old.GetObjectMeta().Annotations[annotationWorkflowUID] == wf.UID:
		// This workflow's own, created before its status write was lost.
	case err == nil || errors.Is(err, store.ErrNotFound):
		// A previous workflow's Job of the same name goes first, as
		// upstream deletes it; its Tasks are overwritten by the new Job's.
		if err == nil {
			if err := e.store.Delete(ctx, model.KindJob, wf.Namespace, bj.name, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
				return false, fmt.Errorf("delete the previous %s %s/%s: %w", bj.what, wf.Namespace, bj.name, err)
			}
		}
		if _, err := e.store.Create(ctx, job); err != nil {
			return false, fmt.Errorf("create %s %s/%s: %w", bj.what, wf.Namespace, bj.name, err)
		}
	default:
		return false, err
	}
	e.log.Info("workflow: boot job created", "workflow", wf.Key(), "job", bj.name, "machine", hw.Spec.BMCRef.Name)
	// A Job of the same condition family that ran before (iso-mount before
	// iso-eject) leaves its completion behind; this one has not completed.
	RemoveCondition(&wf.Status, bj.conds.complete)
	SetCondition(&wf.Status, model.Condition{Type: bj.conds.setup, Status: "True", Reason: "Created", Message: bj.created, Time: &now})
	SetCondition(&wf.Status, model.Condition{Type: bj.conds.running, Status: "True", Reason: "Running", Time: &now})
	AddHistory(&wf.Status, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: wf.Status.State, Message: bj.created})
	return true, nil
}

// watchJobs reconciles the workflow named by a Job's LabelWorkflow
// whenever that Job changes, until ctx ends.
func (e *Engine) watchJobs(ctx context.Context) {
	for ctx.Err() == nil {
		objs, rv, err := e.store.List(ctx, model.KindJob, store.ListOptions{})
		if err == nil {
			for _, o := range objs {
				e.jobChanged(o)
			}
			var ch <-chan store.Event
			ch, err = e.store.Watch(ctx, model.KindJob, store.WatchOptions{ResourceVersion: rv})
			if err == nil {
				for ev := range ch {
					if ev.Type == store.Error {
						break
					}
					e.jobChanged(ev.Object)
				}
				continue
			}
		}
		if errors.Is(err, store.ErrClosed) || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(errorRequeueDelay):
		}
	}
}

func (e *Engine) jobChanged(o model.Object) {
	j, ok := o.(*model.Job)
	if !ok {
		return
	}
	if wf := j.Labels[LabelWorkflow]; wf != "" {
		e.queue.add(j.Namespace + "/" + wf)
	}
}
