package workflow

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/tmplbudget"
)

// newFakeClock is a clock whose timers fire only when the test advances
// time.
func newFakeClock() *clock.Fake { return clock.NewFake(t0) }

type env struct {
	t      *testing.T
	budget tmplbudget.Budget            // the engine's RenderBudget
	isoURL func(*model.Hardware) string // the engine's ISOURL
	// missingGrace is the engine's MissingGrace.
	missingGrace time.Duration
	path         string
	store        *bolt.Store
	clock        *clock.Fake
	engine       *Engine
	cancel       context.CancelFunc
	done         chan error
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, path: filepath.Join(t.TempDir(), "anvil.db"), clock: newFakeClock()}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) start() {
	st, err := bolt.Open(e.path, bolt.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = st
	e.engine = New(Config{Store: st, Clock: e.clock, RenderBudget: e.budget, ISOURL: e.isoURL, MissingGrace: e.missingGrace})
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() { e.done <- e.engine.Run(ctx) }()
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	if err := <-e.done; err != nil {
		e.t.Errorf("Run: %v", err)
	}
	e.cancel = nil
	if err := e.store.Close(); err != nil {
		e.t.Errorf("close store: %v", err)
	}
}

func (e *env) create(objs ...model.Object) {
	e.t.Helper()
	for _, o := range objs {
		if _, err := e.store.Create(context.Background(), o); err != nil {
			e.t.Fatalf("create %s: %v", o.GetObjectMeta().Name, err)
		}
	}
}

func (e *env) workflow(name string) *model.Workflow {
	e.t.Helper()
	o, err := e.store.Get(context.Background(), model.KindWorkflow, "default", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*model.Workflow)
}

func (e *env) hardware(name string) *model.Hardware {
	e.t.Helper()
	o, err := e.store.Get(context.Background(), model.KindHardware, "default", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*model.Hardware)
}

// waitWorkflow waits (on the real clock; the controller works in the
// background) until cond holds for the stored workflow.
func (e *env) waitWorkflow(name string, what string, cond func(*model.Workflow) bool) *model.Workflow {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, err := e.store.Get(context.Background(), model.KindWorkflow, "default", name)
		if err == nil && cond(o.(*model.Workflow)) {
			return o.(*model.Workflow)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("workflow %s: timed out waiting for %s; last: %+v (err %v)", name, what, o, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *env) waitUntil(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func stateIs(s model.State) func(*model.Workflow) bool {
	return func(w *model.Workflow) bool { return w.Status.State == s }
}

func rendered(w *model.Workflow) bool { return w.Status.State != "" }

const mac = "3c:ec:ef:12:34:07"

func testHardware(t *testing.T) *model.Hardware {
	hw := loadYAML[model.Hardware](t, "testdata/hardware.yaml")
	hw.Spec.Interfaces[0].Netboot.AllowPXE = model.Bool(false)
	return hw
}

func testWorkflow(name string, hwRef string) *model.Workflow {
	return &model.Workflow{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindWorkflow},
		ObjectMeta: model.ObjectMeta{Name: name, Namespace: "default"},
		Spec: model.WorkflowSpec{TemplateRef: "debian-raw", HardwareRef: hwRef,
			HardwareMap: map[string]string{"device_1": mac}},
	}
}

// runAction gets the agent's next action (no wait), checks its name and
// reports it RUNNING then the given end state.
func (e *env) runAction(agent, want string, end model.State) *NextAction {
	e.t.Helper()
	ctx := context.Background()
	na, err := e.engine.GetAction(ctx, agent, 0)
	if err != nil {
		e.t.Fatalf("GetAction(%s) want %s: %v", agent, want, err)
	}
	if na.Name != want {
		e.t.Fatalf("GetAction: got %s, want %s", na.Name, want)
	}
	e.report(agent, na, model.StateRunning)
	if end != "" {
		e.report(agent, na, end)
	}
	return na
}

func (e *env) report(agent string, na *NextAction, state model.State) model.State {
	e.t.Helper()
	ws, err := e.engine.ReportActionStatus(context.Background(), ActionReport{WorkflowID: na.WorkflowID,
		AgentID: agent, TaskID: na.TaskID, ActionID: na.ActionID, ActionName: na.Name, State: state})
	if err != nil {
		e.t.Fatalf("report %s %s: %v", na.Name, state, err)
	}
	return ws
}

func TestEngineRenderFailure(t *testing.T) {
	e := newEnv(t)
	data := minimalHead + "  - name: t\n    worker: \"{{ .device_2 }}\"\n    actions: [{name: a, image: i}]\n"
	tmpl := templateOf(data)
	tmpl.Name = "debian-raw"
	e.create(tmpl, testWorkflow("wf", ""))
	wf := e.waitWorkflow("wf", "FAILED", stateIs(model.StateFailed))
	c := FindCondition(&wf.Status, ConditionTemplateRendered)
	if wf.Status.TemplateRendering != RenderingFailed || c == nil || c.Status != "False" ||
		!strings.Contains(c.Message, `map has no entry for key "device_2"`) {
		t.Fatalf("status %+v", wf.Status)
	}
	if h := wf.Status.History; len(h) == 0 || !strings.Contains(h[len(h)-1].Message, "map has no entry for key") {
		t.Fatalf("history %+v", h)
	}
	// A missing template is a render failure too.
	w2 := testWorkflow("wf2", "")
	w2.Spec.TemplateRef = "nope"
	e.create(w2)
	wf = e.waitWorkflow("wf2", "FAILED", stateIs(model.StateFailed))
	if c := FindCondition(&wf.Status, ConditionTemplateRendered); !strings.Contains(c.Message, "template default/nope not found") {
		t.Fatalf("condition %+v", c)
	}
}

func TestEngineOneActiveWorkflowPerHardware(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t))
	e.create(testWorkflow("wf-a", "rack1-node07"))
	e.create(testWorkflow("wf-b", "rack1-node07"))
	e.waitWorkflow("wf-a", "rendered", rendered)
	b := e.waitWorkflow("wf-b", "waiting", func(w *model.Workflow) bool {
		return FindCondition(&w.Status, ConditionWaiting) != nil
	})
	if c := FindCondition(&b.Status, ConditionWaiting); !strings.Contains(c.Message, "wf-a") || b.Status.State != model.StatePending {
		t.Fatalf("wf-b %+v", b.Status)
	}
	if a := e.workflow("wf-a"); FindCondition(&a.Status, ConditionWaiting) != nil {
		t.Fatalf("wf-a waits: %+v", a.Status.Conditions)
	}
	// A report for the waiting workflow is refused.
	if _, err := e.engine.ReportActionStatus(context.Background(), ActionReport{WorkflowID: "default/wf-b", AgentID: mac,
		TaskID: b.Status.Tasks[0].ID, ActionID: b.Status.Tasks[0].Actions[0].ID, State: model.StateRunning}); !errors.Is(err, ErrBadReport) {
		t.Fatalf("report to waiting workflow: %v", err)
	}
	for _, n := range []string{"stream-image", "hostname", "reboot"} {
		if na := e.runAction(mac, n, model.StateSuccess); na.WorkflowID != "default/wf-a" {
			t.Fatalf("action %s from %s", n, na.WorkflowID)
		}
	}
	if s := e.workflow("wf-a").Status.State; s != model.StateSuccess {
		t.Fatalf("wf-a %s", s)
	}
	// wf-b becomes active: the agent's long poll gets its first action.
	na, err := e.engine.GetAction(context.Background(), mac, 20*time.Second)
	if err != nil || na.WorkflowID != "default/wf-b" || na.Name != "stream-image" {
		t.Fatalf("GetAction after wf-a: %+v %v", na, err)
	}
	e.report(mac, na, model.StateRunning)
	e.report(mac, na, model.StateSuccess)
	e.runAction(mac, "hostname", model.StateSuccess)
	na = e.runAction(mac, "reboot", "")
	if ws := e.report(mac, na, model.StateSuccess); ws != model.StateSuccess {
		t.Fatalf("wf-b ended %s", ws)
	}
}

func TestEngineToggleAllowNetboot(t *testing.T) {
	e := newEnv(t)
	wf := testWorkflow("wf", "rack1-node07")
	wf.Spec.BootOptions = &model.BootOptions{ToggleAllowNetboot: true}
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), wf)
	allowPXE := func() bool {
		return model.BoolValue(e.hardware("rack1-node07").Spec.Interfaces[0].Netboot.AllowPXE, false)
	}
	e.waitWorkflow("wf", "netboot allowed", func(w *model.Workflow) bool {
		c := FindCondition(&w.Status, ConditionAllowNetboot)
		return c != nil && c.Status == "True"
	})
	if !allowPXE() {
		t.Fatal("allowPXE not set at start")
	}
	e.runAction(mac, "stream-image", model.StateSuccess)
	e.runAction(mac, "hostname", model.StateSuccess)
	e.runAction(mac, "reboot", model.StateSuccess)
	w := e.waitWorkflow("wf", "netboot disallowed", func(w *model.Workflow) bool {
		c := FindCondition(&w.Status, ConditionAllowNetboot)
		return c != nil && c.Status == "False"
	})
	if allowPXE() {
		t.Fatal("allowPXE still true after success")
	}
	var msgs []string
	for _, h := range w.Status.History {
		if strings.HasPrefix(h.Message, "toggleAllowNetboot") {
			msgs = append(msgs, h.Message)
		}
	}
	if len(msgs) != 2 || !strings.Contains(msgs[0], "allowPXE set to true") || !strings.Contains(msgs[1], "allowPXE set to false") {
		t.Fatalf("history %q", msgs)
	}
}

