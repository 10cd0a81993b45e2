package model

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStateNormalisedOnDecode: a Workflow written with Tinkerbell's older
// STATE_ spelling, as a manifest or as JSON (the store's and the API's
// form), holds every state in the constants' spelling once decoded, and
// writes that spelling back.
func TestStateNormalisedOnDecode(t *testing.T) {
	const doc = `apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w}
spec: {templateRef: t, hardwareRef: m1}
status:
  state: STATE_RUNNING
  currentState: {state: STATE_RUNNING}
  tasks:
    - name: os
      agentID: "02:00:00:00:00:01"
      actions:
        - {name: a1, image: x, timeout: 60, state: STATE_SUCCESS}
        - {name: a2, image: x, timeout: 60, state: RUNNING}
        - {name: a3, image: x, timeout: 60, state: STATE_}
  history:
    - {time: "2026-11-27T10:00:00Z", type: workflow, state: STATE_PENDING}
`
	res, err := ParseManifests("w.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	fromYAML := res.Docs[0].Object.(*Workflow)
	b, err := json.Marshal(fromYAML)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "STATE_RUNNING") {
		t.Errorf("JSON of a decoded Workflow = %s; want the states without STATE_", b)
	}
	withPrefix := strings.NewReplacer(`"RUNNING"`, `"STATE_RUNNING"`, `"SUCCESS"`, `"STATE_SUCCESS"`).Replace(string(b))
	obj, err := Decode(KindWorkflow, []byte(withPrefix))
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]*Workflow{"manifest": fromYAML, "JSON": obj.(*Workflow)} {
		st := w.Status
		acts := st.Tasks[0].Actions
		got := []State{st.State, st.CurrentState.State, acts[0].State, acts[1].State, acts[2].State, st.History[0].State}
		want := []State{StateRunning, StateRunning, StateSuccess, StateRunning, "STATE_", StatePending}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: states = %q; want %q", name, got, want)
				break
			}
		}
	}
}

func TestStateIsFinal(t *testing.T) {
	for s, want := range map[State]bool{
		StatePending: false, StateRunning: false, "": false,
		StateSuccess: true, StateFailed: true, StateTimeout: true, StateCancelled: true,
	} {
		if got := s.IsFinal(); got != want {
			t.Errorf("State(%q).IsFinal() = %t; want %t", s, got, want)
		}
	}
}

func TestParseState(t *testing.T) {
	for in, want := range map[string]State{
		"STATE_SUCCESS": StateSuccess, "SUCCESS": StateSuccess, "STATE_": "STATE_", "": "", "state_success": "state_success",
	} {
		if got := ParseState(in); got != want {
			t.Errorf("ParseState(%q) = %q; want %q", in, got, want)
		}
	}
}
