package workflow

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// TestCancel: the cancellation state machine, one situation per row.
func TestCancel(t *testing.T) {
	at := t0.Add(time.Minute)
	for _, tc := range []struct {
		name string
		// setup brings a fresh three-action status to the situation.
		setup func(t *testing.T, st *model.WorkflowStatus)
		force bool

		wantChanged bool
		wantErr     error
		wantState   model.State
		// wantRequested: CancelRequested set (a cancellation that waits).
		wantRequested bool
		// wantActions are the three actions' states after.
		wantActions [3]model.State
	}{
		{
			name:        "not yet rendered",
			setup:       func(_ *testing.T, st *model.WorkflowStatus) { *st = model.WorkflowStatus{} },
			wantChanged: true, wantState: model.StateCancelled,
		},
		{
			name:        "pending",
			setup:       func(*testing.T, *model.WorkflowStatus) {},
			wantChanged: true, wantState: model.StateCancelled,
			wantActions: [3]model.State{model.StatePending, model.StatePending, model.StatePending},
		},
		{
			name: "between actions",
			setup: func(t *testing.T, st *model.WorkflowStatus) {
				mustApply(t, st, rep(st, 0, model.StateRunning), t0)
				mustApply(t, st, rep(st, 0, model.StateSuccess), t0)
			},
			wantChanged: true, wantState: model.StateCancelled,
			wantActions: [3]model.State{model.StateSuccess, model.StatePending, model.StatePending},
		},
		{
			name: "running action: waits for its end",
			setup: func(t *testing.T, st *model.WorkflowStatus) {
				mustApply(t, st, rep(st, 0, model.StateRunning), t0)
			},
			wantChanged: true, wantState: model.StateRunning, wantRequested: true,
			wantActions: [3]model.State{model.StateRunning, model.StatePending, model.StatePending},
		},
		{
			name: "running action, forced",
			setup: func(t *testing.T, st *model.WorkflowStatus) {
				mustApply(t, st, rep(st, 0, model.StateRunning), t0)
			},
			force:       true,
			wantChanged: true, wantState: model.StateCancelled,
			wantActions: [3]model.State{model.StateCancelled, model.StatePending, model.StatePending},
		},
		{
			name: "already requested",
			setup: func(t *testing.T, st *model.WorkflowStatus) {
				mustApply(t, st, rep(st, 0, model.StateRunning), t0)
				if _, err := Cancel(st, t0, false, ""); err != nil {
					t.Fatal(err)
				}
			},
			wantChanged: false, wantState: model.StateRunning, wantRequested: true,
			wantActions: [3]model.State{model.StateRunning, model.StatePending, model.StatePending},
		},
		{
			name: "already cancelled",
			setup: func(t *testing.T, st *model.WorkflowStatus) {
				if _, err := Cancel(st, t0, false, ""); err != nil {
					t.Fatal(err)
				}
			},
			wantChanged: false, wantState: model.StateCancelled,
			wantActions: [3]model.State{model.StatePending, model.StatePending, model.StatePending},
		},
		{
			name: "failed: nothing to cancel",
			setup: func(t *testing.T, st *model.WorkflowStatus) {
				mustApply(t, st, rep(st, 0, model.StateFailed), t0)
			},
			wantErr: ErrEnded, wantState: model.StateFailed,
			wantActions: [3]model.State{model.StateFailed, model.StatePending, model.StatePending},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStatus(def3(nil, nil, 0))
			tc.setup(t, &st)
			changed, err := Cancel(&st, at, tc.force, "by test")
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Cancel = %v; want %v", err, tc.wantErr)
			}
			if changed != tc.wantChanged {
				t.Errorf("Cancel changed = %t; want %t", changed, tc.wantChanged)
			}
			if st.State != tc.wantState {
				t.Errorf("state = %q; want %q", st.State, tc.wantState)
			}
			if got := st.CancelRequested != nil; got != tc.wantRequested {
				t.Errorf("CancelRequested set = %t; want %t", got, tc.wantRequested)
			}
			if len(st.Tasks) > 0 {
				var got [3]model.State
				for i, a := range st.Tasks[0].Actions {
					got[i] = a.State
				}
				if got != tc.wantActions {
					t.Errorf("actions = %v; want %v", got, tc.wantActions)
				}
			}
			if tc.wantState == model.StateCancelled && tc.wantChanged {
				last := st.History[len(st.History)-1]
				if last.State != model.StateCancelled || !strings.Contains(last.Message, "; reason: by test") || st.CompletionTime == nil {
					t.Errorf("last history %+v, completion %v; want CANCELLED with the reason", last, st.CompletionTime)
				}
			}
			if NextActionFor(&st, "default/w", "a1", at) != nil {
				t.Error("an action is handed out after the cancellation")
			}
		})
	}
}

