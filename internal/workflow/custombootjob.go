package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// A Workflow with bootOptions.bootMode customboot whose Hardware has a
// spec.bmcRef runs the BMC actions of its custombootConfig as Tinkerbell's
// tink controller does: preparingActions as one Job before the first
// action is handed out (the workflow waits for it, and fails with it), and
// postActions as another once the workflow has succeeded (a failed one
// fails the workflow, as isoboot's eject does). Either list may be empty:
// then there is no such Job. The Jobs share isoboot's condition family
// (BootJob*), as upstream's do.

// CustombootPreparingJobName and CustombootPostJobName are the names of a
// workflow's customboot Jobs.
func CustombootPreparingJobName(workflow string) string { return "customboot-preparing-" + workflow }

// CustombootPostJobName: see CustombootPreparingJobName.
func CustombootPostJobName(workflow string) string { return "customboot-post-" + workflow }

// customboot returns wf's custombootConfig when wf asks for customboot on
// a Hardware; nil otherwise.
func customboot(wf *model.Workflow) *model.CustombootConfig {
	b := wf.Spec.BootOptions
	if b == nil || b.BootMode != "customboot" || wf.Spec.HardwareRef == "" || b.CustombootConfig == nil {
		return nil
	}
	return b.CustombootConfig
}

func custombootJob(name, when string, tasks []model.BMCAction) bootJob {
	return bootJob{name: name, what: "customboot job", conds: isoConds, tasks: tasks,
		created: fmt.Sprintf("customboot job %s created: %d BMC action(s) %s", name, len(tasks), when),
		done:    fmt.Sprintf("customboot job %s completed", name)}
}

// custombootPreparingJob brings wf's preparing Job forward: creates it
// when wf is about to start, and follows it. It reports whether wf's
// status changed.
func (e *Engine) custombootPreparingJob(ctx context.Context, wf *model.Workflow, now time.Time) (bool, error) {
	c := customboot(wf)
	if c == nil || len(c.PreparingActions) == 0 {
		return false, nil
	}
	bj := custombootJob(CustombootPreparingJobName(wf.Name), "before the workflow's first action", c.PreparingActions)
	st := &wf.Status
	if FindCondition(st, ConditionBootJobSetupComplete) != nil {
		return e.followBootJob(ctx, wf, bj, now)
	}
	if st.StartTime != nil || st.State != model.StatePending {
		return false, nil // already started: leave it be
	}
	hw, err := e.bmcHardware(ctx, wf)
	if hw == nil || err != nil {
		return false, err
	}
	return e.putBootJob(ctx, wf, hw, bj, now)
}

// custombootPostJob writes wf's post Job once wf has succeeded, and
// follows it. It reports whether wf's status changed.
func (e *Engine) custombootPostJob(ctx context.Context, wf *model.Workflow, now time.Time) (bool, error) {
	c := customboot(wf)
	if c == nil || len(c.PostActions) == 0 {
		return false, nil
	}
	bj := custombootJob(CustombootPostJobName(wf.Name), "after the workflow's success", c.PostActions)
	return e.afterSuccessJob(ctx, wf, bj, now)
}

// afterSuccessJob writes bj, a Job that runs once its workflow has
// succeeded (isoboot's eject, customboot's post actions), or follows it
// once written: its setup message tells it from the Job before the
// workflow, whose condition types it shares.
func (e *Engine) afterSuccessJob(ctx context.Context, wf *model.Workflow, bj bootJob, now time.Time) (bool, error) {
	if c := FindCondition(&wf.Status, ConditionBootJobSetupComplete); c != nil && c.Message == bj.created {
		return e.followBootJob(ctx, wf, bj, now)
	}
	hw, err := e.bmcHardware(ctx, wf)
	if hw == nil || err != nil {
		return false, err
	}
	return e.putBootJob(ctx, wf, hw, bj, now)
}
