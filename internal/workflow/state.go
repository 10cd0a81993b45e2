package workflow

import (
	"fmt"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// The state machine. Every function in this file is pure: it reads no clock
// (the time is the now parameter), touches no store, and changes only the
// status it is given. On error a status is left untouched.

// Retry backoff: a failed or timed-out action with retries left is retried
// after RetryBackoffBase, doubling per attempt (2s, 4s, 8s, …), capped at
// RetryBackoffMax.
const (
	RetryBackoffBase = 2 * time.Second
	RetryBackoffMax  = 60 * time.Second
)

// Values of WorkflowStatus.TemplateRendering.
const (
	RenderingSuccessful = "successful"
	RenderingFailed     = "failed"
)

// Condition types the engine sets on workflows.
const (
	// ConditionTemplateRendered: True once rendered, False with the
	// template's error text when rendering failed.
	ConditionTemplateRendered = "TemplateRendered"
	// ConditionWaiting: True while another workflow on the same hardware is
	// active; the message names it. Clients read it too, so the model
	// holds its name.
	ConditionWaiting = model.WorkflowConditionWaiting
	// ConditionAllowNetboot: records the toggleAllowNetboot changes made to
	// the Hardware (True: allowPXE set at start; False: cleared on success).
	ConditionAllowNetboot = "AllowNetboot"
)

// History event types (model.HistoryEvent.Type).
const (
	HistoryWorkflow = "workflow"
	HistoryAction   = "action"
	HistoryReport   = "report"
)

// RetryBackoff returns how long to hold back the retry after the given
// (1-based) failed attempt.
func RetryBackoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := RetryBackoffBase
	for i := 1; i < attempt; i++ {
		d *= 2
		if d >= RetryBackoffMax {
			return RetryBackoffMax
		}
	}
	if d > RetryBackoffMax {
		d = RetryBackoffMax
	}
	return d
}

// FormatDuration renders an execution duration the way it is stored:
// milliseconds below a second, tenths of a second above ("1.5s", "2m3.4s").
func FormatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// AddHistory appends ev, keeping at most model.MaxHistory entries (the
// oldest are dropped and counted in HistoryDropped).
func AddHistory(st *model.WorkflowStatus, ev model.HistoryEvent) {
	st.History = append(st.History, ev)
	if n := len(st.History) - model.MaxHistory; n > 0 {
		st.History = append(make([]model.HistoryEvent, 0, model.MaxHistory+1), st.History[n:]...)
		st.HistoryDropped += int64(n)
	}
}

// SetCondition adds c or replaces the condition of the same type. It reports
// whether anything changed (the time is not compared).
func SetCondition(st *model.WorkflowStatus, c model.Condition) bool {
	for i := range st.Conditions {
		o := &st.Conditions[i]
		if o.Type == c.Type {
			if o.Status == c.Status && o.Reason == c.Reason && o.Message == c.Message {
				return false
			}
			*o = c
			return true
		}
	}
	st.Conditions = append(st.Conditions, c)
	return true
}

// RemoveCondition removes the condition of that type; it reports whether
// there was one.
func RemoveCondition(st *model.WorkflowStatus, typ string) bool {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			st.Conditions = append(st.Conditions[:i:i], st.Conditions[i+1:]...)
			return true
		}
	}
	return false
}

// FindCondition returns the condition of that type, or nil.
func FindCondition(st *model.WorkflowStatus, typ string) *model.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

// idPrefix derives a short prefix for task and action IDs from the
// workflow's UID, so that a report for a deleted and re-created workflow of
// the same name cannot match the new one.
func idPrefix(uid string) string {
	uid = strings.ReplaceAll(uid, "-", "")
	if len(uid) > 8 {
		uid = uid[:8]
	}
	if uid == "" {
		return ""
	}
	return uid + "-"
}

