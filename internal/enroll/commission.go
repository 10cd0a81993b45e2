package enroll

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// commission gives hw, a discovered machine that has not passed
// commissioning, its commissioning Workflow from Config.CommissionTemplate,
// unless it has it already (its name is derived from the Hardware's, so a
// store makes it once however many passes race) or another workflow
// targets the machine. The machine is enrolled by the rules once the
// server has labelled it passed (docs/commissioning.md).
func (e *Enroller) commission(ctx context.Context, hw *model.Hardware, wfs []model.Object, r Result, dryRun bool) Result {
	name := CommissionWorkflowName(hw)
	for _, o := range wfs {
		wf, ok := o.(*model.Workflow)
		if !ok || wf.Namespace != hw.Namespace {
			continue
		}
		if wf.Name == name {
			r.Outcome, r.Workflow = Commissioning, name
			r.Message = fmt.Sprintf("workflow %s commissions it (%s); rules enrol it once it passes", name, workflowState(wf))
			return r
		}
		r.Outcome, r.Workflow, r.Message = HasWorkflow, wf.Name, "workflow "+wf.Name+" targets it"
		return r
	}
	tpl := e.cfg.CommissionTemplate
	if dryRun {
		r.Outcome, r.Workflow = Commissioning, name
		r.Message = fmt.Sprintf("would create commissioning workflow %s from template %s; rules enrol it once it passes", name, tpl)
		return r
	}
	err := e.createCommission(ctx, hw, name, tpl)
	if errors.Is(err, store.ErrAlreadyExists) {
		r.Outcome, r.Workflow, r.Message = Commissioning, name, "another pass made its commissioning workflow "+name
		return r
	}
	if err != nil {
		enrolments.WithLabelValues(Failed).Inc()
		r.Outcome, r.Message = Failed, err.Error()
		e.log.Warn("commissioning workflow not made", "hardware", hw.Key(), "template", tpl, "err", err)
		return r
	}
	enrolments.WithLabelValues(Commissioning).Inc()
	r.Outcome, r.Workflow = Commissioning, name
	r.Message = fmt.Sprintf("created commissioning workflow %s from template %s; rules enrol it once it passes", name, tpl)
	return r
}

// createCommission makes hw's commissioning Workflow, after checking
// that it renders. A store's ErrAlreadyExists is returned as it is.
func (e *Enroller) createCommission(ctx context.Context, hw *model.Hardware, name, tpl string) error {
	macs := hw.MACs()
	if len(macs) == 0 {
		return fmt.Errorf("hardware %s has no interface with a MAC: a workflow's worker is the machine's first MAC", hw.Key())
	}
	wf := &model.Workflow{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindWorkflow},
		ObjectMeta: model.ObjectMeta{Namespace: hw.Namespace, Name: name},
		Spec: model.WorkflowSpec{
			TemplateRef: tpl,
			HardwareRef: hw.Name,
			HardwareMap: map[string]string{model.DefaultAgentValue: macs[0].String()},
			// As an enrolment's: the machine waits in the boot
			// environment, or is off.
			BootOptions: &model.BootOptions{ToggleAllowNetboot: true, BootMode: "netboot"},
		},
	}
	if err := model.Validate(wf); err != nil {
		return fmt.Errorf("commissioning workflow %s/%s is invalid: %w", hw.Namespace, name, err)
	}
	if _, err := workflow.RenderStored(ctx, e.cfg.Store, wf); err != nil {
		return fmt.Errorf("commissioning workflow %s/%s from template %s would not render, so it is not created (anvil serve --commission-template names it): %w", hw.Namespace, name, tpl, err)
	}
	if _, err := e.cfg.Store.Create(ctx, wf); err != nil {
		if errors.Is(err, store.ErrAlreadyExists) {
			return err
		}
		return fmt.Errorf("create workflow %s/%s: %w", hw.Namespace, name, err)
	}
	e.log.Info("commissioning", "hardware", hw.Key(), "workflow", name, "template", tpl)
	e.cfg.Events.Record(machinelog.Event{Service: machinelog.ServiceEnroll, MAC: hw.MACs()[0], Outcome: Commissioning,
		Message: fmt.Sprintf("commissioning: workflow %s from template %s", name, tpl)})
	return nil
}

// workflowState is wf's state for a message, "not started" before the
// engine has given it one.
func workflowState(wf *model.Workflow) string {
	if wf.Status.State == "" {
		return "not started"
	}
	return string(wf.Status.State)
}