func TestEngineServerSideTimeout(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), testWorkflow("wf", "rack1-node07"))
	e.waitWorkflow("wf", "rendered", rendered)
	e.runAction(mac, "stream-image", "") // RUNNING, then the agent goes silent
	deadline := t0.Add(600 * time.Second)
	e.waitUntil("action deadline timer", func() bool { return e.clock.PendingAt(deadline) })
	e.clock.Advance(599 * time.Second)
	if s := e.workflow("wf").Status.State; s != model.StateRunning {
		t.Fatalf("state before deadline %s", s)
	}
	e.clock.Advance(time.Second)
	w := e.waitWorkflow("wf", "TIMEOUT", stateIs(model.StateTimeout))
	a := w.Status.Tasks[0].Actions[0]
	if a.State != model.StateTimeout || !strings.Contains(a.Message, "action timeout of 600s") || a.ExecutionDuration != "10m0s" {
		t.Fatalf("action %+v", a)
	}
	// The agent's late report is refused.
	if _, err := e.engine.ReportActionStatus(context.Background(), ActionReport{WorkflowID: "default/wf", AgentID: mac,
		TaskID: a.ID[:len(a.ID)-2], ActionID: a.ID, State: model.StateSuccess}); !errors.Is(err, ErrBadReport) {
		t.Fatalf("late report: %v", err)
	}
}

