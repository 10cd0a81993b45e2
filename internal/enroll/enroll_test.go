package enroll

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "anvil.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func create(t *testing.T, st store.Store, objs ...model.Object) {
	t.Helper()
	for _, o := range objs {
		if _, err := st.Create(context.Background(), o); err != nil {
			t.Fatalf("create %s %s: %v", model.KindOf(o), o.GetObjectMeta().Key(), err)
		}
	}
}

func template(ns, name string) *model.Template {
	data := "version: \"0.1\"\nname: install\ntasks:\n  - name: t\n    worker: \"{{.device_1}}\"\n    actions:\n      - name: a\n        image: x\n"
	return &model.Template{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindTemplate},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name}, Spec: model.TemplateSpec{Data: &data}}
}

func workflows(t *testing.T, st store.Store) map[string]*model.Workflow {
	t.Helper()
	objs, _, err := st.List(context.Background(), model.KindWorkflow, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*model.Workflow{}
	for _, o := range objs {
		out[o.GetObjectMeta().Key()] = o.(*model.Workflow)
	}
	return out
}

func outcomes(rs []Result) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		out[r.Hardware.Key()] = r.Outcome
	}
	return out
}

// fleet stores a Template, two rule sets and four machines: m1 a Dell
// (matches dell, and any-uefi too), m2 no match, m3 not discovered,
// m4 discovered with a workflow of its own, m5 discovered without
// attributes.
func fleet(t *testing.T, st store.Store) {
	t.Helper()
	disc := map[string]string{model.LabelDiscovered: "true"}
	dell := ruleSet("default", "dell", 10, nil, ruleDell)
	dell.Spec.Workflow.AddAttributes = true
	dell.Spec.Workflow.Template.KVs = map[string]string{"role": "storage"}
	uefi := ruleSet("default", "any-uefi", 0, nil, ruleUEFI)
	uefi.Spec.Workflow.Disabled = model.Bool(true)
	m2 := dellHardware("default", "m2", disc)
	m2.Spec.Interfaces[0].DHCP.MAC = "52:54:00:00:00:02"
	m2.Status.Attributes = &model.Attributes{Anvil: &model.AnvilAttributes{Firmware: "bios"}}
	m3 := dellHardware("default", "m3", nil)
	m3.Spec.Interfaces[0].DHCP.MAC = "52:54:00:00:00:03"
	m4 := dellHardware("default", "m4", disc)
	m4.Spec.Interfaces[0].DHCP.MAC = "52:54:00:00:00:04"
	m5 := dellHardware("default", "m5", disc)
	m5.Spec.Interfaces[0].DHCP.MAC = "52:54:00:00:00:05"
	m5.Status.Attributes = nil
	own := &model.Workflow{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindWorkflow},
		ObjectMeta: model.ObjectMeta{Namespace: "default", Name: "by-hand"},
		Spec:       model.WorkflowSpec{TemplateRef: "install", HardwareRef: "m4", HardwareMap: map[string]string{"device_1": "52:54:00:00:00:04"}}}
	create(t, st, template("default", "install"), dell, uefi, dellHardware("default", "m1", disc), m2, m3, m4, m5, own)
}

