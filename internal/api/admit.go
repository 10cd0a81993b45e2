package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// Admission: what a write may not do to objects other than its own. It is
// checked against the store as it will be after the write (store.Overlay:
// the write's objects over the store, read through the store's indexes),
// so it holds for every Store implementation and for a manifest whose
// objects refer to each other.
//
//   - A Hardware's MACs, reserved IPs and agent IDs each name one machine
//     to DHCP, the metadata service and the agent protocol, none of which
//     can tell organisations apart: a Hardware may not claim one another
//     Hardware has (store.Conflicts).
//   - A Workflow's workers must be machines of its own namespace
//     (workflow.CheckWorkers), or one organisation could hand its actions
//     to another's machine, and keep that machine from its own work.
//   - A new Workflow may not target a machine that failed commissioning
//     (label anvil.io/commissioning=failed): it could not be trusted with
//     the work (docs/commissioning.md).
//
// Refusals never name another organisation's objects.

// claimWords say how a refusal names a claim index's value.
var claimWords = map[string]struct{ what, verb string }{
	store.IndexMAC:     {"MAC", "claimed"},
	store.IndexIP:      {"IP address", "reserved"},
	store.IndexAgentID: {"agent ID", "used"},
}

// admit checks the objects of one write, docs (a manifest's documents, or
// one API object in a Document without a Source), and returns a
// model.ErrorList of every problem, or the store's error. When the write
// holds Hardware it returns holding s.claimMu, and unlock releases it:
// call it once the write is made, so that no other write claims the same
// MAC between the check and the write. On an error nothing is held.
func (s *Services) admit(ctx context.Context, docs []model.Document) (unlock func(), err error) {
	objs := make([]model.Object, len(docs))
	hardware := false
	for i := range docs {
		objs[i] = docs[i].Object
		_, ok := objs[i].(*model.Hardware)
		hardware = hardware || ok
	}
	unlock = func() {}
	if hardware {
		s.claimMu.Lock()
		unlock = s.claimMu.Unlock
	}
	ov := store.NewOverlay(s.cfg.Store, objs)
	var errs model.ErrorList
	for i := range docs {
		var found model.ErrorList
		switch o := docs[i].Object.(type) {
		case *model.Hardware:
			found, err = checkClaims(ctx, ov, &docs[i], o)
		case *model.Workflow:
			found, err = checkWorkers(ctx, ov, &docs[i], o)
			if err == nil {
				var more model.ErrorList
				more, err = s.checkCommissioned(ctx, ov, &docs[i], o)
				found = append(found, more...)
			}
		}
		if err != nil {
			unlock()
			return nil, err
		}
		errs = append(errs, found...)
	}
	if len(errs) > 0 {
		unlock()
		return nil, errs
	}
	return unlock, nil
}

// admitOne is admit for the one object of a Create, Update or a
// workflow made by the server (Reprovision, ProvisionDevice).
func (s *Services) admitOne(ctx context.Context, obj model.Object) (unlock func(), err error) {
	return s.admit(ctx, []model.Document{{Object: obj}})
}

// fieldError locates msg at path of d: by file and line for a manifest's
// document, by kind and name for an API object.
func fieldError(d *model.Document, path, msg string) *model.FieldError {
	if d.Source == "" {
		m := d.Object.GetObjectMeta()
		return &model.FieldError{Doc: fmt.Sprintf("%s %s/%s", model.KindOf(d.Object), m.Namespace, m.Name), Path: path, Msg: msg}
	}
	return &model.FieldError{Source: d.Source, Line: d.FieldLine(path), Doc: d.Describe(), Path: path, Msg: msg}
}

// checkClaims refuses hw's MACs, IPs and agent IDs that another Hardware
// of ov has (store.Conflicts): by name when it is in hw's namespace, as
// "another organisation's Hardware" otherwise.
func checkClaims(ctx context.Context, ov *store.Overlay, d *model.Document, hw *model.Hardware) (model.ErrorList, error) {
	conflicts, err := store.Conflicts(ctx, ov, hw)
	if err != nil {
		return nil, err
	}
	var errs model.ErrorList
	for _, c := range conflicts {
		whose := "another organisation's Hardware"
		if c.Other.Namespace == hw.Namespace {
			whose = "Hardware " + c.Other.Key()
		}
		w := claimWords[c.Index]
		errs = append(errs, fieldError(d, c.Path, fmt.Sprintf("%s %s is already %s by %s", w.what, c.Value, w.verb, whose)))
	}
	return errs, nil
}