func TestEngineGlobalTimeoutAndRetry(t *testing.T) {
	e := newEnv(t)
	data := `version: "0.1"
name: r
global_timeout: 100
tasks:
  - name: t
    worker: "{{.device_1}}"
    actions:
      - {name: flaky, image: i, timeout: 10, retries: 1}
      - {name: slow, image: i}
`
	tmpl := templateOf(data)
	tmpl.Name = "debian-raw"
	e.create(tmpl, testHardware(t), testWorkflow("wf", "")) // the worker is the Hardware's MAC
	e.waitWorkflow("wf", "rendered", rendered)
	e.runAction(mac, "flaky", model.StateFailed)
	// Held back for 2s, then handed out to a waiting agent when the timer fires.
	got := make(chan *NextAction, 1)
	go func() {
		na, _ := e.engine.GetAction(context.Background(), mac, 30*time.Second)
		got <- na
	}()
	e.waitUntil("retry timer", func() bool { return e.clock.PendingAt(t0.Add(2 * time.Second)) })
	e.clock.Advance(2 * time.Second)
	na := <-got
	if na == nil || na.Name != "flaky" || na.Attempt != 2 {
		t.Fatalf("retry %+v", na)
	}
	e.report(mac, na, model.StateRunning)
	e.report(mac, na, model.StateSuccess)
	e.runAction(mac, "slow", "")
	e.waitUntil("global deadline timer", func() bool { return e.clock.PendingAt(t0.Add(100 * time.Second)) })
	e.clock.Advance(98 * time.Second)
	w := e.waitWorkflow("wf", "TIMEOUT", stateIs(model.StateTimeout))
	if h := w.Status.History; !strings.Contains(h[len(h)-1].Message, "global timeout of 100s exceeded") {
		t.Fatalf("history %+v", h[len(h)-1])
	}
}