func TestPass(t *testing.T) {
	st := openStore(t)
	fleet(t, st)
	ctx := context.Background()
	var events []machinelog.Event
	var mu sync.Mutex
	e := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler), Events: machinelog.SinkFunc(func(ev machinelog.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})})

	dry, err := e.Pass(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"default/m1": WouldEnrol, "default/m2": NoMatch, "default/m4": HasWorkflow, "default/m5": NoAttributes}
	if got := outcomes(dry); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dry run outcomes %v; want %v", got, want)
	}
	for _, r := range dry {
		if r.Hardware.Name == "m1" {
			if r.Decision.Match.String() != "default/dell#rules[0]" || len(r.Decision.Also) != 1 || r.Decision.Also[0].String() != "default/any-uefi#rules[0]" {
				t.Errorf("m1: match %v also %v; want dell, also any-uefi", r.Decision.Match, r.Decision.Also)
			}
		}
	}
	if n := len(workflows(t, st)); n != 1 {
		t.Fatalf("a dry run made workflows: %d, want the 1 made by hand", n)
	}

	// Two passes, and a pass by a new Enroller (a restart): one workflow.
	for i, en := range []*Enroller{e, e, New(Config{Store: st, Logger: slog.New(slog.DiscardHandler)})} {
		rs, err := en.Pass(ctx, "", false)
		if err != nil {
			t.Fatal(err)
		}
		wantM1 := Enrolled
		if i > 0 {
			wantM1 = AlreadyEnrolled
		}
		if got := outcomes(rs)["default/m1"]; got != wantM1 {
			t.Errorf("pass %d: m1 %s; want %s", i, got, wantM1)
		}
	}
	wfs := workflows(t, st)
	if len(wfs) != 2 {
		t.Fatalf("%d workflows after three passes; want 2 (by-hand and m1's)", len(wfs))
	}
	wf := wfs["default/enroll-m1"]
	if wf == nil {
		t.Fatalf("no workflow default/enroll-m1: %v", wfs)
	}
	if wf.Spec.TemplateRef != "install" || wf.Spec.HardwareRef != "m1" ||
		wf.Spec.HardwareMap["device_1"] != "52:54:00:00:00:07" || wf.Spec.HardwareMap["role"] != "storage" ||
		wf.Annotations[model.AnnotationEnrolledBy] != "default/dell#rules[0]" ||
		!strings.Contains(wf.Annotations[model.AgentAttributesAnnotation], `"PowerEdge R650"`) || wf.Spec.Disabled != nil {
		t.Errorf("workflow %+v %+v", wf.ObjectMeta, wf.Spec)
	}
	hw, err := st.Get(ctx, model.KindHardware, "default", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if by := hw.GetObjectMeta().Annotations[model.AnnotationEnrolledBy]; by != "default/dell#rules[0]" {
		t.Errorf("hardware m1 enrolled-by %q", by)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 1 || events[0].Service != machinelog.ServiceEnroll || events[0].MAC.String() != "52:54:00:00:00:07" ||
		!strings.Contains(events[0].Message, "default/dell#rules[0]") {
		t.Errorf("events %+v; want one enrolment event for m1", events)
	}
}

// TestPassFinishesInterrupted: a pass that made the Workflow and stopped
// before marking the Hardware is finished, not repeated.
func TestPassFinishesInterrupted(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	hw := dellHardware("default", "m1", map[string]string{model.LabelDiscovered: "true"})
	rs := ruleSet("default", "dell", 0, nil, ruleDell)
	wf, err := NewWorkflow(hw, Rule{Set: rs, Index: 0}, WorkflowName(hw))
	if err != nil {
		t.Fatal(err)
	}
	create(t, st, template("default", "install"), rs, hw, wf)
	res, err := New(Config{Store: st}).Pass(ctx, "default", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != AlreadyEnrolled {
		t.Fatalf("results %+v; want m1 already enrolled", res)
	}
	got, err := st.Get(ctx, model.KindHardware, "default", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetObjectMeta().Annotations[model.AnnotationEnrolledBy] != "default/dell#rules[0]" {
		t.Errorf("hardware not marked: %v", got.GetObjectMeta().Annotations)
	}
	if n := len(workflows(t, st)); n != 1 {
		t.Errorf("%d workflows; want 1", n)
	}
}

func TestPassMissingTemplate(t *testing.T) {
	st := openStore(t)
	create(t, st, ruleSet("default", "dell", 0, nil, ruleDell), dellHardware("default", "m1", map[string]string{model.LabelDiscovered: "true"}))
	res, err := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler)}).Pass(context.Background(), "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != Failed || !strings.Contains(res[0].Message, "template default/install, which does not exist") {
		t.Fatalf("results %+v; want a failure naming the missing template", res)
	}
	if n := len(workflows(t, st)); n != 0 {
		t.Errorf("%d workflows; want none", n)
	}
}

