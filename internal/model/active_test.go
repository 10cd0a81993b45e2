package model

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// activeWF is a workflow for CompareActive: namespace/name, a state (in
// either spelling: it is read as decoding reads it), a creation time in
// minutes after t0 (-1: none), disabled or not.
func activeWF(key string, state State, minute int, disabled bool) *Workflow {
	w := &Workflow{}
	w.Namespace, w.Name, _ = strings.Cut(key, "/")
	if err := w.Status.State.UnmarshalText([]byte(state)); err != nil {
		panic(err)
	}
	if minute >= 0 {
		ts := time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC)
		w.CreationTimestamp = &ts
	}
	if disabled {
		w.Spec.Disabled = Bool(true)
	}
	return w
}

// moved gives w the annotation a restore leaves: created minute minutes
// after t0 in the store it came from.
func moved(w *Workflow, minute int) *Workflow {
	return withAnnotation(w, time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC).Format(time.RFC3339Nano))
}

func withAnnotation(w *Workflow, v string) *Workflow {
	w.Annotations = map[string]string{AnnotationCreatedAt: v}
	return w
}

func keyOf(w *Workflow) string {
	if w == nil {
		return "nil"
	}
	return w.Key()
}

func TestCompareActive(t *testing.T) {
	tests := []struct {
		name  string
		first *Workflow // comes first, whichever is given first
		then  *Workflow
	}{
		{"running before pending, even a newer one",
			activeWF("d/new", StateRunning, 9, false), activeWF("d/old", StatePending, 1, false)},
		{"Tinkerbell's spelling of running too",
			activeWF("d/new", "STATE_RUNNING", 9, false), activeWF("d/old", "STATE_PENDING", 1, false)},
		{"the oldest pending first",
			activeWF("d/b", StatePending, 1, false), activeWF("d/a", StatePending, 2, false)},
		{"not rendered yet (no state) is pending",
			activeWF("d/b", "", 1, false), activeWF("d/a", StatePending, 2, false)},
		{"no creation timestamp: after one with, whatever the names",
			activeWF("d/z", StatePending, 5, false), activeWF("d/a", StatePending, -1, false)},
		{"no creation timestamp on either: by name",
			activeWF("d/a", StatePending, -1, false), activeWF("d/b", StatePending, -1, false)},
		{"moved from another store: its first creation time counts",
			moved(activeWF("d/moved", StatePending, 9, false), 1), activeWF("d/new", StatePending, 5, false)},
		{"a moved workflow's time is no exception to the order",
			activeWF("d/old", StatePending, 1, false), moved(activeWF("d/moved", StatePending, 0, false), 4)},
		{"an unreadable moved time: the store's",
			activeWF("d/new", StatePending, 5, false), withAnnotation(activeWF("d/moved", StatePending, 9, false), "yesterday")},
		{"equal timestamps: by name",
			activeWF("d/a", StatePending, 3, false), activeWF("d/b", StatePending, 3, false)},
		{"equal timestamps and names: by namespace",
			activeWF("a/w", StatePending, 3, false), activeWF("b/w", StatePending, 3, false)},
		{"unfinished before finished, even an older one",
			activeWF("d/new", StatePending, 9, false), activeWF("d/old", StateSuccess, 1, false)},
		{"unfinished before failed",
			activeWF("d/new", StatePending, 9, false), activeWF("d/old", "STATE_FAILED", 1, false)},
		{"pending before a disabled running one",
			activeWF("d/new", StatePending, 9, false), activeWF("d/old", StateRunning, 1, true)},
		{"among finished: the oldest",
			activeWF("d/b", StateTimeout, 1, false), activeWF("d/a", StateCancelled, 2, false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if c := CompareActive(tc.first, tc.then); c >= 0 {
				t.Errorf("CompareActive(%s, %s) = %d; want < 0", tc.first.Key(), tc.then.Key(), c)
			}
			if c := CompareActive(tc.then, tc.first); c <= 0 {
				t.Errorf("CompareActive(%s, %s) = %d; want > 0", tc.then.Key(), tc.first.Key(), c)
			}
			want := tc.first
			if !Contends(want) {
				want = nil
			}
			for _, ws := range [][]*Workflow{{tc.first, tc.then}, {tc.then, tc.first}} {
				if got := ActiveWorkflow(ws); got != want {
					t.Errorf("ActiveWorkflow(%s, %s) = %s; want %s", ws[0].Key(), ws[1].Key(), keyOf(got), keyOf(want))
				}
			}
		})
	}
}

// TestCompareActiveIsAnOrder: over workflows that mix every case, the
// order is total (0 only for the same namespace and name), antisymmetric
// and transitive, so a sort or a scan for the first gives the same answer
// whatever the input order. (The copy the boot policy had was not
// transitive when a creationTimestamp was missing.)
func TestCompareActiveIsAnOrder(t *testing.T) {
	var ws []*Workflow
	for _, ns := range []string{"a", "b"} {
		for i, state := range []State{StatePending, StateRunning, StateSuccess, ""} {
			for _, minute := range []int{-1, 1, 2} {
				ws = append(ws, activeWF(fmt.Sprintf("%s/w%d-%d", ns, i, minute+1), state, minute, false),
					activeWF(fmt.Sprintf("%s/x%d-%d", ns, i, minute+1), state, minute, true))
			}
		}
		// Names that order against the timestamps.
		ws = append(ws, activeWF(ns+"/a", StatePending, 2, false), activeWF(ns+"/z", StatePending, -1, false))
	}
	for _, a := range ws {
		for _, b := range ws {
			ab, ba := CompareActive(a, b), CompareActive(b, a)
			if (ab == 0) != (a.Key() == b.Key()) {
				t.Fatalf("CompareActive(%s, %s) = %d", a.Key(), b.Key(), ab)
			}
			if (ab < 0) != (ba > 0) {
				t.Fatalf("CompareActive(%s, %s) = %d but CompareActive(%[2]s, %[1]s) = %[4]d", a.Key(), b.Key(), ab, ba)
			}
			for _, c := range ws {
				if ab < 0 && CompareActive(b, c) < 0 && CompareActive(a, c) >= 0 {
					t.Fatalf("not transitive: %s < %s < %s but not %[1]s < %[3]s", a.Key(), b.Key(), c.Key())
				}
			}
		}
	}
}

func TestActiveWorkflowNone(t *testing.T) {
	ws := []*Workflow{activeWF("d/done", StateSuccess, 1, false), activeWF("d/off", StatePending, 2, true)}
	if got := ActiveWorkflow(ws); got != nil {
		t.Errorf("ActiveWorkflow(finished, disabled) = %s; want nil", got.Key())
	}
	if got := ActiveWorkflow(nil); got != nil {
		t.Errorf("ActiveWorkflow(nil) = %s; want nil", got.Key())
	}
}
