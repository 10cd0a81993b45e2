package api

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// previewWorkflowName names the Workflow a preview renders; it is never
// stored.
const previewWorkflowName = "preview"

// templateHandler is the TemplateService: the shared resource methods and
// Render.
type templateHandler struct{ *templateService }

// Render renders a Template for a Hardware as the workflow engine renders
// the Workflow Reprovision would create (newProvisionWorkflow: device_1 is
// the Hardware's first MAC; workflow.PreviewStored: the engine's own
// rendering, budget and worker check), writing nothing. A template that
// fails is answered, not refused: the caller shows why.
func (t templateHandler) Render(ctx context.Context, req *connect.Request[v1.RenderTemplateRequest]) (*connect.Response[v1.RenderTemplateResponse], error) {
	s := t.s
	m := req.Msg
	ns := m.GetNamespace()
	if ns == "" {
		ns = model.DefaultNamespace
	}
	if m.GetTemplate() == "" || m.GetHardware() == "" {
		return nil, invalid("missing template or hardware: Render needs both names")
	}
	if err := authorize(ctx, auth.Read, ns); err != nil {
		return nil, err
	}
	obj, err := s.cfg.Store.Get(ctx, model.KindHardware, ns, m.GetHardware())
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("hardware %s/%s not found", ns, m.GetHardware()))
	}
	if err != nil {
		return nil, s.toConnect(err)
	}
	hw := obj.(*model.Hardware)
	macs := hw.MACs()
	if len(macs) == 0 {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("hardware %s has no interface with a MAC: a workflow's worker is the machine's first MAC", hw.Key()))
	}
	wf := newProvisionWorkflow(hw, previewWorkflowName, m.GetTemplate(), macs[0], nil)
	p, err := workflow.PreviewStored(ctx, s.cfg.Store, wf)
	if p.Template == nil && err != nil {
		if errors.As(err, new(*workflow.RenderError)) {
			return nil, connect.NewError(connect.CodeNotFound, err)
		}
		return nil, s.toConnect(err)
	}
	out := &v1.RenderTemplateResponse{Output: string(p.Output), HardwareMap: wf.Spec.HardwareMap}
	switch {
	case errors.As(err, new(*workflow.RenderError)):
		out.Error = err.Error()
		out.Line = int32(workflow.ErrorLine(err, p.Template))
	case err != nil:
		return nil, s.toConnect(err)
	default:
		out.Tasks = int32(len(p.Definition.Tasks))
		for _, td := range p.Definition.Tasks {
			out.Actions += int32(len(td.Actions))
		}
	}
	return connect.NewResponse(out), nil
}