// checkWorkers refuses wf when one of its workers is no machine of its
// namespace: the agents of its status's tasks when it has some (a status
// written by hand), else those of its rendering. A workflow that does not
// render is not refused here: the engine records why on the workflow, as
// it always has.
func checkWorkers(ctx context.Context, ov *store.Overlay, d *model.Document, wf *model.Workflow) (model.ErrorList, error) {
	var bad workflow.WorkerErrors
	var err error
	if len(wf.Status.Tasks) > 0 {
		err = workflow.CheckWorkers(ctx, ov, wf.Namespace, wf.Status.Tasks)
	} else {
		_, err = workflow.RenderStored(ctx, ov, wf)
	}
	switch {
	case errors.As(err, &bad):
	case errors.As(err, new(*workflow.RenderError)):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var errs model.ErrorList
	for _, e := range bad {
		errs = append(errs, fieldError(d, workerPath(wf, e), e.Error()))
	}
	return errs, nil
}

// workerPath is the field a refused worker came from: a status task's
// agentID, the hardwareMap entry that holds it (in any spelling), else
// the template, which wrote it.
func workerPath(wf *model.Workflow, e *workflow.WorkerError) string {
	for i, t := range wf.Status.Tasks {
		if t.Name == e.Task && t.AgentID == e.Worker {
			return fmt.Sprintf("status.tasks[%d].agentID", i)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(wf.Spec.HardwareMap)) {
		if v := wf.Spec.HardwareMap[k]; v == e.Worker || workflow.WorkerID(v) == e.Worker {
			return "spec.hardwareMap." + k
		}
	}
	return "spec.templateRef"
}

// checkCommissioned refuses a new workflow whose machine failed
// commissioning: its spec.hardwareRef, and the machine each hardwareMap
// value names (a MAC or agent ID), in its namespace. A workflow already
// stored may still be changed (disabled, annotated, deleted) as long as it
// targets the same machines; retargeted, it is checked as a new one.
func (s *Services) checkCommissioned(ctx context.Context, ov *store.Overlay, d *model.Document, wf *model.Workflow) (model.ErrorList, error) {
	if obj, err := s.cfg.Store.Get(ctx, model.KindWorkflow, wf.Namespace, wf.Name); err == nil {
		if old := obj.(*model.Workflow); old.Spec.HardwareRef == wf.Spec.HardwareRef && maps.Equal(old.Spec.HardwareMap, wf.Spec.HardwareMap) {
			return nil, nil // the same machines as before: a change, not a new target
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	refused := map[string]bool{}
	var errs model.ErrorList
	refuse := func(path string, hw *model.Hardware) {
		if hw.Namespace != wf.Namespace || !hw.CommissioningFailed() || refused[hw.Name] {
			return
		}
		refused[hw.Name] = true
		why := ""
		if c := hw.Status.Commissioning; c != nil && c.Message != "" {
			why = " (" + c.Message + ")"
		}
		errs = append(errs, fieldError(d, path, fmt.Sprintf(
			"Hardware %s failed commissioning%s and is labelled %s=%s: no workflow may target it. "+
				"Replace what failed and re-commission it (delete its commissioning workflow and remove the label), "+
				"or remove the label to use it as it is (docs/commissioning.md)",
			hw.Key(), why, model.LabelCommissioning, model.CommissioningFailed)))
	}
	if ref := wf.Spec.HardwareRef; ref != "" {
		obj, err := ov.Get(ctx, model.KindHardware, wf.Namespace, ref)
		if err == nil {
			refuse("spec.hardwareRef", obj.(*model.Hardware))
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(wf.Spec.HardwareMap)) {
		hws, err := workflow.AgentHardware(ctx, ov, workflow.ParseAgentName(wf.Spec.HardwareMap[k]))
		if err != nil {
			return nil, err
		}
		for _, hw := range hws {
			refuse("spec.hardwareMap."+k, hw)
		}
	}
	return errs, nil
}