func TestEngineGetActionLongPoll(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// Nothing to do: the wait ends on the (fake) clock.
	errc := make(chan error, 1)
	go func() {
		_, err := e.engine.GetAction(ctx, "nobody", 5*time.Second)
		errc <- err
	}()
	e.waitUntil("long-poll timer", func() bool { return e.clock.PendingAt(t0.Add(5 * time.Second)) })
	e.clock.Advance(5 * time.Second)
	if err := <-errc; !errors.Is(err, ErrNoAction) {
		t.Fatalf("err %v", err)
	}
	// A workflow appearing wakes the waiting agent at once.
	got := make(chan *NextAction, 1)
	go func() {
		na, err := e.engine.GetAction(ctx, mac, 30*time.Second)
		if err != nil {
			t.Errorf("GetAction: %v", err)
		}
		got <- na
	}()
	e.waitUntil("long-poll timer", func() bool { return e.clock.PendingAt(t0.Add(35 * time.Second)) })
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), testWorkflow("wf", "rack1-node07"))
	select {
	case na := <-got:
		if na == nil || na.Name != "stream-image" || na.Environment["DEST_DISK"] != "/dev/nvme0n1" ||
			strings.Join(na.Volumes, ",") != "/dev:/dev" {
			t.Fatalf("next %+v", na)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GetAction did not return when the workflow became ready")
	}
	// Unknown workflow.
	if _, err := e.engine.ReportActionStatus(ctx, ActionReport{WorkflowID: "default/nope", AgentID: mac}); !errors.Is(err, ErrUnknownWorkflow) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestEngineRestartResume(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), testWorkflow("wf", "rack1-node07"))
	e.waitWorkflow("wf", "rendered", rendered)
	e.runAction(mac, "stream-image", model.StateSuccess)
	e.runAction(mac, "hostname", "") // RUNNING when the server goes down

	e.stop()
	e.start()
	// The agent reconnects: it is handed the running action again (same
	// attempt), finishes it, and the next one is the last.
	na, err := e.engine.GetAction(context.Background(), mac, 0)
	if err != nil || na.Name != "hostname" || na.Attempt != 1 {
		t.Fatalf("after restart: %+v %v", na, err)
	}
	e.report(mac, na, model.StateSuccess)

	e.stop()
	e.start()
	na = e.runAction(mac, "reboot", "")
	if ws := e.report(mac, na, model.StateSuccess); ws != model.StateSuccess {
		t.Fatalf("final %s", ws)
	}
	w := e.workflow("wf")
	for _, a := range w.Status.Tasks[0].Actions {
		if a.State != model.StateSuccess || a.Attempt != 1 {
			t.Fatalf("action %s state %s attempt %d", a.Name, a.State, a.Attempt)
		}
	}
}

func TestWorkQueueDedup(t *testing.T) {
	q := newWorkQueue()
	q.add("a")
	q.add("a")
	q.add("b")
	if q.Len() != 2 {
		t.Fatalf("len %d", q.Len())
	}
	k, _ := q.get()
	q.add(k) // while processing: deferred, not concurrent
	if q.Len() != 1 {
		t.Fatalf("len %d", q.Len())
	}
	q.done(k)
	if q.Len() != 2 {
		t.Fatalf("len after done %d", q.Len())
	}
	q.shutdown()
	if _, ok := q.get(); ok {
		t.Fatal("get after shutdown")
	}
}

