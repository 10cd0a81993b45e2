package model

import (
	"maps"
	"reflect"
	"slices"
	"time"
)

// Typed copies for the agent path. model.DeepCopy walks any object by
// reflection, which costs more than the report it serves when a workflow
// is read and written thousands of times a second; these copy a
// WorkflowStatus field by field. TestWorkflowStatusCopyIsDeep fills every
// field by reflection and fails if a field is added here without a copy.

// WithPrivateStatus returns a new Workflow that shares wf's metadata and
// spec and has a deep copy of its status: what changing the status of a
// shared (immutable) Workflow needs (copy-on-write), at the price of the
// status alone. The metadata's and spec's maps and pointers stay shared:
// the result's owner must replace them, never modify them in place.
func WithPrivateStatus(wf *Workflow) *Workflow {
	out := *wf
	out.Status = wf.Status.DeepCopy()
	return &out
}

// ShallowCopy returns a new object with o's fields; maps, slices and
// pointers inside are shared. For changing a field of a shared object's
// top-level metadata (a resourceVersion) without copying the rest.
func ShallowCopy[T Object](o T) T {
	v := reflect.ValueOf(o).Elem()
	n := reflect.New(v.Type())
	n.Elem().Set(v)
	return n.Interface().(T)
}

// DeepCopy returns a copy of s that shares nothing with it.
func (s *WorkflowStatus) DeepCopy() WorkflowStatus {
	out := *s
	if s.CurrentState != nil {
		cs := *s.CurrentState
		out.CurrentState = &cs
	}
	out.GlobalExecutionStop = copyTime(s.GlobalExecutionStop)
	out.StartTime = copyTime(s.StartTime)
	out.CompletionTime = copyTime(s.CompletionTime)
	out.CancelRequested = copyTime(s.CancelRequested)
	if s.Tasks != nil {
		out.Tasks = make([]Task, len(s.Tasks))
		for i := range s.Tasks {
			out.Tasks[i] = s.Tasks[i].deepCopy()
		}
	}
	if s.Conditions != nil {
		out.Conditions = make([]Condition, len(s.Conditions))
		for i, c := range s.Conditions {
			c.Time = copyTime(c.Time)
			out.Conditions[i] = c
		}
	}
	if s.History != nil {
		out.History = make([]HistoryEvent, len(s.History), cap(s.History))
		for i, h := range s.History {
			h.Progress = copyProgress(h.Progress)
			out.History[i] = h
		}
	}
	return out
}

func (t *Task) deepCopy() Task {
	out := *t
	if t.Actions != nil {
		out.Actions = make([]Action, len(t.Actions))
		for i := range t.Actions {
			out.Actions[i] = t.Actions[i].deepCopy()
		}
	}
	out.Volumes = slices.Clone(t.Volumes)
	out.Environment = maps.Clone(t.Environment)
	return out
}

func (a *Action) deepCopy() Action {
	out := *a
	out.Command = slices.Clone(a.Command)
	out.Volumes = slices.Clone(a.Volumes)
	out.Environment = maps.Clone(a.Environment)
	out.ExecutionStart = copyTime(a.ExecutionStart)
	out.ExecutionStop = copyTime(a.ExecutionStop)
	out.RetryAfter = copyTime(a.RetryAfter)
	out.Progress = copyProgress(a.Progress)
	return out
}

func copyTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

func copyProgress(p *Progress) *Progress {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