// TestCancelWaitsForRunningAction: the running action's end is recorded as
// reported, without retry, and ends the workflow CANCELLED; reports after
// that are acknowledged and change nothing.
func TestCancelWaitsForRunningAction(t *testing.T) {
	for _, end := range []model.State{model.StateSuccess, model.StateFailed, model.StateTimeout} {
		t.Run(string(end), func(t *testing.T) {
			st := newStatus(def3([]int{3, 0, 0}, nil, 0))
			mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
			if _, err := Cancel(&st, t0.Add(time.Second), false, ""); err != nil {
				t.Fatal(err)
			}
			// Progress still counts while the action finishes.
			p := rep(&st, 0, model.StateRunning)
			p.Progress = &model.Progress{Bytes: 5}
			mustApply(t, &st, p, t0.Add(2*time.Second))
			r := rep(&st, 0, end)
			r.Message = "the action's own words"
			mustApply(t, &st, r, t0.Add(3*time.Second))
			a := st.Tasks[0].Actions[0]
			if st.State != model.StateCancelled || a.State != end || a.Message != "the action's own words" || a.RetryAfter != nil {
				t.Fatalf("after the end report: workflow %s, action %s (%q, retry %v); want CANCELLED, %s as reported, no retry",
					st.State, a.State, a.Message, a.RetryAfter, end)
			}
			if a.Progress == nil || a.Progress.Bytes != 5 {
				t.Errorf("progress %+v; want the reported 5 bytes", a.Progress)
			}
			// The next action's start (an agent that did not listen) is
			// acknowledged, not recorded.
			changed, err := ApplyReport(&st, rep(&st, 1, model.StateRunning), t0.Add(4*time.Second))
			if err != nil || changed || st.Tasks[0].Actions[1].State != model.StatePending {
				t.Fatalf("report after CANCELLED: changed %t, err %v, action two %s; want acknowledged, nothing recorded",
					changed, err, st.Tasks[0].Actions[1].State)
			}
		})
	}
}

// TestCancelLastActionSucceeds: a cancellation that waits for the last
// action finds nothing left to cancel when it succeeds.
func TestCancelLastActionSucceeds(t *testing.T) {
	st := newStatus(def3(nil, nil, 0))
	for i := range 2 {
		mustApply(t, &st, rep(&st, i, model.StateRunning), t0)
		mustApply(t, &st, rep(&st, i, model.StateSuccess), t0)
	}
	mustApply(t, &st, rep(&st, 2, model.StateRunning), t0)
	if _, err := Cancel(&st, t0, false, ""); err != nil {
		t.Fatal(err)
	}
	mustApply(t, &st, rep(&st, 2, model.StateSuccess), t0.Add(time.Second))
	if st.State != model.StateSuccess {
		t.Fatalf("state %s; want SUCCESS (every action ran)", st.State)
	}
}

// TestCancelDeadlines: while a cancellation waits, the running action's
// deadline and the global one end the workflow CANCELLED.
func TestCancelDeadlines(t *testing.T) {
	t.Run("action", func(t *testing.T) {
		st := newStatus(def3([]int{2, 0, 0}, []int64{10, 0, 0}, 0))
		mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
		if _, err := Cancel(&st, t0, false, ""); err != nil {
			t.Fatal(err)
		}
		if changed, _ := CheckDeadlines(&st, t0.Add(10*time.Second)); !changed || st.State != model.StateCancelled ||
			st.Tasks[0].Actions[0].State != model.StateTimeout {
			t.Fatalf("workflow %s, action %s; want CANCELLED after the action's TIMEOUT", st.State, st.Tasks[0].Actions[0].State)
		}
	})
	t.Run("global", func(t *testing.T) {
		st := newStatus(def3(nil, []int64{0, 0, 0}, 30))
		mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
		if _, err := Cancel(&st, t0, false, ""); err != nil {
			t.Fatal(err)
		}
		if changed, _ := CheckDeadlines(&st, t0.Add(30*time.Second)); !changed || st.State != model.StateCancelled {
			t.Fatalf("workflow %s; want CANCELLED at the global deadline", st.State)
		}
	})
}

