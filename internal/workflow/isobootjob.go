package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// A Workflow with bootOptions.bootMode isoboot (v1alpha1's "iso" too)
// whose Hardware has a spec.bmcRef boots its machine from virtual media,
// as Tinkerbell's tink controller does it: before the first action the
// engine writes the iso-mount Job (hard power off, eject the CD, insert
// bootOptions.isoURL as CD, one-time CD-ROM boot — EFI mode when an
// interface boots UEFI —, power on) and holds the workflow until it ends;
// once the workflow succeeds it writes the iso-eject Job (eject the CD),
// so the machine's next boot is its disk's. A failed Job fails the
// workflow with the Job's message. Apply refuses isoboot without a BMC
// that has virtual media (internal/api), so the engine meets it only with
// one.

// Workflow condition types of the iso-mount and iso-eject Jobs,
// Tinkerbell's names (upstream uses one family for both Jobs: the eject
// Job's setup replaces the mount Job's conditions).
const (
	ConditionBootJobSetupComplete = "BootJobSetupComplete"
	ConditionBootJobRunning       = "BootJobRunning"
	ConditionBootJobComplete      = "BootJobComplete"
	ConditionBootJobFailed        = "BootJobFailed"
	// ConditionBootJobSetupFailed: the Job could not be set up (no
	// isoURL); the workflow is FAILED.
	ConditionBootJobSetupFailed = "BootJobSetupFailed"
)

// ISOMountJobName and ISOEjectJobName are the names of a workflow's
// isoboot Jobs, as Tinkerbell names them.
func ISOMountJobName(workflow string) string { return "iso-mount-" + workflow }

// ISOEjectJobName: see ISOMountJobName.
func ISOEjectJobName(workflow string) string { return "iso-eject-" + workflow }

// IsISOBoot reports whether b asks for a boot from virtual media
// ("iso" is v1alpha1's older spelling of isoboot).
func IsISOBoot(b *model.BootOptions) bool {
	return b != nil && (b.BootMode == "isoboot" || b.BootMode == "iso")
}

// wantsISOBoot reports whether wf asks for the isoboot boot mode.
func wantsISOBoot(wf *model.Workflow) bool {
	return IsISOBoot(wf.Spec.BootOptions) && wf.Spec.HardwareRef != ""
}

// isoURL is the ISO wf boots: its bootOptions.isoURL, else the server's
// own boot ISO for the Hardware (Config.ISOURL), else "".
func (e *Engine) bootISO(wf *model.Workflow, hw *model.Hardware) string {
	if u := wf.Spec.BootOptions.ISOURL; u != "" {
		return u
	}
	if e.isoURL != nil {
		return e.isoURL(hw)
	}
	return ""
}

func isoMountJob(wf *model.Workflow) bootJob {
	name := ISOMountJobName(wf.Name)
	return bootJob{name: name, what: "iso-mount job", conds: isoConds,
		done: fmt.Sprintf("iso-mount job %s completed: the machine is powered on to boot the ISO", name)}
}

func isoEjectJob(wf *model.Workflow) bootJob {
	name := ISOEjectJobName(wf.Name)
	return bootJob{name: name, what: "iso-eject job", conds: isoConds,
		done: fmt.Sprintf("iso-eject job %s completed: the virtual CD is ejected", name)}
}

// isoMountJob brings wf's iso-mount Job forward: creates it when wf is
// about to start, and follows it. It reports whether wf's status changed.
func (e *Engine) isoMountJob(ctx context.Context, wf *model.Workflow, now time.Time) (bool, error) {
	st := &wf.Status
	bj := isoMountJob(wf)
	if FindCondition(st, ConditionBootJobSetupComplete) != nil {
		return e.followBootJob(ctx, wf, bj, now)
	}
	if st.StartTime != nil || st.State != model.StatePending {
		return false, nil // already started (or made before this rule): leave it be
	}
	hw, err := e.bmcHardware(ctx, wf)
	if hw == nil || err != nil {
		return false, err
	}
	url := e.bootISO(wf, hw)
	if url == "" {
		why := "this server serves no boot ISO"
		if e.isoURL != nil {
			why = fmt.Sprintf("hardware %q has no interface with a dhcp.mac to name its boot ISO by", hw.Name)
		}
		msg := "iso-mount job " + bj.name + " not created: spec.bootOptions.isoURL is empty and " + why
		SetCondition(st, model.Condition{Type: ConditionBootJobSetupFailed, Status: "True", Reason: "Error", Message: msg, Time: &now})
		wfState{st}.end(model.StateFailed, msg, now)
		return true, nil
	}
	efi := efiBoot(hw)
	off, on := model.PowerActionOff, model.PowerActionOn
	boot := "cdrom"
	if efi {
		boot += " (efiBoot)"
	}
	bj.tasks = []model.BMCAction{
		{PowerAction: &off},
		{VirtualMediaAction: &model.VirtualMediaAction{Kind: "CD"}},
		{VirtualMediaAction: &model.VirtualMediaAction{Kind: "CD", MediaURL: url}},
		{OneTimeBootDeviceAction: &model.OneTimeBootDeviceAction{Devices: []string{model.BootDeviceCDROM}, EFIBoot: efi}},
		{PowerAction: &on},
	}
	bj.created = fmt.Sprintf("iso-mount job %s created: machine %s powered off, CD %s inserted, next boot %s, powered on",
		bj.name, hw.Spec.BMCRef.Name, url, boot)
	return e.putBootJob(ctx, wf, hw, bj, now)
}

// isoEjectJob writes wf's iso-eject Job once wf has succeeded, and
// follows it; a failed eject fails the workflow, as upstream's post
// actions do. It reports whether wf's status changed.
func (e *Engine) isoEjectJob(ctx context.Context, wf *model.Workflow, now time.Time) (bool, error) {
	st := &wf.Status
	bj := isoEjectJob(wf)
	bj.tasks = []model.BMCAction{{VirtualMediaAction: &model.VirtualMediaAction{Kind: "CD"}}}
	bj.created = "iso-eject job " + bj.name + " created: the virtual CD is ejected"
	if c := FindCondition(st, ConditionBootJobSetupComplete); (c == nil || c.Message != bj.created) && FindCondition(st, ConditionBootJobComplete) == nil {
		return false, nil // no mount Job completed (made before this rule, or no BMC): nothing inserted
	}
	return e.afterSuccessJob(ctx, wf, bj, now)
}
