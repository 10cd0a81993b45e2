package enroll

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// markCommissioning records on the stored Hardware what the server does
// when its commissioning workflow ends in state with check result.
func markCommissioning(t *testing.T, st store.Store, name, result string, state model.State) {
	t.Helper()
	ctx := context.Background()
	obj, err := st.Get(ctx, model.KindHardware, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	hw := obj.(*model.Hardware)
	hw.RecordCommissioning("default/commission-"+name, []model.CommissioningCheck{{Name: "smart/sda", Result: result}}, state, time.Now())
	if _, err := st.Update(ctx, hw); err != nil {
		t.Fatal(err)
	}
}

func startControllers(t *testing.T, st store.Store, n int, tpl string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		c := NewController(ControllerConfig{Config: Config{Store: st, Logger: slog.New(slog.DiscardHandler), CommissionTemplate: tpl}})
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// TestCommissionBeforeEnrolment: with a commissioning template, a
// discovered machine gets exactly one commissioning workflow (two
// controllers, then a restart), no enrolment while it has not passed,
// its rule's workflow once it passed, and none after it failed; deleting
// a failed machine's commissioning workflow and its label commissions it
// again.
func TestCommissionBeforeEnrolment(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	disc := map[string]string{model.LabelDiscovered: "true"}
	m1 := dellHardware("default", "m1", disc)
	m2 := dellHardware("default", "m2", disc)
	m2.Spec.Interfaces[0].DHCP.MAC = "52:54:00:00:00:08"
	create(t, st, template("default", "install"), template("default", "commission"), ruleSet("default", "dell", 0, nil, ruleDell))
	stop := startControllers(t, st, 2, "commission")
	create(t, st, m1, m2)
	waitFor(t, func() bool {
		w := workflows(t, st)
		return w["default/commission-m1"] != nil && w["default/commission-m2"] != nil
	})
	stop()
	// A restart: the controllers' full pass makes nothing more.
	stop = startControllers(t, st, 1, "commission")
	defer func() { stop() }()
	e := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler), CommissionTemplate: "commission"})
	res, err := e.Pass(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(res); got["default/m1"] != Commissioning || got["default/m2"] != Commissioning {
		t.Fatalf("outcomes before commissioning ended: %v", got)
	}
	if w := workflows(t, st); len(w) != 2 {
		t.Fatalf("workflows before commissioning ended: %v", keys(w))
	}
	wf := workflows(t, st)["default/commission-m1"]
	if wf.Spec.TemplateRef != "commission" || wf.Spec.HardwareRef != "m1" || wf.Spec.HardwareMap["device_1"] != "52:54:00:00:00:07" ||
		wf.Spec.BootOptions == nil || !wf.Spec.BootOptions.ToggleAllowNetboot {
		t.Fatalf("commissioning workflow %+v", wf.Spec)
	}

	markCommissioning(t, st, "m1", model.CheckPassed, model.StateSuccess)
	markCommissioning(t, st, "m2", model.CheckFailed, model.StateFailed)
	waitFor(t, func() bool { return workflows(t, st)["default/enroll-m1"] != nil })
	res, err = e.Pass(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(res); got["default/m1"] != AlreadyEnrolled || got["default/m2"] != CommissioningFailed {
		t.Fatalf("outcomes after commissioning: %v", got)
	}
	if w := workflows(t, st); len(w) != 3 || w["default/enroll-m2"] != nil {
		t.Fatalf("workflows after commissioning: %v; want m1's two and m2's commissioning one", keys(w))
	}

	// Re-commission m2: its label removed, its workflow deleted.
	old := workflows(t, st)["default/commission-m2"].UID
	obj, err := st.Get(ctx, model.KindHardware, "default", "m2")
	if err != nil {
		t.Fatal(err)
	}
	hw := obj.(*model.Hardware)
	delete(hw.Labels, model.LabelCommissioning)
	if _, err := st.Update(ctx, hw); err != nil {
		t.Fatal(err)
	}
	// The label goes first here: the machine still has its (failed)
	// commissioning workflow, so nothing is made until it is deleted.
	if err := st.Delete(ctx, model.KindWorkflow, "default", "commission-m2", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		w := workflows(t, st)["default/commission-m2"]
		return w != nil && w.UID != old
	})
	if w := workflows(t, st); len(w) != 3 || w["default/enroll-m2"] != nil {
		t.Fatalf("workflows after re-commissioning: %v", keys(w))
	}
}

// TestFailedNotEnrolledWithoutCommissioning: a machine labelled failed is
// skipped by the rules even when the server has no commissioning
// template (it was commissioned by a workflow of its own).
func TestFailedNotEnrolledWithoutCommissioning(t *testing.T) {
	st := openStore(t)
	hw := dellHardware("default", "m1", map[string]string{model.LabelDiscovered: "true", model.LabelCommissioning: model.CommissioningFailed})
	create(t, st, template("default", "install"), ruleSet("default", "dell", 0, nil, ruleDell), hw)
	e := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	for _, dry := range []bool{true, false} {
		res, err := e.Pass(context.Background(), "", dry)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Outcome != CommissioningFailed {
			t.Fatalf("dry run %v: %+v", dry, res)
		}
	}
	if w := workflows(t, st); len(w) != 0 {
		t.Fatalf("workflows: %v", keys(w))
	}
}

// TestCommissionDryRun: a dry run says it would commission, and makes
// nothing.
func TestCommissionDryRun(t *testing.T) {
	st := openStore(t)
	create(t, st, template("default", "commission"), dellHardware("default", "m1", map[string]string{model.LabelDiscovered: "true"}))
	e := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler), CommissionTemplate: "commission"})
	res, err := e.Pass(context.Background(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != Commissioning || res[0].Workflow != "commission-m1" {
		t.Fatalf("dry run: %+v", res)
	}
	if w := workflows(t, st); len(w) != 0 {
		t.Fatalf("a dry run made workflows: %v", keys(w))
	}
}

func keys(m map[string]*model.Workflow) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