// TestCancelInterrupted: the agent asking for work while the action the
// cancellation waits for is recorded running ends it.
func TestCancelInterrupted(t *testing.T) {
	st := newStatus(def3(nil, nil, 0))
	mustApply(t, &st, rep(&st, 0, model.StateRunning), t0)
	if CancelInterrupted(&st, "a1", t0) {
		t.Fatal("CancelInterrupted ended a workflow nobody cancelled")
	}
	if _, err := Cancel(&st, t0, false, ""); err != nil {
		t.Fatal(err)
	}
	if CancelInterrupted(&st, "someone-else", t0) {
		t.Fatal("CancelInterrupted acted for another agent")
	}
	if !CancelInterrupted(&st, "a1", t0.Add(time.Second)) || st.State != model.StateCancelled ||
		st.Tasks[0].Actions[0].State != model.StateCancelled {
		t.Fatalf("workflow %s, action %s; want both CANCELLED", st.State, st.Tasks[0].Actions[0].State)
	}
}

// TestEngineCancel: through the engine and the store, a PENDING workflow
// is cancelled at once; a RUNNING one after the running action's end
// report, which is recorded, with no further action handed out. Neither
// clears allowPXE the way a successful toggleAllowNetboot workflow does,
// and the next workflow on the hardware becomes active.
func TestEngineCancel(t *testing.T) {
	ctx := context.Background()
	netbootWorkflow := func(name string) *model.Workflow {
		wf := testWorkflow(name, "rack1-node07")
		wf.Spec.BootOptions = &model.BootOptions{ToggleAllowNetboot: true}
		return wf
	}
	allowPXE := func(e *env) bool {
		return model.BoolValue(e.hardware("rack1-node07").Spec.Interfaces[0].Netboot.AllowPXE, false)
	}

	t.Run("pending", func(t *testing.T) {
		e := newEnv(t)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), netbootWorkflow("wf"))
		e.waitWorkflow("wf", "netboot allowed", func(w *model.Workflow) bool {
			return FindCondition(&w.Status, ConditionAllowNetboot) != nil
		})
		wf, err := e.engine.Cancel(ctx, "default/wf", CancelOptions{Reason: "not needed"})
		if err != nil || wf.Status.State != model.StateCancelled {
			t.Fatalf("Cancel = %v, state %q; want CANCELLED at once", err, stateOf(wf))
		}
		if _, err := e.engine.GetAction(ctx, mac, 0); !errors.Is(err, ErrNoAction) {
			t.Fatalf("GetAction after cancel: %v; want ErrNoAction", err)
		}
		if !allowPXE(e) {
			t.Error("allowPXE cleared by a cancelled workflow")
		}
	})

	t.Run("running", func(t *testing.T) {
		e := newEnv(t)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), netbootWorkflow("wf"))
		e.waitWorkflow("wf", "netboot allowed", func(w *model.Workflow) bool {
			return FindCondition(&w.Status, ConditionAllowNetboot) != nil
		})
		e.runAction(mac, "stream-image", "") // RUNNING

		wf, err := e.engine.Cancel(ctx, "default/wf", CancelOptions{})
		if err != nil || wf.Status.State != model.StateRunning || wf.Status.CancelRequested == nil {
			t.Fatalf("Cancel = %v, state %q; want RUNNING with the cancellation waiting", err, stateOf(wf))
		}
		w := e.workflow("wf")
		a := w.Status.Tasks[0].Actions[0]
		ws, err := e.engine.ReportActionStatus(ctx, ActionReport{WorkflowID: "default/wf", AgentID: mac,
			TaskID: w.Status.Tasks[0].ID, ActionID: a.ID, ActionName: a.Name, State: model.StateSuccess, Message: "wrote 1 GiB"})
		if err != nil || ws != model.StateCancelled {
			t.Fatalf("end report = %q, %v; want accepted, workflow CANCELLED", ws, err)
		}
		if _, err := e.engine.GetAction(ctx, mac, 0); !errors.Is(err, ErrNoAction) {
			t.Fatalf("GetAction after the end report: %v; want ErrNoAction", err)
		}
		w = e.workflow("wf")
		if got := w.Status.Tasks[0].Actions; got[0].State != model.StateSuccess || got[0].Message != "wrote 1 GiB" ||
			got[1].State != model.StatePending || got[2].State != model.StatePending {
			t.Fatalf("actions %s %q, %s, %s; want the first recorded SUCCESS, the rest never run",
				got[0].State, got[0].Message, got[1].State, got[2].State)
		}
		if !allowPXE(e) {
			t.Error("allowPXE cleared by a cancelled workflow")
		}
		if c := FindCondition(&w.Status, ConditionAllowNetboot); c == nil || c.Status != "True" {
			t.Errorf("AllowNetboot condition %+v; want the start's True only", c)
		}
		if _, err := e.engine.Cancel(ctx, "default/wf", CancelOptions{}); err != nil {
			t.Errorf("Cancel of a cancelled workflow: %v; want nil", err)
		}
	})

	t.Run("agent restarted mid-action", func(t *testing.T) {
		e := newEnv(t)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), testWorkflow("wf", "rack1-node07"))
		e.waitWorkflow("wf", "rendered", rendered)
		e.runAction(mac, "stream-image", "")
		if _, err := e.engine.Cancel(ctx, "default/wf", CancelOptions{}); err != nil {
			t.Fatal(err)
		}
		// The agent asks for work: it is not running the action any more.
		if _, err := e.engine.GetAction(ctx, mac, 0); !errors.Is(err, ErrNoAction) {
			t.Fatalf("GetAction: %v; want ErrNoAction", err)
		}
		w := e.workflow("wf")
		if w.Status.State != model.StateCancelled || w.Status.Tasks[0].Actions[0].State != model.StateCancelled {
			t.Fatalf("workflow %s, action %s; want both CANCELLED", w.Status.State, w.Status.Tasks[0].Actions[0].State)
		}
	})

	t.Run("next workflow starts", func(t *testing.T) {
		e := newEnv(t)
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), testWorkflow("wf-a", "rack1-node07"))
		e.waitWorkflow("wf-a", "rendered", rendered)
		e.create(testWorkflow("wf-b", "rack1-node07"))
		e.waitWorkflow("wf-b", "waiting", func(w *model.Workflow) bool { return FindCondition(&w.Status, ConditionWaiting) != nil })
		if _, err := e.engine.Cancel(ctx, "default/wf-a", CancelOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitWorkflow("wf-b", "active", func(w *model.Workflow) bool { return FindCondition(&w.Status, ConditionWaiting) == nil })
		na, err := e.engine.GetAction(ctx, mac, 0)
		if err != nil || na.WorkflowID != "default/wf-b" {
			t.Fatalf("GetAction = %+v, %v; want wf-b's first action", na, err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		e := newEnv(t)
		if _, err := e.engine.Cancel(ctx, "default/nope", CancelOptions{}); !errors.Is(err, ErrUnknownWorkflow) {
			t.Errorf("Cancel(unknown) = %v; want ErrUnknownWorkflow", err)
		}
		e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), testWorkflow("wf", "rack1-node07"))
		e.waitWorkflow("wf", "rendered", rendered)
		e.runAction(mac, "stream-image", model.StateFailed)
		if _, err := e.engine.Cancel(ctx, "default/wf", CancelOptions{}); !errors.Is(err, ErrEnded) {
			t.Errorf("Cancel(FAILED) = %v; want ErrEnded", err)
		}
	})
}

func stateOf(w *model.Workflow) model.State {
	if w == nil {
		return "<nil>"
	}
	return w.Status.State
}
