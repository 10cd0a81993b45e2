package workflow

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// def3 is one task of three actions for agent "a1"; retries and timeouts per
// action as given.
func def3(retries []int, timeouts []int64, global int64) *model.WorkflowDefinition {
	d := &model.WorkflowDefinition{Name: "d", GlobalTimeout: global, Tasks: []model.TaskDefinition{{
		Name: "install", Worker: "a1", Volumes: []string{"/dev:/dev"}, Environment: map[string]string{"A": "task", "B": "task"},
	}}}
	for i, n := range []string{"one", "two", "three"} {
		ad := model.ActionDefinition{Name: n, Image: "img/" + n, Timeout: 60}
		if retries != nil {
			ad.Retries = retries[i]
		}
		if timeouts != nil {
			ad.Timeout = timeouts[i]
		}
		if i == 0 {
			ad.Environment = map[string]string{"B": "action"}
			ad.Volumes = []string{"/tmp:/tmp"}
		}
		d.Tasks[0].Actions = append(d.Tasks[0].Actions, ad)
	}
	return d
}

func newStatus(d *model.WorkflowDefinition) model.WorkflowStatus {
	wf := &model.Workflow{ObjectMeta: model.ObjectMeta{Name: "w", Namespace: "default", UID: "0123abcd-ef"}}
	return InitialStatus(wf, d, t0)
}

func rep(st *model.WorkflowStatus, ai int, state model.State) ActionReport {
	t := st.Tasks[0]
	return ActionReport{WorkflowID: "default/w", AgentID: t.AgentID, TaskID: t.ID, ActionID: t.Actions[ai].ID,
		ActionName: t.Actions[ai].Name, State: state}
}

func mustApply(t *testing.T, st *model.WorkflowStatus, r ActionReport, now time.Time) {
	t.Helper()
	if _, err := ApplyReport(st, r, now); err != nil {
		t.Fatalf("ApplyReport(%s %s): %v", r.ActionName, r.State, err)
	}
}

func TestInitialStatus(t *testing.T) {
	st := newStatus(def3([]int{0, 2, 0}, nil, 100))
	if st.State != model.StatePending || st.TemplateRendering != "successful" || st.GlobalTimeout != 100 {
		t.Fatalf("status %+v", st)
	}
	task := st.Tasks[0]
	if task.ID != "0123abcd-t1" || task.AgentID != "a1" || task.Actions[1].ID != "0123abcd-t1a2" ||
		task.Actions[1].Retries != 2 || task.Actions[1].State != model.StatePending {
		t.Fatalf("task %+v", task)
	}
	if len(st.History) != 1 || st.History[0].Time != t0 {
		t.Fatalf("history %+v", st.History)
	}
}

func TestHappyPath(t *testing.T) {
	st := newStatus(def3(nil, nil, 0))
	now := t0
	for i := range 3 {
		mustApply(t, &st, rep(&st, i, model.StateRunning), now)
		if st.State != model.StateRunning || st.Tasks[0].Actions[i].State != model.StateRunning ||
			st.CurrentState.ActionName != st.Tasks[0].Actions[i].Name || st.Tasks[0].Actions[i].Attempt != 1 {
			t.Fatalf("after start %d: %+v", i, st)
		}
		now = now.Add(1500 * time.Millisecond)
		mustApply(t, &st, rep(&st, i, model.StateSuccess), now)
		a := st.Tasks[0].Actions[i]
		if a.State != model.StateSuccess || a.ExecutionDuration != "1.5s" || !a.ExecutionStop.Equal(now) {
			t.Fatalf("action %d: %+v", i, a)
		}
		now = now.Add(time.Second)
	}
	if st.State != model.StateSuccess || !st.StartTime.Equal(t0) || st.CompletionTime == nil ||
		!st.GlobalExecutionStop.Equal(t0.Add(2*time.Second+4500*time.Millisecond)) {
		t.Fatalf("final %+v", st)
	}
	// 1 rendered + 1 workflow RUNNING + 3×2 actions + 1 workflow SUCCESS.
	if len(st.History) != 9 {
		t.Fatalf("history %d: %+v", len(st.History), st.History)
	}
	if NextActionFor(&st, "default/w", "a1", now) != nil {
		t.Fatal("next action after success")
	}
}

func TestProgressReport(t *testing.T) {
	st := newStatus(def3(nil, nil, 0))
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	r := rep(&st, 0, model.StateRunning)
	r.Progress = &model.Progress{Bytes: 10, TotalBytes: 100, Percent: 10}
	mustApply(t, &st, r, t0.Add(time.Second))
	a := st.Tasks[0].Actions[0]
	if a.Attempt != 1 || a.Progress == nil || a.Progress.Bytes != 10 || !a.ExecutionStart.Equal(t0) {
		t.Fatalf("action %+v", a)
	}
	if last := st.History[len(st.History)-1]; last.Type != HistoryReport || last.Progress.Percent != 10 {
		t.Fatalf("history %+v", last)
	}
}