// InitialStatus builds the status of a freshly rendered workflow: one Task per
// task of def with its agent (the rendered worker; a MAC in canonical form,
// see WorkerID), every action PENDING with
// its retries, the global timeout, state PENDING and a history entry. Task IDs
// are "<uid8>-t<N>", action IDs "<uid8>-t<N>a<M>" (1-based; without the
// prefix when the workflow has no UID).
func InitialStatus(wf *model.Workflow, def *model.WorkflowDefinition, now time.Time) model.WorkflowStatus {
	p := ""
	if wf != nil {
		p = idPrefix(wf.UID)
	}
	st := model.WorkflowStatus{
		State:             model.StatePending,
		GlobalTimeout:     def.GlobalTimeout,
		TemplateRendering: RenderingSuccessful,
	}
	if wf != nil {
		// Keep conditions and history set before rendering (none usually).
		st.Conditions = wf.Status.Conditions
		st.History = wf.Status.History
		st.HistoryDropped = wf.Status.HistoryDropped
	}
	n := 0
	for i, td := range def.Tasks {
		agent := WorkerID(td.Worker)
		t := model.Task{
			ID:          fmt.Sprintf("%st%d", p, i+1),
			Name:        td.Name,
			AgentID:     agent,
			Volumes:     td.Volumes,
			Environment: td.Environment,
			Actions:     make([]model.Action, 0, len(td.Actions)),
		}
		for j, ad := range td.Actions {
			t.Actions = append(t.Actions, model.Action{
				ID:          fmt.Sprintf("%st%da%d", p, i+1, j+1),
				Name:        ad.Name,
				Image:       ad.Image,
				Timeout:     ad.Timeout,
				Command:     ad.Command,
				Volumes:     ad.Volumes,
				Pid:         ad.Pid,
				Runtime:     ad.Runtime,
				Environment: ad.Environment,
				State:       model.StatePending,
				Retries:     ad.Retries,
			})
			n++
		}
		st.Tasks = append(st.Tasks, t)
	}
	SetCondition(&st, model.Condition{Type: ConditionTemplateRendered, Status: "True", Reason: "Rendered", Time: &now})
	AddHistory(&st, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: model.StatePending,
		Message: fmt.Sprintf("template rendered: %d task(s), %d action(s)", len(st.Tasks), n)})
	return st
}

// RenderFailedStatus marks a workflow whose template could not be rendered:
// state FAILED, TemplateRendering "failed", and the error text in a condition
// and a history entry.
func RenderFailedStatus(st *model.WorkflowStatus, err error, now time.Time) {
	msg := err.Error()
	st.State = model.StateFailed
	st.TemplateRendering = RenderingFailed
	st.CompletionTime = &now
	SetCondition(st, model.Condition{Type: ConditionTemplateRendered, Status: "False", Reason: "RenderFailed",
		Message: msg, Time: &now})
	AddHistory(st, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: model.StateFailed,
		Message: "template rendering failed: " + msg})
}