var _ store.Store = (*bolt.Store)(nil)

// TestEngineDeleteCancelsRendering: a Template whose rendering would run
// for as long as its budget allows is stopped when its workflow is
// deleted, and nothing is left executing.
func TestEngineDeleteCancelsRendering(t *testing.T) {
	e := &env{t: t, path: filepath.Join(t.TempDir(), "anvil.db"), clock: newFakeClock()}
	// A budget that would never end the loop by itself: only the deletion can.
	e.budget = tmplbudget.Budget{Time: time.Hour, Steps: 1 << 62}
	e.start()
	t.Cleanup(e.stop)
	tmpl := templateOf(minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i}]}\n{{ range (atoi .n) }}{{ end }}")
	tmpl.Name = "debian-raw"
	wf := testWorkflow("wf", "")
	wf.Spec.HardwareMap["n"] = "1000000000000"
	e.create(tmpl, wf)
	renderingWF := func() bool {
		e.engine.rmu.Lock()
		defer e.engine.rmu.Unlock()
		return e.engine.rendering["default/wf"] != nil
	}
	e.waitUntil("the workflow's rendering to start", renderingWF)
	if err := e.store.Delete(context.Background(), model.KindWorkflow, "default", "wf", ""); err != nil {
		t.Fatal(err)
	}
	e.waitUntil("the rendering to stop", func() bool { return !renderingWF() })
	if g := executingTemplates(); len(g) > 0 {
		t.Errorf("a template is still executing after its rendering stopped:\n%s", strings.Join(g, "\n\n"))
	}
}

// TestEngineFollow: an agent long-polling a replica that does not run the
// engine (Kubernetes mode's follower) is woken when the leader renders
// its workflow, through Follow, not when its wait runs out (the fake
// clock never lets it run out here).
func TestEngineFollow(t *testing.T) {
	e := newEnv(t)
	follower := New(Config{Store: e.store, Clock: e.clock})
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan error, 1)
	go func() { followed <- follower.Follow(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-followed; err != nil {
			t.Errorf("Follow: %v", err)
		}
	})

	got := make(chan *NextAction, 1)
	go func() {
		na, err := follower.GetAction(context.Background(), mac, 30*time.Second)
		if err != nil {
			t.Errorf("GetAction on the follower: %v", err)
		}
		got <- na
	}()
	e.waitUntil("the follower's long-poll timer", func() bool { return e.clock.PendingAt(t0.Add(30 * time.Second)) })
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), testWorkflow("wf", "rack1-node07"))
	select {
	case na := <-got:
		if na == nil || na.Name != "stream-image" {
			t.Fatalf("the follower's GetAction = %+v; want stream-image", na)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower's GetAction was not woken by the leader's rendering")
	}
}