func TestFailureWithoutRetries(t *testing.T) {
	st := newStatus(def3(nil, nil, 0))
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	r := rep(&st, 0, model.StateFailed)
	r.Message = "disk not found"
	mustApply(t, &st, r, t0.Add(time.Second))
	if st.State != model.StateFailed || st.Tasks[0].Actions[0].State != model.StateFailed ||
		st.Tasks[0].Actions[0].Message != "disk not found" || st.CompletionTime == nil {
		t.Fatalf("status %+v", st)
	}
	if last := st.History[len(st.History)-1]; !strings.Contains(last.Message, "disk not found") {
		t.Fatalf("history %+v", last)
	}
	// Idempotent duplicate.
	before := len(st.History)
	changed, err := ApplyReport(&st, r, t0.Add(2*time.Second))
	if err != nil || changed || len(st.History) != before {
		t.Fatalf("duplicate: %v %v", changed, err)
	}
	// Anything else is refused: the workflow ended.
	if _, err := ApplyReport(&st, rep(&st, 0, model.StateRunning), t0.Add(3*time.Second)); !errors.Is(err, ErrBadReport) {
		t.Fatalf("after end: %v", err)
	}
}

func TestFailureWithRetries(t *testing.T) {
	st := newStatus(def3([]int{2, 0, 0}, nil, 0))
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	mustApply(t, &st, rep(&st, 0, model.StateFailed), t0.Add(time.Second))
	a := st.Tasks[0].Actions[0]
	if st.State != model.StateRunning || a.State != model.StatePending || a.RetryAfter == nil ||
		!a.RetryAfter.Equal(t0.Add(3*time.Second)) || a.Attempt != 1 {
		t.Fatalf("after 1st failure: state %s action %+v", st.State, a)
	}
	if !strings.Contains(st.History[len(st.History)-1].Message, "will be retried") {
		t.Fatalf("history %+v", st.History[len(st.History)-1])
	}
	if d := NextDeadline(&st); !d.Equal(*a.RetryAfter) {
		t.Fatalf("next deadline %v", d)
	}
	// Duplicate of the failure: idempotent.
	if changed, err := ApplyReport(&st, rep(&st, 0, model.StateFailed), t0.Add(time.Second)); err != nil || changed {
		t.Fatalf("duplicate failure: %v %v", changed, err)
	}
	// Held back until RetryAfter.
	if na := NextActionFor(&st, "default/w", "a1", t0.Add(2*time.Second)); na != nil {
		t.Fatalf("handed out before RetryAfter: %+v", na)
	}
	na := NextActionFor(&st, "default/w", "a1", t0.Add(3*time.Second))
	if na == nil || na.Name != "one" || na.Attempt != 2 {
		t.Fatalf("next %+v", na)
	}
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0.Add(3*time.Second))
	mustApply(t, &st, rep(&st, 0, model.StateSuccess), t0.Add(4*time.Second))
	a = st.Tasks[0].Actions[0]
	if a.State != model.StateSuccess || a.Attempt != 2 || a.RetryAfter != nil || a.ExecutionDuration != "1s" {
		t.Fatalf("after retry: %+v", a)
	}
	for i := 1; i < 3; i++ {
		mustApply(t, &st, rep(&st, i, model.StateRunning), t0.Add(5*time.Second))
		mustApply(t, &st, rep(&st, i, model.StateSuccess), t0.Add(6*time.Second))
	}
	if st.State != model.StateSuccess {
		t.Fatalf("state %s", st.State)
	}
}

func TestRetriesExhausted(t *testing.T) {
	st := newStatus(def3([]int{1, 0, 0}, nil, 0))
	now := t0
	for attempt := 1; attempt <= 2; attempt++ {
		mustApply(t, &st, rep(&st, 0, model.StateRunning), now)
		mustApply(t, &st, rep(&st, 0, model.StateTimeout), now.Add(time.Second))
		now = now.Add(time.Minute)
	}
	if st.State != model.StateTimeout || st.Tasks[0].Actions[0].State != model.StateTimeout || st.Tasks[0].Actions[0].Attempt != 2 {
		t.Fatalf("status %s %+v", st.State, st.Tasks[0].Actions[0])
	}
}

