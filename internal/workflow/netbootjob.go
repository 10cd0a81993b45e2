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

// NetbootJobName is the name of the netboot Job of a Hardware, as
// Tinkerbell names it. One name per Hardware: a new workflow's Job
// replaces the previous one.
func NetbootJobName(hardware string) string {
	return "tink-controller-" + hardware + "-one-time-netboot"
}

// wantsBMCNetboot reports whether wf asks for the netboot boot mode.
func wantsBMCNetboot(wf *model.Workflow) bool {
	b := wf.Spec.BootOptions
	return b != nil && b.BootMode == "netboot" && wf.Spec.HardwareRef != ""
}

// NetbootJobPending reports whether st waits for its netboot Job: set up
// and neither complete nor failed. No action is handed out meanwhile.
func NetbootJobPending(st *model.WorkflowStatus) bool {
	c := FindCondition(st, ConditionNetbootJobSetupComplete)
	if c == nil || c.Status != "True" {
		return false
	}
	done := FindCondition(st, ConditionNetbootJobComplete)
	return done == nil || done.Status != "True"
}

// NetbootJobFailedStatus ends st FAILED because its netboot Job failed
// with msg.
func NetbootJobFailedStatus(st *model.WorkflowStatus, job, msg string, now time.Time) {
	full := fmt.Sprintf("netboot job %s failed: %s", job, msg)
	SetCondition(st, model.Condition{Type: ConditionNetbootJobRunning, Status: "False", Reason: "Failed", Time: &now})
	SetCondition(st, model.Condition{Type: ConditionNetbootJobFailed, Status: "True", Reason: "Error", Message: full, Time: &now})
	wfState{st}.end(model.StateFailed, full, now)
}

// netbootJob brings wf's netboot Job forward: creates it when wf is about
// to start, and follows it. It reports whether wf's status changed.
func (e *Engine) netbootJob(ctx context.Context, wf *model.Workflow, now time.Time) (bool, error) {
	st := &wf.Status
	if c := FindCondition(st, ConditionNetbootJobSetupComplete); c == nil {
		if st.StartTime != nil || model.NormalizeState(st.State) != model.StatePending {
			return false, nil // already started (or made before this rule): leave it be
		}
		return e.createNetbootJob(ctx, wf, now)
	}
	if !NetbootJobPending(st) || FindCondition(st, ConditionNetbootJobFailed) != nil {
		return false, nil
	}
	name := NetbootJobName(wf.Spec.HardwareRef)
	obj, err := e.store.Get(ctx, model.KindJob, wf.Namespace, name)
	if errors.Is(err, store.ErrNotFound) {
		NetbootJobFailedStatus(st, name, "the job was deleted before it finished", now)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	job := obj.(*model.Job)
	if job.Labels[LabelWorkflow] != wf.Name {
		NetbootJobFailedStatus(st, name, fmt.Sprintf("the job was replaced by one of workflow %q before it finished", job.Labels[LabelWorkflow]), now)
		return true, nil
	}
	switch {
	case model.HasCondition(job.Status.Conditions, model.ConditionFailed):
		NetbootJobFailedStatus(st, name, jobMessage(job, model.ConditionFailed), now)
		return true, nil
	case model.HasCondition(job.Status.Conditions, model.ConditionCompleted):
		msg := fmt.Sprintf("netboot job %s completed: the machine is powered on to boot from the network", name)
		SetCondition(st, model.Condition{Type: ConditionNetbootJobRunning, Status: "False", Reason: "Complete", Time: &now})
		SetCondition(st, model.Condition{Type: ConditionNetbootJobComplete, Status: "True", Reason: "Complete", Message: msg, Time: &now})
		AddHistory(st, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: st.State, Message: msg})
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

// createNetbootJob writes the netboot Job of wf's Hardware, replacing a
// previous one, if the Hardware has a BMC.
func (e *Engine) createNetbootJob(ctx context.Context, wf *model.Workflow, now time.Time) (bool, error) {
	obj, err := e.store.Get(ctx, model.KindHardware, wf.Namespace, wf.Spec.HardwareRef)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil // the workflow waits for its Hardware as before
	}
	if err != nil {
		return false, err
	}
	hw := obj.(*model.Hardware)
	if hw.Spec.BMCRef == nil || hw.Spec.BMCRef.Name == "" {
		return false, nil // powered by hand (apply warned)
	}
	name := NetbootJobName(hw.Name)
	efi := false
	for _, ifc := range hw.Spec.Interfaces {
		if ifc.DHCP != nil && model.BoolValue(ifc.DHCP.UEFI, false) {
			efi = true
		}
	}
	off, on := model.PowerActionOff, model.PowerActionOn
	job := &model.Job{
		TypeMeta: model.TypeMeta{APIVersion: model.BMCAPIVersion, Kind: model.KindJob},
		ObjectMeta: model.ObjectMeta{Namespace: wf.Namespace, Name: name,
			Labels:      map[string]string{labelAutoCreated: "true", LabelWorkflow: wf.Name},
			Annotations: map[string]string{labelAutoCreated: "true", annotationWorkflowUID: wf.UID}},
		Spec: model.JobSpec{
			MachineRef: model.ObjectReference{Name: hw.Spec.BMCRef.Name, Namespace: wf.Namespace},
			Tasks: []model.BMCAction{
				{PowerAction: &off},
				{OneTimeBootDeviceAction: &model.OneTimeBootDeviceAction{Devices: []string{model.BootDevicePXE}, EFIBoot: efi}},
				{PowerAction: &on},
			},
		},
	}
	old, err := e.store.Get(ctx, model.KindJob, wf.Namespace, name)
	switch {
	case err == nil && wf.UID != "" && old.GetObjectMeta().Annotations[annotationWorkflowUID] == wf.UID:
		// This workflow's own, created before its status write was lost.
	case err == nil || errors.Is(err, store.ErrNotFound):
		// A previous workflow's Job of the same name goes first, as
		// upstream deletes it; its Tasks are overwritten by the new Job's.
		if err == nil {
			if err := e.store.Delete(ctx, model.KindJob, wf.Namespace, name, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
				return false, fmt.Errorf("delete the previous netboot job %s/%s: %w", wf.Namespace, name, err)
			}
		}
		if _, err := e.store.Create(ctx, job); err != nil {
			return false, fmt.Errorf("create netboot job %s/%s: %w", wf.Namespace, name, err)
		}
	default:
		return false, err
	}
	boot := "pxe"
	if efi {
		boot += " (efiBoot)"
	}
	msg := fmt.Sprintf("netboot job %s created: machine %s powered off, next boot %s, powered on", name, hw.Spec.BMCRef.Name, boot)
	e.log.Info("workflow: netboot job created", "workflow", wf.Key(), "job", name, "machine", hw.Spec.BMCRef.Name)
	SetCondition(&wf.Status, model.Condition{Type: ConditionNetbootJobSetupComplete, Status: "True", Reason: "Created", Message: msg, Time: &now})
	SetCondition(&wf.Status, model.Condition{Type: ConditionNetbootJobRunning, Status: "True", Reason: "Running", Time: &now})
	AddHistory(&wf.Status, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: wf.Status.State, Message: msg})
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
