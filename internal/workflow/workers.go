package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/tmplbudget"
)

// A workflow's tasks run on workers: the agents that ask for work as the
// task's worker ID. The agent protocol names agents only (by MAC or
// spec.agentID), not organisations, so the one rule that keeps one
// organisation's workflow off another's machine is here: a worker must be
// a MAC or agent ID of a Hardware in the workflow's own namespace. It is
// checked when a workflow is admitted (internal/api), when the engine
// renders it, and each time the engine hands out an action (so that a
// workflow stored before the rule, or whose Hardware has since moved,
// captures nothing).

// Source is what rendering a stored workflow reads: its Template and
// Hardware by name, and Hardware by MAC and agent ID to find whose its
// workers are. A store.Store is one; so is a store.Overlay, which
// internal/api uses to check a write before making it.
type Source interface {
	Get(ctx context.Context, kind, namespace, name string) (model.Object, error)
	store.Indexer
}

// RenderError is a workflow that cannot be rendered through its own fault
// (no template, a template that fails, a worker outside its namespace), as
// opposed to the store failing. The engine records it in the workflow's
// status and does not try again.
type RenderError struct{ Err error }

// errMissing is a RenderError's cause when the Template or Hardware a
// workflow names is not in the store (Config.MissingGrace).
var errMissing = errors.New("not found")

func (e *RenderError) Error() string { return e.Err.Error() }
func (e *RenderError) Unwrap() error { return e.Err }

// WorkerError is a task whose worker no Hardware of the workflow's
// namespace answers to. Its message names only what the workflow says and
// its own namespace, never whose machine the worker is, if anyone's.
type WorkerError struct {
	Task      string // the task's name
	Worker    string // the worker, canonical if a MAC
	Namespace string // the workflow's
}

func (e *WorkerError) Error() string {
	return fmt.Sprintf("task %q: worker %q is not a MAC or agent ID of any Hardware in namespace %s", e.Task, e.Worker, e.Namespace)
}

// WorkerErrors are the tasks of one workflow whose workers are refused.
type WorkerErrors []*WorkerError

func (l WorkerErrors) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// WorkerID is the agent ID of a rendered worker: a MAC (usually
// {{.device_1}}) in the canonical form agents report as (worker_id=,
// Hardware.AgentIDs), however the workflow's hardwareMap spells it;
// anything else as it is.
func WorkerID(worker string) string { return ParseAgentName(worker).Canonical() }

// workerNamespaces returns the namespaces that have a Hardware an agent
// reporting as worker (a task's agent ID: canonical already, see WorkerID
// and ResolveAgent) runs on: one with worker among its MACs or its agent
// IDs (store.IndexMAC, store.IndexAgentID). A worker that is no MAC is
// simply not in the MAC index: nothing is parsed again.
func workerNamespaces(ctx context.Context, idx store.Indexer, worker string) (map[string]bool, error) {
	out := map[string]bool{}
	lookups := [][2]string{{store.IndexAgentID, worker}, {store.IndexMAC, worker}}
	for _, l := range lookups {
		objs, err := idx.ByIndex(ctx, model.KindHardware, l[0], l[1])
		if err != nil {
			return nil, fmt.Errorf("find the hardware of worker %q: %w", worker, err)
		}
		for _, o := range objs {
			out[o.GetObjectMeta().Namespace] = true
		}
	}
	return out, nil
}

// CheckWorkers checks that every task's agent is a MAC or agent ID of a
// Hardware in namespace ns: nil, a WorkerErrors naming each task that is
// not, or the index's error.
func CheckWorkers(ctx context.Context, idx store.Indexer, ns string, tasks []model.Task) error {
	var bad WorkerErrors
	owned := map[string]bool{}
	for _, t := range tasks {
		ok, seen := owned[t.AgentID]
		if !seen {
			nss, err := workerNamespaces(ctx, idx, t.AgentID)
			if err != nil {
				return err
			}
			ok = nss[ns]
			owned[t.AgentID] = ok
		}
		if !ok {
			bad = append(bad, &WorkerError{Task: t.Name, Worker: t.AgentID, Namespace: ns})
		}
	}
	if len(bad) > 0 {
		return bad
	}
	return nil
}

// RenderStored renders wf with its Template and Hardware (spec.templateRef
// and spec.hardwareRef in its namespace) read from src, and checks its
// workers (CheckWorkers). Errors that are the workflow's fault are
// *RenderError, wrapping WorkerErrors when a worker is refused; others
// are src's.
func RenderStored(ctx context.Context, src Source, wf *model.Workflow) (*model.WorkflowDefinition, error) {
	return renderStored(ctx, src, Budget, wf)
}

// renderStored is RenderStored under budget b.
func renderStored(ctx context.Context, src Source, b tmplbudget.Budget, wf *model.Workflow) (*model.WorkflowDefinition, error) {
	p, err := previewStored(ctx, src, b, wf)
	return p.Definition, err
}

// Preview is what the engine renders for a Workflow, read without
// writing anything: the web UI's template preview.
type Preview struct {
	// Template is the Template rendered (nil when it is missing).
	Template *model.Template
	// Output is the template's output, the workflow YAML, when execution
	// got that far (also when it then failed to parse or validate).
	Output []byte
	// Definition is the validated workflow definition; nil on error.
	Definition *model.WorkflowDefinition
}

// PreviewStored renders wf exactly as RenderStored does (the engine's
// rendering of a new workflow: same data, functions, budget and worker
// check) and also returns the template's output. The Preview is never
// nil; its error is RenderStored's.
func PreviewStored(ctx context.Context, src Source, wf *model.Workflow) (*Preview, error) {
	return previewStored(ctx, src, Budget, wf)
}

func previewStored(ctx context.Context, src Source, b tmplbudget.Budget, wf *model.Workflow) (*Preview, error) {
	p := &Preview{}
	if wf.Spec.TemplateRef == "" {
		return p, &RenderError{errors.New("spec.templateRef is empty")}
	}
	obj, err := src.Get(ctx, model.KindTemplate, wf.Namespace, wf.Spec.TemplateRef)
	if errors.Is(err, store.ErrNotFound) {
		return p, &RenderError{fmt.Errorf("template %s/%s %w", wf.Namespace, wf.Spec.TemplateRef, errMissing)}
	}
	if err != nil {
		return p, err
	}
	tmpl := obj.(*model.Template)
	p.Template = tmpl
	var hw *model.Hardware
	if wf.Spec.HardwareRef != "" {
		obj, err := src.Get(ctx, model.KindHardware, wf.Namespace, wf.Spec.HardwareRef)
		if errors.Is(err, store.ErrNotFound) {
			return p, &RenderError{fmt.Errorf("hardware %s/%s %w", wf.Namespace, wf.Spec.HardwareRef, errMissing)}
		}
		if err != nil {
			return p, err
		}
		hw = obj.(*model.Hardware)
	}
	out, def, err := renderText(ctx, b, tmpl, wf, hw)
	p.Output = out
	if err != nil {
		return p, &RenderError{fmt.Errorf("template %s: %w", tmpl.Key(), err)}
	}
	tasks := make([]model.Task, len(def.Tasks))
	for i, td := range def.Tasks {
		tasks[i] = model.Task{Name: td.Name, AgentID: WorkerID(td.Worker)}
	}
	if err := CheckWorkers(ctx, src, wf.Namespace, tasks); err != nil {
		var we WorkerErrors
		if errors.As(err, &we) {
			return p, &RenderError{err}
		}
		return p, err
	}
	p.Definition = def
	return p, nil
}