func TestRetryBackoff(t *testing.T) {
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 60 * time.Second, 60 * time.Second}
	for i, w := range want {
		if got := RetryBackoff(i + 1); got != w {
			t.Errorf("RetryBackoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if RetryBackoff(1000) != RetryBackoffMax {
		t.Error("no cap")
	}
}

func TestBadReports(t *testing.T) {
	st := newStatus(def3(nil, nil, 0))
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	wrongAgent := rep(&st, 0, model.StateSuccess)
	wrongAgent.AgentID = "intruder"
	unknownAction := rep(&st, 0, model.StateSuccess)
	unknownAction.ActionID = "nope"
	unknownTask := rep(&st, 0, model.StateSuccess)
	unknownTask.TaskID = "nope"
	nameMismatch := rep(&st, 0, model.StateSuccess)
	nameMismatch.ActionName = "two"
	badState := rep(&st, 0, "EXPLODED")
	for name, r := range map[string]ActionReport{
		"out of order start":   rep(&st, 1, model.StateRunning),
		"out of order success": rep(&st, 2, model.StateSuccess),
		"wrong agent":          wrongAgent,
		"unknown action":       unknownAction,
		"unknown task":         unknownTask,
		"name mismatch":        nameMismatch,
		"bad state":            badState,
		"pending state":        rep(&st, 0, model.StatePending),
	} {
		before := len(st.History)
		changed, err := ApplyReport(&st, r, t0.Add(time.Second))
		if !errors.Is(err, ErrBadReport) || changed || len(st.History) != before {
			t.Errorf("%s: changed=%v err=%v", name, changed, err)
		}
	}
	// Success, then RUNNING again for the same action is refused; a
	// duplicate SUCCESS is accepted.
	mustApply(t, &st, rep(&st, 0, model.StateSuccess), t0.Add(time.Second))
	if changed, err := ApplyReport(&st, rep(&st, 0, model.StateSuccess), t0.Add(2*time.Second)); err != nil || changed {
		t.Errorf("duplicate success: %v %v", changed, err)
	}
	if _, err := ApplyReport(&st, rep(&st, 0, model.StateRunning), t0.Add(2*time.Second)); !errors.Is(err, ErrBadReport) {
		t.Errorf("running after success: %v", err)
	}
}

func TestActionTimeoutDeadline(t *testing.T) {
	st := newStatus(def3([]int{1, 0, 0}, []int64{30, 0, 10}, 0))
	if ch, next := CheckDeadlines(&st, t0); ch || !next.IsZero() {
		t.Fatalf("pending: %v %v", ch, next)
	}
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	ch, next := CheckDeadlines(&st, t0.Add(29*time.Second))
	if ch || !next.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("before deadline: %v %v", ch, next)
	}
	// First timeout: retried.
	ch, next = CheckDeadlines(&st, t0.Add(30*time.Second))
	a := st.Tasks[0].Actions[0]
	if !ch || a.State != model.StatePending || !next.Equal(t0.Add(32*time.Second)) || !strings.Contains(a.Message, "action timeout of 30s") {
		t.Fatalf("1st timeout: %v %v %+v", ch, next, a)
	}
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0.Add(32*time.Second))
	ch, _ = CheckDeadlines(&st, t0.Add(62*time.Second))
	if !ch || st.State != model.StateTimeout || st.Tasks[0].Actions[0].State != model.StateTimeout {
		t.Fatalf("2nd timeout: %s %+v", st.State, st.Tasks[0].Actions[0])
	}
	if !strings.Contains(st.History[len(st.History)-1].Message, "action timeout of 30s exceeded") {
		t.Fatalf("history %+v", st.History[len(st.History)-1])
	}
	// A late report of the agent is refused.
	if _, err := ApplyReport(&st, rep(&st, 0, model.StateSuccess), t0.Add(63*time.Second)); !errors.Is(err, ErrBadReport) {
		t.Fatalf("late success: %v", err)
	}
}

func TestNoActionTimeout(t *testing.T) {
	st := newStatus(def3(nil, []int64{0, 0, 0}, 0))
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	if ch, next := CheckDeadlines(&st, t0.Add(1000*time.Hour)); ch || !next.IsZero() {
		t.Fatalf("%v %v", ch, next)
	}
}

func TestGlobalTimeout(t *testing.T) {
	st := newStatus(def3([]int{5, 5, 5}, []int64{100, 100, 100}, 50))
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	if _, next := CheckDeadlines(&st, t0.Add(10*time.Second)); !next.Equal(t0.Add(50 * time.Second)) {
		t.Fatalf("next %v", next)
	}
	ch, next := CheckDeadlines(&st, t0.Add(50*time.Second))
	if !ch || !next.IsZero() || st.State != model.StateTimeout || st.Tasks[0].Actions[0].State != model.StateTimeout {
		t.Fatalf("%v %v %s %+v", ch, next, st.State, st.Tasks[0].Actions[0])
	}
	if !strings.Contains(st.History[len(st.History)-1].Message, "global timeout of 50s exceeded") {
		t.Fatalf("history %+v", st.History[len(st.History)-1])
	}
}

