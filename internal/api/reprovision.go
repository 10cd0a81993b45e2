package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// reprovisionNameTime is the time format of a default reprovision workflow
// name's suffix (UTC).
const reprovisionNameTime = "20060102-150405"

// hardwareMapDevice is the hardwareMap key Tinkerbell's templates name the
// machine's worker by ({{.device_1}}).
const hardwareMapDevice = "device_1"

// workflowHandler is the WorkflowService: the shared resource methods and
// Reprovision.
type workflowHandler struct {
	*workflowService
	hardware *hardwareService
}

// Reprovision starts a new Workflow for a Hardware from a Template and sets
// allowPXE on every interface of the Hardware.
//
// The checks (Hardware, Template, no other unfinished enabled workflow on
// the Hardware) and the writes run under one lock, so two Reprovision
// calls cannot both pass the check. The Workflow is created first
// (Create: a taken name is refused, never overwritten), then allowPXE is
// set with a conditional update that re-reads on conflict, so no
// concurrent change to the Hardware is lost. Should that second write
// fail, the workflow still converges: its toggleAllowNetboot makes the
// engine set allowPXE when it starts; the answer says so in a warning.
func (w workflowHandler) Reprovision(ctx context.Context, req *connect.Request[v1.ReprovisionRequest]) (*connect.Response[v1.ReprovisionResponse], error) {
	s := w.s
	m := req.Msg
	ns := m.GetNamespace()
	if ns == "" {
		ns = model.DefaultNamespace
	}
	if m.GetHardware() == "" {
		return nil, invalid("missing hardware: the name of the Hardware to reprovision")
	}
	if m.GetTemplate() == "" {
		return nil, invalid("missing template: the name of the Template the new workflow runs")
	}
	if err := authorize(ctx, auth.Provision, ns); err != nil {
		return nil, err
	}

	s.reprovisionMu.Lock()
	defer s.reprovisionMu.Unlock()

	obj, err := s.cfg.Store.Get(ctx, model.KindHardware, ns, m.GetHardware())
	if errors.Is(err, store.ErrNotFound) {
		return nil, hardwareNotFound(ns, m.GetHardware())
	}
	if err != nil {
		return nil, s.toConnect(err)
	}
	hw := obj.(*model.Hardware)
	mac, err := s.checkProvisionable(ctx, hw, m.GetTemplate())
	if err != nil {
		return nil, err
	}

	name := m.GetWorkflow()
	if name == "" {
		name = hw.Name + "-" + s.cfg.Clock.Now().UTC().Format(reprovisionNameTime)
	}
	wf := newProvisionWorkflow(hw, name, m.GetTemplate(), mac, nil)
	if err := model.Validate(wf); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("workflow %s/%s is invalid (choose another name with --name):\n%w", ns, name, err))
	}
	unlock, err := s.admitOne(ctx, wf)
	if err != nil {
		return nil, s.toConnect(err)
	}
	defer unlock()
	created, err := s.cfg.Store.Create(ctx, wf)
	if errors.Is(err, store.ErrAlreadyExists) {
		return nil, connect.NewError(connect.CodeAlreadyExists,
			fmt.Errorf("a workflow %s/%s already exists: choose another name with --name, or delete it first (anvil delete workflow %s -n %s)", ns, name, name, ns))
	}
	if err != nil {
		return nil, s.toConnect(fmt.Errorf("create workflow %s/%s: %w", ns, name, err))
	}

	out := &v1.ReprovisionResponse{}
	hw, out.Warnings = s.enableNetboot(ctx, hw, created.(*model.Workflow))
	if out.Workflow, err = w.encode(created); err != nil {
		return nil, err
	}
	if out.Hardware, err = w.hardware.encode(hw); err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// newProvisionWorkflow is the Workflow Reprovision and ProvisionDevice
// create: the template run on hw with hardwareMap (device_1 set to mac),
// toggleAllowNetboot on.
func newProvisionWorkflow(hw *model.Hardware, name, template string, mac macaddr.MAC, hardwareMap map[string]string) *model.Workflow {
	hm := make(map[string]string, len(hardwareMap)+1)
	for k, v := range hardwareMap {
		hm[k] = v
	}
	hm[hardwareMapDevice] = mac.String()
	return &model.Workflow{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindWorkflow},
		ObjectMeta: model.ObjectMeta{Namespace: hw.Namespace, Name: name},
		Spec: model.WorkflowSpec{
			TemplateRef: template,
			HardwareRef: hw.Name,
			HardwareMap: hm,
			BootOptions: &model.BootOptions{ToggleAllowNetboot: true, BootMode: "netboot"},
		},
	}
}