// TestEngineMissingGrace: with MissingGrace (Kubernetes mode), a workflow
// whose Template is not in the store yet is not failed: it is rendered
// again until the Template appears. One whose Template never appears
// fails once the grace has passed, as without it.
func TestEngineMissingGrace(t *testing.T) {
	e := &env{t: t, path: filepath.Join(t.TempDir(), "anvil.db"), clock: newFakeClock(), missingGrace: time.Minute}
	e.start()
	t.Cleanup(e.stop)
	e.create(testHardware(t))

	late := testWorkflow("late", "rack1-node07")
	late.Spec.TemplateRef = "later"
	e.create(late)
	// The engine found the Template missing and will look again.
	e.waitUntil("a render retry scheduled", func() bool { return e.clock.PendingAt(e.clock.Now().Add(errorRequeueDelay)) })
	if w := e.workflow("late"); w.Status.State != "" {
		t.Fatalf("workflow with its Template not there yet: state %s, want not rendered yet: %+v", w.Status.State, w.Status.Conditions)
	}
	tmpl := loadYAML[model.Template](t, "testdata/template.yaml")
	tmpl.Name = "later"
	e.create(tmpl)
	e.clock.Advance(errorRequeueDelay)
	e.waitWorkflow("late", "rendered", rendered)

	never := testWorkflow("never", "")
	never.Spec.TemplateRef = "nope"
	e.create(never)
	// Retried every errorRequeueDelay while the grace lasts; the 60th
	// retry, a minute after the first miss, fails it.
	for range 60 {
		e.waitUntil("a render retry scheduled", func() bool { return e.clock.PendingAt(e.clock.Now().Add(errorRequeueDelay)) })
		if w := e.workflow("never"); w.Status.State != "" {
			t.Fatalf("failed %s into the test, before the grace passed: %+v", e.clock.Now().Sub(t0), w.Status.Conditions)
		}
		e.clock.Advance(errorRequeueDelay)
	}
	w := e.waitWorkflow("never", "FAILED", stateIs(model.StateFailed))
	if c := FindCondition(&w.Status, ConditionTemplateRendered); c == nil || !strings.Contains(c.Message, "template default/nope not found") {
		t.Fatalf("condition %+v", c)
	}
}

// laggingStore answers reads of workflows from a snapshot, as a Kubernetes
// replica's cache does while it has not yet seen another replica's write,
// and StoredVersion from the store itself.
type laggingStore struct {
	store.Store
	snap map[string]*model.Workflow // by namespace/name
}

func (l *laggingStore) stale(o model.Object) model.Object {
	if _, isWorkflow := o.(*model.Workflow); !isWorkflow {
		return o
	}
	if w, ok := l.snap[o.GetObjectMeta().Key()]; ok {
		return model.DeepCopy(w)
	}
	return o
}

func (l *laggingStore) Get(ctx context.Context, kind, ns, name string) (model.Object, error) {
	o, err := l.Store.Get(ctx, kind, ns, name)
	if err != nil {
		return nil, err
	}
	return l.stale(o), nil
}

func (l *laggingStore) ByIndex(ctx context.Context, kind, index, value string) ([]model.Object, error) {
	objs, err := l.Store.ByIndex(ctx, kind, index, value)
	for i, o := range objs {
		objs[i] = l.stale(o)
	}
	return objs, err
}

func (l *laggingStore) StoredVersion(ctx context.Context, kind, ns, name string) (string, error) {
	o, err := l.Store.Get(ctx, kind, ns, name)
	if err != nil {
		return "", err
	}
	return o.GetObjectMeta().ResourceVersion, nil
}

// TestEngineConfirmsCachedWorkflowBeforeHandout: with a store whose cache
// can lag (store.LiveReader), an action whose SUCCESS was recorded through
// another replica is not handed out again from a cache that has not seen
// it; once the cache has, the next action is.
func TestEngineConfirmsCachedWorkflowBeforeHandout(t *testing.T) {
	e := newEnv(t)
	e.create(loadYAML[model.Template](t, "testdata/template.yaml"), testHardware(t), testWorkflow("wf", "rack1-node07"))
	before := e.waitWorkflow("wf", "rendered", rendered)
	// Another replica hands out and records the first action.
	first := e.runAction(mac, "stream-image", model.StateSuccess)

	lag := &laggingStore{Store: e.store, snap: map[string]*model.Workflow{before.Key(): before}}
	replica := New(Config{Store: lag, Clock: e.clock})
	if na, err := replica.GetAction(context.Background(), mac, 0); !errors.Is(err, ErrNoAction) {
		t.Fatalf("GetAction from a cache behind the store: %+v, %v; want ErrNoAction, not %s again", na, err, first.Name)
	}
	delete(lag.snap, before.Key()) // the cache caught up
	na, err := replica.GetAction(context.Background(), mac, 0)
	if err != nil || na.Name == first.Name {
		t.Fatalf("GetAction once the cache caught up: %+v, %v; want the action after %s", na, err, first.Name)
	}
}