// firstUnfinished returns the first action, in task then action order, that
// is not SUCCESS.
func firstUnfinished(st *model.WorkflowStatus) (ti, ai int, ok bool) {
	for i := range st.Tasks {
		for j := range st.Tasks[i].Actions {
			if st.Tasks[i].Actions[j].State != model.StateSuccess {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

func badReport(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadReport, fmt.Sprintf(format, args...))
}

// locate finds the task and action a report is about.
func locate(st *model.WorkflowStatus, r ActionReport) (ti, ai int, err error) {
	ti = -1
	for i := range st.Tasks {
		if st.Tasks[i].ID == r.TaskID || (r.TaskID == "" && taskHasAction(&st.Tasks[i], r)) {
			ti = i
			break
		}
	}
	if ti < 0 {
		return 0, 0, badReport("unknown task %q", r.TaskID)
	}
	t := &st.Tasks[ti]
	for j := range t.Actions {
		a := &t.Actions[j]
		if (r.ActionID != "" && a.ID == r.ActionID) || (r.ActionID == "" && r.ActionName != "" && a.Name == r.ActionName) {
			if r.ActionName != "" && r.ActionName != a.Name {
				return 0, 0, badReport("action %q is named %q, not %q", a.ID, a.Name, r.ActionName)
			}
			return ti, j, nil
		}
	}
	return 0, 0, badReport("unknown action %q (%q) in task %q", r.ActionID, r.ActionName, t.Name)
}

func taskHasAction(t *model.Task, r ActionReport) bool {
	for j := range t.Actions {
		if r.ActionID != "" && t.Actions[j].ID == r.ActionID {
			return true
		}
	}
	return false
}

func (st wfState) setCurrent(ti, ai int) {
	t := &st.Tasks[ti]
	a := &t.Actions[ai]
	st.CurrentState = &model.CurrentState{AgentID: t.AgentID, TaskID: t.ID, ActionID: a.ID, State: a.State,
		ActionName: a.Name, TaskName: t.Name}
}

// wfState adds helpers to a status.
type wfState struct{ *model.WorkflowStatus }

// ApplyReport applies an agent's report to st at now. It returns whether st
// changed; a duplicate of an already recorded final report is accepted and
// changes nothing, and so is any report on a CANCELLED workflow (the agent
// learns from the state it is answered with that it is to stop). While a
// cancellation waits (CancelRequested), the running action's end is
// recorded without retry and ends the workflow CANCELLED — SUCCESS if it
// was the last action and succeeded. A report that does not fit — unknown task or action,
// another agent's task, an action reported while an earlier one has not
// succeeded, a transition the action cannot make, or a workflow that already
// ended — is an error wrapping ErrBadReport, and st is left untouched.
func ApplyReport(status *model.WorkflowStatus, r ActionReport, now time.Time) (bool, error) {
	st := wfState{status}
	ti, ai, err := locate(status, r)
	if err != nil {
		return false, err
	}
	t := &st.Tasks[ti]
	a := &t.Actions[ai]
	if r.AgentID != t.AgentID {
		return false, badReport("task %q belongs to agent %q, not %q", t.Name, t.AgentID, r.AgentID)
	}
	if st.State == model.StateCancelled {
		// Acknowledged but not recorded: the answer, CANCELLED, tells
		// the agent to run nothing more.
		return false, nil
	}
	state := r.State
	cur := a.State

	// Duplicates of a recorded end are idempotent, even after the workflow
	// ended: the agent may not have seen our answer.
	switch {
	case state.IsFinal() && state == cur:
		return false, nil
	case (state == model.StateFailed || state == model.StateTimeout) && cur == model.StatePending && a.RetryAfter != nil:
		// The previous attempt's end, already turned into a pending retry.
		return false, nil
	}
	if st.State.IsFinal() {
		return false, badReport("workflow already ended (%s)", st.State)
	}
	if fi, fa, ok := firstUnfinished(status); !ok || fi != ti || fa != ai {
		if ok {
			return false, badReport("action %q of task %q reported out of order: %q of task %q has not succeeded",
				a.Name, t.Name, st.Tasks[fi].Actions[fa].Name, st.Tasks[fi].Name)
		}
		return false, badReport("action %q reported after the workflow finished", a.Name)
	}

	switch state {
	case model.StateRunning:
		switch cur {
		case model.StatePending:
			st.start(ti, ai, r, now)
		case model.StateRunning:
			if r.Progress != nil {
				p := *r.Progress
				a.Progress = &p
			}
			AddHistory(status, model.HistoryEvent{Time: now, Type: HistoryReport, Task: t.Name, Action: a.Name,
				AgentID: r.AgentID, State: model.StateRunning, Message: r.Message, Attempt: a.Attempt, Progress: a.Progress})
		default:
			return false, badReport("action %q is %s; it cannot be RUNNING again", a.Name, cur)
		}
	case model.StateSuccess, model.StateFailed, model.StateTimeout:
		switch cur {
		case model.StatePending:
			// An end without a start: count it as a run of its own.
			st.start(ti, ai, r, now)
		case model.StateRunning:
		default:
			return false, badReport("action %q is already %s; cannot report %s", a.Name, cur, state)
		}
		if r.Progress != nil {
			p := *r.Progress
			a.Progress = &p
		}
		st.finish(ti, ai, state, r.Message, now)
	default:
		return false, badReport("unknown action state %q", r.State)
	}
	return true, nil
}

// start marks an action RUNNING for a new attempt, and the workflow RUNNING.
func (st wfState) start(ti, ai int, r ActionReport, now time.Time) {
	t := &st.Tasks[ti]
	a := &t.Actions[ai]
	a.State = model.StateRunning
	a.Attempt++
	start := now
	a.ExecutionStart = &start
	a.ExecutionStop = nil
	a.ExecutionDuration = ""
	a.RetryAfter = nil
	a.Message = r.Message
	if r.Progress != nil {
		p := *r.Progress
		a.Progress = &p
	} else {
		a.Progress = nil
	}
	if st.StartTime == nil {
		s := now
		st.StartTime = &s
	}
	if st.State != model.StateRunning {
		st.State = model.StateRunning
		AddHistory(st.WorkflowStatus, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: model.StateRunning})
	}
	st.setCurrent(ti, ai)
	AddHistory(st.WorkflowStatus, model.HistoryEvent{Time: now, Type: HistoryAction, Task: t.Name, Action: a.Name,
		AgentID: t.AgentID, State: model.StateRunning, Message: r.Message, Attempt: a.Attempt})
}

// finish ends the running attempt of an action with a final state. A failure
// or timeout with retries left sends the action back to PENDING with a
// RetryAfter; otherwise the workflow ends with the action's state.
func (st wfState) finish(ti, ai int, state model.State, msg string, now time.Time) {
	t := &st.Tasks[ti]
	a := &t.Actions[ai]
	stopClock(a, now)
	a.Message = msg
	if state == model.StateSuccess {
		a.State = model.StateSuccess
		st.setCurrent(ti, ai)
		AddHistory(st.WorkflowStatus, model.HistoryEvent{Time: now, Type: HistoryAction, Task: t.Name, Action: a.Name,
			AgentID: t.AgentID, State: model.StateSuccess, Message: msg, Attempt: a.Attempt})
		if _, _, more := firstUnfinished(st.WorkflowStatus); !more {
			// Even when cancelling: the last action is done, so nothing
			// was left to cancel.
			st.end(model.StateSuccess, "", now)
		} else if st.CancelRequested != nil {
			st.endCancelled(fmt.Sprintf("after action %q of task %q succeeded", a.Name, t.Name), now)
		}
		return
	}
	if a.Attempt <= a.Retries && st.CancelRequested == nil {
		after := now.Add(RetryBackoff(a.Attempt))
		a.State = model.StatePending
		a.RetryAfter = &after
		st.setCurrent(ti, ai)
		AddHistory(st.WorkflowStatus, model.HistoryEvent{Time: now, Type: HistoryAction, Task: t.Name, Action: a.Name,
			AgentID: t.AgentID, State: state, Attempt: a.Attempt,
			Message: fmt.Sprintf("%s; will be retried after %s (retry %d of %d)",
				orDefault(msg, strings.ToLower(string(state))), after.Sub(now), a.Attempt, a.Retries)})
		return
	}
	a.State = state
	st.setCurrent(ti, ai)
	AddHistory(st.WorkflowStatus, model.HistoryEvent{Time: now, Type: HistoryAction, Task: t.Name, Action: a.Name,
		AgentID: t.AgentID, State: state, Message: msg, Attempt: a.Attempt})
	if st.CancelRequested != nil {
		st.endCancelled(fmt.Sprintf("after action %q of task %q ended %s (%s)",
			a.Name, t.Name, state, orDefault(msg, strings.ToLower(string(state)))), now)
		return
	}
	st.end(state, fmt.Sprintf("action %q of task %q: %s", a.Name, t.Name, orDefault(msg, strings.ToLower(string(state)))), now)
}

// end puts the workflow in a final state.
func (st wfState) end(state model.State, msg string, now time.Time) {
	st.State = state
	c := now
	st.CompletionTime = &c
	g := now
	st.GlobalExecutionStop = &g
	AddHistory(st.WorkflowStatus, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: state, Message: msg})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// CheckDeadlines enforces timeouts at now on the server's clock. A RUNNING
// action past ExecutionStart + its timeout (0: no limit) is handled like a
// TIMEOUT report, so its retries apply; a RUNNING workflow past StartTime +
// GlobalTimeout (0: no limit) ends in TIMEOUT without retry. It returns
// whether st changed and the next time something is due (the earliest of the
// running action's deadline, the global deadline and a pending retry's
// RetryAfter), or the zero time when nothing is.
func CheckDeadlines(status *model.WorkflowStatus, now time.Time) (changed bool, next time.Time) {
	st := wfState{status}
	if st.State.IsFinal() || st.State == "" {
		return false, time.Time{}
	}
	// Global limit first: it wins over any per-action retry.
	if gd, ok := globalDeadline(status); ok && !now.Before(gd) {
		msg := fmt.Sprintf("global timeout of %ds exceeded", st.GlobalTimeout)
		if ti, ai, ok := firstUnfinished(status); ok {
			if st.Tasks[ti].Actions[ai].State == model.StateRunning {
				st.stopAction(ti, ai, model.StateTimeout, msg, now)
			}
		}
		if st.CancelRequested != nil {
			st.endCancelled("at the deadline: "+msg, now)
		} else {
			st.end(model.StateTimeout, msg, now)
		}
		return true, time.Time{}
	}
	if ti, ai, ok := firstUnfinished(status); ok {
		a := &st.Tasks[ti].Actions[ai]
		if ad, ok := actionDeadline(a); ok && !now.Before(ad) {
			st.finish(ti, ai, model.StateTimeout,
				fmt.Sprintf("action timeout of %ds exceeded (enforced by the server)", a.Timeout), now)
			changed = true
		}
	}
	return changed, NextDeadline(status)
}

func globalDeadline(st *model.WorkflowStatus) (time.Time, bool) {
	if st.State != model.StateRunning || st.GlobalTimeout <= 0 || st.StartTime == nil {
		return time.Time{}, false
	}
	return st.StartTime.Add(time.Duration(st.GlobalTimeout) * time.Second), true
}

func actionDeadline(a *model.Action) (time.Time, bool) {
	if a.State != model.StateRunning || a.Timeout <= 0 || a.ExecutionStart == nil {
		return time.Time{}, false
	}
	return a.ExecutionStart.Add(time.Duration(a.Timeout) * time.Second), true
}

// NextDeadline returns when CheckDeadlines next has something to do, or the
// zero time.
func NextDeadline(st *model.WorkflowStatus) time.Time {
	if st.State.IsFinal() || st.State == "" {
		return time.Time{}
	}
	var next time.Time
	consider := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if gd, ok := globalDeadline(st); ok {
		consider(gd)
	}
	if ti, ai, ok := firstUnfinished(st); ok {
		a := &st.Tasks[ti].Actions[ai]
		if ad, ok := actionDeadline(a); ok {
			consider(ad)
		}
		if a.State == model.StatePending && a.RetryAfter != nil {
			consider(*a.RetryAfter)
		}
	}
	return next
}

// NextActionFor returns the action agentID is to run next in the workflow
// (id "namespace/name") at now, or nil. That is the first action not yet
// SUCCESS, if it belongs to the agent's task and is PENDING (and past any
// RetryAfter) or RUNNING (the agent restarted mid-action: it gets the action
// again). A workflow being cancelled hands out nothing. Task volumes come before the action's; the action's environment
// overrides the task's.
func NextActionFor(st *model.WorkflowStatus, workflowID, agentID string, now time.Time) *NextAction {
	if st.CancelRequested != nil {
		return nil // not even the running action again: see CancelInterrupted
	}
	switch st.State {
	case model.StatePending, model.StateRunning:
	default:
		return nil
	}
	ti, ai, ok := firstUnfinished(st)
	if !ok {
		return nil
	}
	t := &st.Tasks[ti]
	a := &t.Actions[ai]
	if t.AgentID != agentID {
		return nil
	}
	switch a.State {
	case model.StatePending:
		if a.RetryAfter != nil && now.Before(*a.RetryAfter) {
			return nil
		}
	case model.StateRunning:
	default:
		return nil
	}
	na := &NextAction{
		WorkflowID: workflowID,
		TaskID:     t.ID,
		ActionID:   a.ID,
		TaskName:   t.Name,
		Name:       a.Name,
		Image:      a.Image,
		Timeout:    a.Timeout,
		Command:    append([]string(nil), a.Command...),
		Pid:        a.Pid,
		Runtime:    a.Runtime,
		Attempt:    a.Attempt,
	}
	if a.State == model.StatePending {
		na.Attempt = a.Attempt + 1
	}
	if len(t.Volumes)+len(a.Volumes) > 0 {
		na.Volumes = append(append(make([]string, 0, len(t.Volumes)+len(a.Volumes)), t.Volumes...), a.Volumes...)
	}
	if len(t.Environment)+len(a.Environment) > 0 {
		na.Environment = make(map[string]string, len(t.Environment)+len(a.Environment))
		for k, v := range t.Environment {
			na.Environment[k] = v
		}
		for k, v := range a.Environment {
			na.Environment[k] = v
		}
	}
	return na
}

// Cancel applies a cancellation to st at now. A workflow not yet started
// (no state yet, or PENDING) or with no action running (between actions,
// or holding a failed one back for a retry) ends CANCELLED at once. With
// an action RUNNING, CancelRequested is set instead: NextActionFor hands
// out nothing more, and the end of that action (its report, see
// ApplyReport, or its deadline, see CheckDeadlines) ends the workflow
// CANCELLED. force ends it at once even then, marking the running action
// CANCELLED: its outcome on the machine is unknown, and the agent learns
// of the cancellation only from the answer to its next report.
//
// reason, if not empty, is recorded with the cancellation. It returns
// whether st changed: cancelling again changes nothing (unless force turns
// a waiting cancellation into an immediate one). A workflow that already
// ended otherwise is an error wrapping ErrEnded, and st is left untouched.
func Cancel(status *model.WorkflowStatus, now time.Time, force bool, reason string) (bool, error) {
	st := wfState{status}
	switch state := st.State; state {
	case model.StateCancelled:
		return false, nil
	case "", model.StatePending:
		st.CancelReason = reason
		st.endCancelled("before it started", now)
		return true, nil
	case model.StateRunning:
	default:
		return false, fmt.Errorf("%w (%s)", ErrEnded, state)
	}
	ti, ai, ok := firstUnfinished(status)
	if !ok || st.Tasks[ti].Actions[ai].State != model.StateRunning {
		st.CancelReason = reason
		st.endCancelled("between actions", now)
		return true, nil
	}
	t := &st.Tasks[ti]
	a := &t.Actions[ai]
	if force {
		if reason != "" || st.CancelRequested == nil {
			st.CancelReason = reason
		}
		st.stopAction(ti, ai, model.StateCancelled, "cancelled (forced) while running: its outcome on the machine is unknown", now)
		st.endCancelled(fmt.Sprintf("forced while action %q of task %q was running", a.Name, t.Name), now)
		return true, nil
	}
	if st.CancelRequested != nil {
		return false, nil
	}
	c := now
	st.CancelRequested = &c
	st.CancelReason = reason
	AddHistory(status, model.HistoryEvent{Time: now, Type: HistoryWorkflow, State: st.State,
		Message: withReason(fmt.Sprintf("cancel requested: action %q of task %q finishes first; no further action is handed out",
			a.Name, t.Name), reason)})
	return true, nil
}

// endCancelled ends the workflow CANCELLED; the history says how and why.
func (st wfState) endCancelled(how string, now time.Time) {
	st.end(model.StateCancelled, withReason("cancelled "+how, st.CancelReason), now)
}

// withReason appends a cancellation's reason to msg.
func withReason(msg, reason string) string {
	if reason == "" {
		return msg
	}
	return msg + "; reason: " + reason
}

// CancelInterrupted ends a workflow whose cancellation waits for an action
// of agentID's task that is recorded RUNNING, when that agent asks for
// work: an agent asks only between actions, so it is no longer running it
// (it restarted, or lost the action). The action is marked CANCELLED, its
// outcome unknown, and the workflow CANCELLED. It reports whether st
// changed.
func CancelInterrupted(status *model.WorkflowStatus, agentID string, now time.Time) bool {
	st := wfState{status}
	if st.CancelRequested == nil || st.State != model.StateRunning {
		return false
	}
	ti, ai, ok := firstUnfinished(status)
	if !ok || st.Tasks[ti].AgentID != agentID || st.Tasks[ti].Actions[ai].State != model.StateRunning {
		return false
	}
	t := &st.Tasks[ti]
	a := &t.Actions[ai]
	st.stopAction(ti, ai, model.StateCancelled, "cancelled: the agent asked for work while this action was recorded running (it restarted); its outcome is unknown", now)
	st.endCancelled(fmt.Sprintf("when action %q of task %q was interrupted", a.Name, t.Name), now)
	return true
}

// stopClock records that a's run ended at now: its stop time and duration.
func stopClock(a *model.Action, now time.Time) {
	stop := now
	a.ExecutionStop = &stop
	if a.ExecutionStart != nil {
		a.ExecutionDuration = FormatDuration(now.Sub(*a.ExecutionStart))
	}
}

// stopAction ends action ai of task ti in state (TIMEOUT, CANCELLED)
// without a report from the agent: its stop time and duration, the
// message, the current-action pointer and a history entry.
func (st wfState) stopAction(ti, ai int, state model.State, msg string, now time.Time) {
	t := &st.Tasks[ti]
	a := &t.Actions[ai]
	stopClock(a, now)
	a.State = state
	a.Message = msg
	st.setCurrent(ti, ai)
	AddHistory(st.WorkflowStatus, model.HistoryEvent{Time: now, Type: HistoryAction, Task: t.Name, Action: a.Name,
		AgentID: t.AgentID, State: state, Message: msg, Attempt: a.Attempt})
}