// TestControllers: two controllers on one store (two replicas, or a
// restart racing the old one) enrol each machine that appears exactly
// once, and a rule set applied later enrols the machines that waited.
func TestControllers(t *testing.T) {
	st := openStore(t)
	create(t, st, template("default", "install"), ruleSet("default", "dell", 0, nil, ruleDell))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		c := NewController(ControllerConfig{Config: Config{Store: st, Logger: slog.New(slog.DiscardHandler)}})
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()

	const n = 20
	disc := map[string]string{model.LabelDiscovered: "true"}
	for i := range n {
		hw := dellHardware("default", fmt.Sprintf("d%02d", i), disc)
		hw.Spec.Interfaces[0].DHCP.MAC = fmt.Sprintf("52:54:00:00:01:%02x", i)
		create(t, st, hw)
	}
	// One that no rule matches yet: a rule set added later enrols it.
	hpe := dellHardware("default", "hpe1", disc)
	hpe.Spec.Interfaces[0].DHCP.MAC = "52:54:00:00:02:01"
	hpe.Status.Attributes.Product.Vendor = "HPE"
	create(t, st, hpe)
	waitFor(t, func() bool { return len(workflows(t, st)) == n })
	create(t, st, ruleSet("default", "hpe", 0, nil, ruleHPE))
	waitFor(t, func() bool { return workflows(t, st)["default/enroll-hpe1"] != nil })
	waitFor(t, func() bool {
		objs, _, err := st.List(ctx, model.KindHardware, store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetObjectMeta().Annotations[model.AnnotationEnrolledBy] == "" {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	wfs := workflows(t, st)
	if len(wfs) != n+1 {
		t.Fatalf("%d workflows for %d machines", len(wfs), n+1)
	}
	for key, wf := range wfs {
		if "default/enroll-"+wf.Spec.HardwareRef != key {
			t.Errorf("workflow %s is for hardware %s", key, wf.Spec.HardwareRef)
		}
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// bound (the condition is reached in milliseconds; the bound is for a
// loaded CI machine).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPassRefusesUnrenderable: a workflow that would not render is not
// created (it would keep rules away from the machine); once the Hardware
// is fixed, the next pass enrols it.
func TestPassRefusesUnrenderable(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	tpl := template("default", "install")
	data := strings.Replace(*tpl.Spec.Data, "image: x", "image: x\n        environment:\n          DEST_DISK: '{{ index .Hardware.Disks 0 }}'", 1)
	tpl.Spec.Data = &data
	hw := dellHardware("default", "m1", map[string]string{model.LabelDiscovered: "true"})
	create(t, st, tpl, ruleSet("default", "dell", 0, nil, ruleDell), hw)
	e := New(Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	res, err := e.Pass(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != Failed || !strings.Contains(res[0].Message, "would not render") {
		t.Fatalf("results %+v; want a failure saying the workflow would not render", res)
	}
	if n := len(workflows(t, st)); n != 0 {
		t.Fatalf("%d workflows; want none", n)
	}
	o, err := st.Get(ctx, model.KindHardware, "default", "m1")
	if err != nil {
		t.Fatal(err)
	}
	fixed := o.(*model.Hardware)
	fixed.Spec.Disks = []model.Disk{{Device: "/dev/sda"}}
	if _, err := st.Update(ctx, fixed); err != nil {
		t.Fatal(err)
	}
	if res, err = e.Pass(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != Enrolled {
		t.Fatalf("after the fix: %+v; want enrolled", res)
	}
}

// TestControllerTemplateLater: a machine whose rule names a Template not
// yet applied is enrolled when the Template arrives.
func TestControllerTemplateLater(t *testing.T) {
	st := openStore(t)
	create(t, st, ruleSet("default", "dell", 0, nil, ruleDell), dellHardware("default", "m1", map[string]string{model.LabelDiscovered: "true"}))
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	c := NewController(ControllerConfig{Config: Config{Store: st, Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// The first pass has tried, and failed for want of the Template.
	waitFor(t, func() bool { return strings.Contains(logs.String(), "template default/install, which does not exist") })
	create(t, st, template("default", "install"))
	waitFor(t, func() bool { return workflows(t, st)["default/enroll-m1"] != nil })
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
