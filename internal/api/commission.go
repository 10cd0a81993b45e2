package api

import (
	"context"
	"strings"
	"time"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/workflow"
)

// maxReportChecks bounds the checks one report may carry; more are
// dropped (model.Commissioning also bounds what a Hardware keeps).
const maxReportChecks = model.MaxCommissioningChecks

// recordCommissioning keeps what an action's end report says of
// commissioning on the agent's own Hardware (docs/commissioning.md): the
// checks it carries, and, once the workflow has ended, whether the
// machine passed. It runs after checkAgent passed and the engine stored
// the report, as recordInventory does: a caller whose token is not its
// workflow's writes nothing on any Hardware. The Hardware must be of the
// workflow's namespace. Best effort: a machine whose result cannot be
// stored is logged, and keeps the label it had.
func (s *Services) recordCommissioning(ctx context.Context, agent workflow.AgentName, wfID string, checks []*v1.CommissioningCheck, wfState model.State) {
	if len(checks) == 0 && !wfState.IsFinal() {
		return
	}
	hws, err := workflow.AgentHardware(ctx, s.cfg.Store, agent)
	if err != nil || len(hws) != 1 {
		if len(checks) > 0 {
			s.log.Warn("commissioning checks not recorded: no one Hardware is the agent's", "agent", agent.ID, "workflow", wfID, "err", err, "hardware", len(hws))
		}
		return
	}
	hw := hws[0]
	if ns, _, _ := strings.Cut(wfID, "/"); ns != hw.Namespace {
		return
	}
	if len(checks) == 0 && (hw.Status.Commissioning == nil || hw.Status.Commissioning.Workflow != wfID) {
		return // an ended workflow that ran no checks: nothing to decide
	}
	got := make([]model.CommissioningCheck, 0, min(len(checks), maxReportChecks))
	for _, c := range checks[:min(len(checks), maxReportChecks)] {
		mc := model.CommissioningCheck{Name: c.GetName(), Result: c.GetResult(), Detail: c.GetDetail(), Values: c.GetValues()}
		if c.GetTime() != nil {
			t := c.GetTime().AsTime()
			mc.Time = &t
		}
		got = append(got, mc)
	}
	written, err := s.updateHardware(ctx, hw, func(hw *model.Hardware) bool {
		hw.RecordCommissioning(wfID, got, wfState, time.Now().UTC())
		return true
	})
	if err != nil {
		s.log.Error("commissioning not recorded", "hardware", hw.Key(), "workflow", wfID, "err", err)
		return
	}
	if written && hw.Status.Commissioning != nil && hw.Status.Commissioning.Result != "" {
		s.log.Info("commissioning "+hw.Status.Commissioning.Result, "hardware", hw.Key(), "workflow", wfID, "message", hw.Status.Commissioning.Message)
	}
}
