package ui

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// PageSize is how many machines one page of the hardware list shows.
const PageSize = 50

// stateNone is the state of a machine no workflow has run on.
const stateNone = "NONE"

// states are the machine states the fleet page counts and the list
// filters by, in the order shown.
var states = []string{string(model.StateFailed), string(model.StateTimeout), string(model.StateRunning),
	string(model.StatePending), string(model.StateCancelled), string(model.StateSuccess), stateNone}

// machineState is the state of a machine: its newest workflow's, PENDING
// for one not yet started, NONE without any.
func machineState(w *model.Workflow) string {
	switch {
	case w == nil:
		return stateNone
	case w.Status.State == "":
		return string(model.StatePending)
	}
	return string(w.Status.State)
}

// hwFilter is what the hardware list is asked for.
type hwFilter struct {
	Search string // part of the name
	Labels string // a label selector, as kubectl's -l
	State  string // one of states, or "" for any
	MAC    string
	IP     string
	Page   int // from 1
}

// hwRow is one machine of the list.
type hwRow struct {
	Namespace, Name string
	MACs, IPs       []string
	State           string
	Workflow        string // its newest workflow's name, if any
}

// hwPage is one page of the list.
type hwPage struct {
	Rows        []hwRow
	Total       int // machines that match
	Page, Pages int
}

// hardwarePage answers one page of the machines p sees that match f. A
// MAC or IP filter is answered from the store's index (exact, shared
// objects); otherwise the view's sorted keys are walked, so a page of a
// 10,000 machine fleet copies no object.
func (u *UI) hardwarePage(ctx context.Context, p *auth.Principal, f hwFilter) (hwPage, error) {
	var sel labels.Selector
	if f.Labels != "" {
		var err error
		if sel, err = labels.Parse(f.Labels); err != nil {
			return hwPage{}, fmt.Errorf("label selector %q: %w", f.Labels, err)
		}
	}
	if f.State != "" && !slices.Contains(states, f.State) {
		return hwPage{}, fmt.Errorf("state %q: want one of %s", f.State, strings.Join(states, ", "))
	}
	var keys []string // nil: every machine, in the view's order
	if f.MAC != "" || f.IP != "" {
		index, value := store.IndexIP, f.IP
		if f.MAC != "" {
			mac, err := macaddr.Parse(f.MAC)
			if err != nil {
				return hwPage{}, fmt.Errorf("MAC %q: %w", f.MAC, err)
			}
			index, value = store.IndexMAC, mac.String()
		}
		objs, err := store.SharedIndexer(u.cfg.Store).ByIndex(ctx, model.KindHardware, index, value)
		if err != nil {
			return hwPage{}, err
		}
		keys = make([]string, 0, len(objs))
		for _, o := range objs {
			hw := o.(*model.Hardware)
			if f.IP != "" && f.MAC != "" && !slices.Contains(hw.IPs(), f.IP) {
				continue
			}
			keys = append(keys, hw.Namespace+"/"+hw.Name)
		}
	}
	if f.Page < 1 {
		f.Page = 1
	}
	first := (f.Page - 1) * PageSize
	var out hwPage
	v := u.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	if keys == nil {
		keys = v.hwKeys
	}
	for _, k := range keys {
		hw := v.hardware[k]
		if hw == nil || !p.Sees(hw.Namespace) {
			continue
		}
		if f.Search != "" && !strings.Contains(hw.Name, f.Search) {
			continue
		}
		if sel != nil && !sel.Matches(hw.Labels) {
			continue
		}
		w := v.latestLocked(k)
		state := machineState(w)
		if f.State != "" && state != f.State {
			continue
		}
		out.Total++
		if out.Total <= first || len(out.Rows) == PageSize {
			continue
		}
		row := hwRow{Namespace: hw.Namespace, Name: hw.Name, IPs: hw.IPs(), State: state}
		for _, m := range hw.MACs() {
			row.MACs = append(row.MACs, m.String())
		}
		if w != nil {
			row.Workflow = w.Name
		}
		out.Rows = append(out.Rows, row)
	}
	out.Page = f.Page
	out.Pages = max(1, (out.Total+PageSize-1)/PageSize)
	return out, nil
}

// fleet is the overview: machines by state, installs in progress and
// failures, failures first.
type fleet struct {
	Total    int
	Counts   []stateCount
	Failed   []wfRow // newest workflow failed or timed out
	Running  []wfRow
	Overflow int // rows of Failed and Running not shown
}

type stateCount struct {
	State string
	Count int
}

// wfRow is one workflow in a list.
type wfRow struct {
	Namespace, Name, Hardware, State string
	Done, Actions                    int // actions ended successfully, of all
	Percent                          int
	Message                          string
}

// fleetRows caps the failures and installs the overview lists: about
// what a laptop's first screen shows under the counts. The rest is a
// click away (the hardware list filtered by state); at 100 each, a
// 10,000-machine fleet page was 72 KB of rows below the fold, and its
// worst load in bench/ui 1.5 s on the busy lab machine.
const fleetRows = 25

// fleet counts the machines p sees by their state.
func (u *UI) fleet(p *auth.Principal) fleet {
	counts := map[string]int{}
	var out fleet
	v := u.view
	v.mu.RLock()
	for _, k := range v.hwKeys {
		hw := v.hardware[k]
		if !p.Sees(hw.Namespace) {
			continue
		}
		out.Total++
		w := v.latestLocked(k)
		s := machineState(w)
		counts[s]++
		switch s {
		case string(model.StateFailed), string(model.StateTimeout):
			if len(out.Failed) < fleetRows {
				out.Failed = append(out.Failed, newWFRow(w))
			} else {
				out.Overflow++
			}
		case string(model.StateRunning):
			if len(out.Running) < fleetRows {
				out.Running = append(out.Running, newWFRow(w))
			} else {
				out.Overflow++
			}
		}
	}
	v.mu.RUnlock()
	for _, s := range states {
		out.Counts = append(out.Counts, stateCount{State: s, Count: counts[s]})
	}
	return out
}

func newWFRow(w *model.Workflow) wfRow {
	r := wfRow{Namespace: w.Namespace, Name: w.Name, Hardware: w.Spec.HardwareRef, State: machineState(w)}
	for _, t := range w.Status.Tasks {
		for _, a := range t.Actions {
			r.Actions++
			if a.State == model.StateSuccess {
				r.Done++
			}
			if a.Message != "" && (a.State == model.StateFailed || a.State == model.StateTimeout) {
				r.Message = a.Message
			}
		}
	}
	if r.Actions > 0 {
		r.Percent = 100 * r.Done / r.Actions
	}
	return r
}