func TestNextActionFor(t *testing.T) {
	d := def3(nil, nil, 0)
	d.Tasks[0].Actions[0].Runtime, d.Tasks[0].Actions[0].Pid = model.RuntimeContainer, "host"
	d.Tasks = append(d.Tasks, model.TaskDefinition{Name: "second", Worker: "a2",
		Actions: []model.ActionDefinition{{Name: "x", Image: "img/x"}}})
	st := newStatus(d)
	na := NextActionFor(&st, "default/w", "a1", t0)
	if na == nil || na.Name != "one" || na.Attempt != 1 || na.WorkflowID != "default/w" || na.TaskName != "install" ||
		strings.Join(na.Volumes, ",") != "/dev:/dev,/tmp:/tmp" || na.Environment["A"] != "task" || na.Environment["B"] != "action" ||
		na.Runtime != model.RuntimeContainer || na.Pid != "host" {
		t.Fatalf("next %+v", na)
	}
	if NextActionFor(&st, "default/w", "a2", t0) != nil {
		t.Fatal("a2 got an action before a1's task finished")
	}
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	// Reconnect mid-action: the same action again.
	if na := NextActionFor(&st, "default/w", "a1", t0); na == nil || na.Name != "one" || na.Attempt != 1 {
		t.Fatalf("reconnect %+v", na)
	}
	for i := range 3 {
		if i > 0 {
			mustApply(t, &st, rep(&st, i, model.StateRunning), t0)
		}
		mustApply(t, &st, rep(&st, i, model.StateSuccess), t0)
	}
	if NextActionFor(&st, "default/w", "a1", t0) != nil {
		t.Fatal("a1 still has work")
	}
	if na := NextActionFor(&st, "default/w", "a2", t0); na == nil || na.Name != "x" {
		t.Fatalf("a2 %+v", na)
	}
	// Task two's report from the right agent works.
	r := ActionReport{AgentID: "a2", TaskID: st.Tasks[1].ID, ActionID: st.Tasks[1].Actions[0].ID, State: model.StateRunning}
	mustApply(t, &st, r, t0)
}

func TestHistoryCap(t *testing.T) {
	st := newStatus(def3(nil, nil, 0))
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	for i := range model.MaxHistory + 10 {
		mustApply(t, &st, rep(&st, 0, model.StateRunning), t0.Add(time.Duration(i)*time.Second))
	}
	// 3 entries before the loop, MaxHistory+10 in it.
	if len(st.History) != model.MaxHistory || st.HistoryDropped != 13 {
		t.Fatalf("len %d dropped %d", len(st.History), st.HistoryDropped)
	}
	if last := st.History[len(st.History)-1]; !last.Time.Equal(t0.Add(time.Duration(model.MaxHistory+9) * time.Second)) {
		t.Fatalf("last %+v", last)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1500 * time.Millisecond:               "1.5s",
		1234567 * time.Microsecond:            "1.2s",
		250 * time.Millisecond:                "250ms",
		83*time.Second + 450*time.Millisecond: "1m23.5s",
		-time.Second:                          "0s",
		1234 * time.Microsecond:               "1ms",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestRenderFailedStatus(t *testing.T) {
	var st model.WorkflowStatus
	RenderFailedStatus(&st, errors.New(`template: t:3: map has no entry for key "x"`), t0)
	c := FindCondition(&st, ConditionTemplateRendered)
	if st.State != model.StateFailed || st.TemplateRendering != "failed" || c == nil || c.Status != "False" ||
		!strings.Contains(c.Message, "map has no entry") || len(st.History) != 1 {
		t.Fatalf("%+v", st)
	}
}

// A worker that is a MAC in another spelling becomes the canonical form
// agents report as; any other worker is kept as it is.
func TestInitialStatusCanonicalWorker(t *testing.T) {
	tests := []struct {
		name   string
		worker string
		want   string
	}{
		{name: "dotted MAC", worker: "5254.00AA.BB01", want: "52:54:00:aa:bb:01"},
		{name: "hyphenated MAC", worker: "52-54-00-AA-BB-01", want: "52:54:00:aa:bb:01"},
		{name: "canonical MAC", worker: "52:54:00:aa:bb:01", want: "52:54:00:aa:bb:01"},
		{name: "agent name", worker: "Rack1-Agent", want: "Rack1-Agent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := def3(nil, nil, 0)
			d.Tasks[0].Worker = tc.worker
			if got := newStatus(d).Tasks[0].AgentID; got != tc.want {
				t.Errorf("InitialStatus with worker %q: agent %q; want %q", tc.worker, got, tc.want)
			}
		})
	}
}