// checkProvisionable checks that a new workflow from template may start on
// hw: the Template exists in hw's namespace, hw has a MAC (the worker), and
// no unfinished workflow is on hw. It returns hw's first MAC. Call it holding
// reprovisionMu, and create the workflow before letting go.
func (s *Services) checkProvisionable(ctx context.Context, hw *model.Hardware, template string) (macaddr.MAC, error) {
	ns := hw.Namespace
	if _, err := s.cfg.Store.Get(ctx, model.KindTemplate, ns, template); errors.Is(err, store.ErrNotFound) {
		return macaddr.MAC{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("template %s/%s not found (anvil get templates -n %s lists them)", ns, template, ns))
	} else if err != nil {
		return macaddr.MAC{}, s.toConnect(err)
	}
	macs := hw.MACs()
	if len(macs) == 0 {
		return macaddr.MAC{}, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("hardware %s has no interface with a MAC: a workflow's worker is the machine's first MAC", hw.Key()))
	}
	if busy, err := unfinishedWorkflows(ctx, s.cfg.Store, hw); err != nil {
		return macaddr.MAC{}, s.toConnect(err)
	} else if len(busy) > 0 {
		return macaddr.MAC{}, connect.NewError(connect.CodeFailedPrecondition, busyError(hw, busy))
	}
	return macs[0], nil
}

// enableNetboot sets allowPXE on every interface of hw for the new
// workflow wf and returns hw as stored, with what the caller should know:
// allowPXE not set (the engine sets it when wf starts, toggleAllowNetboot),
// interfaces that boot their disk whatever allowPXE says.
func (s *Services) enableNetboot(ctx context.Context, hw *model.Hardware, wf *model.Workflow) (*model.Hardware, []string) {
	var warnings []string
	hw, err := setAllowPXE(ctx, s.cfg.Store, hw)
	if err != nil {
		s.log.Warn("allowPXE not set for a new workflow", "hardware", hw.Key(), "workflow", wf.Key(), "err", err)
		warnings = append(warnings, fmt.Sprintf("allowPXE could not be set on hardware %s (%v); the workflow engine sets it when workflow %s starts (toggleAllowNetboot)",
			hw.Key(), err, wf.Name))
	}
	for i, ifc := range hw.Spec.Interfaces {
		if ifc.Netboot != nil && !model.BoolValue(ifc.Netboot.AllowWorkflow, true) {
			warnings = append(warnings, fmt.Sprintf("spec.interfaces[%d].netboot.allowWorkflow is false: that interface boots its disk, not the workflow; set it to true", i))
		}
	}
	return hw, warnings
}

// unfinishedWorkflows returns the workflows on hw (its namespace) that are
// neither final nor disabled: the ones that would run before, or instead
// of, a new one.
func unfinishedWorkflows(ctx context.Context, st store.Indexer, hw *model.Hardware) ([]*model.Workflow, error) {
	objs, err := st.ByIndex(ctx, model.KindWorkflow, store.IndexHardwareRef, hw.Name)
	if err != nil {
		return nil, fmt.Errorf("find workflows of hardware %s: %w", hw.Key(), err)
	}
	var out []*model.Workflow
	for _, o := range objs {
		w, ok := o.(*model.Workflow)
		if !ok || w.Namespace != hw.Namespace || w.Status.State.IsFinal() || model.BoolValue(w.Spec.Disabled, false) {
			continue
		}
		out = append(out, w)
	}
	return out, nil
}

func busyError(hw *model.Hardware, busy []*model.Workflow) error {
	var names, cancels, deletes []string
	for _, w := range busy {
		state := w.Status.State
		if state == "" {
			state = "not yet started"
		}
		names = append(names, fmt.Sprintf("%s (%s)", w.Name, state))
		cancels = append(cancels, fmt.Sprintf("anvil job cancel %s", w.Key()))
		deletes = append(deletes, fmt.Sprintf("anvil delete workflow %s -n %s", w.Name, w.Namespace))
	}
	return fmt.Errorf("hardware %s already has an unfinished workflow: %s. Wait for it to finish, cancel it (%s) or delete it (%s), then try again",
		hw.Key(), strings.Join(names, ", "), strings.Join(cancels, "; "), strings.Join(deletes, "; "))
}

// setAllowPXE sets allowPXE on every interface of hw (modifyHardware:
// conditional updates, re-reading on conflict, since the engine,
// starting the new workflow, may set it first). It returns the Hardware
// as stored.
func setAllowPXE(ctx context.Context, st store.Store, hw *model.Hardware) (*model.Hardware, error) {
	return modifyHardware(ctx, st, hw, func(hw *model.Hardware) (bool, error) {
		changes, err := setNetbootFlags(hw, nil, model.Bool(true), nil)
		return len(changes) > 0, err
	})
}
