package api

import (
	"context"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/enroll"
)

// ruleSetHandler is the WorkflowRuleSet service: the kind's resource
// methods and Enroll.
type ruleSetHandler struct {
	*ruleSetService
}

// enroller is the Enroller of Config, or one over the store.
func (s *Services) enroller() *enroll.Enroller {
	if s.cfg.Enroller != nil {
		return s.cfg.Enroller
	}
	return enroll.New(enroll.Config{Store: s.cfg.Store, Logger: s.log})
}

// Enroll runs an enrolment pass over the discovered Hardware of the
// caller's scope now, or with dry_run says what one would do. A dry run
// reads (Read); a pass creates workflows (Provision).
func (h ruleSetHandler) Enroll(ctx context.Context, req *connect.Request[v1.EnrollRequest]) (*connect.Response[v1.EnrollResponse], error) {
	s := h.s
	ns, err := scope(ctx, req.Msg.GetNamespace())
	if err != nil {
		return nil, err
	}
	if !req.Msg.GetDryRun() {
		if err := authorize(ctx, auth.Provision, ns); err != nil {
			return nil, err
		}
	}
	results, err := s.enroller().Pass(ctx, ns, req.Msg.GetDryRun())
	if err != nil {
		return nil, s.toConnect(err)
	}
	out := &v1.EnrollResponse{}
	for _, r := range results {
		if !sees(ctx, r.Hardware.Namespace) {
			continue
		}
		res := &v1.EnrollResult{
			Namespace: r.Hardware.Namespace, Hardware: r.Hardware.Name, Outcome: r.Outcome,
			Workflow: r.Workflow, Message: r.Message, Broken: r.Decision.Broken,
		}
		if m := r.Decision.Match; m != nil {
			res.Rule = m.String()
		}
		for _, a := range r.Decision.Also {
			res.Also = append(res.Also, a.String())
		}
		out.Results = append(out.Results, res)
	}
	return connect.NewResponse(out), nil
}
