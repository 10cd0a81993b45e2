package ui_test

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/bmcjob"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/testtool"
	wfengine "github.com/anvilproj/anvil/internal/workflow"
)

// newActionEnv is newEnv with the workflow engine the job service cancels
// through. Cancelling is a write of the workflow's status: the engine
// need not run for it.
func newActionEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, false, nil, func(c *api.Config) {
		c.Engine = wfengine.New(wfengine.Config{Store: c.Store, Logger: c.Logger})
	})
}

// audited returns the audit records of procedures ending in proc.
func (e *env) audited(t *testing.T, proc string) []audit.Record {
	t.Helper()
	recs, err := e.audit.List(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Record
	for _, r := range recs {
		if strings.HasSuffix(r.Procedure, proc) {
			out = append(out, r)
		}
	}
	return out
}

// wantAudit checks that the newest record of proc is by subject with
// outcome ok (or, when ok is false, not ok).
func (e *env) wantAudit(t *testing.T, proc, subject string, ok bool) {
	t.Helper()
	recs := e.audited(t, proc)
	if len(recs) == 0 {
		t.Fatalf("no audit record of %s", proc)
	}
	r := recs[len(recs)-1]
	if r.Subject != subject || (r.Outcome == "ok") != ok || r.ClientIP == "" {
		t.Errorf("audit of %s = %+v; want by %s, ok %v, with the browser's address", proc, r, subject, ok)
	}
}

func (e *env) get(t *testing.T, kind, ns, name string) model.Object {
	t.Helper()
	o, err := e.st.Get(context.Background(), kind, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

var formAction = regexp.MustCompile(`<form method="post" action="([^"]+)"`)

// forms returns the actions of the page's POST forms but logout.
func forms(page string) []string {
	var out []string
	for _, m := range formAction.FindAllStringSubmatch(page, -1) {
		if m[1] != "/ui/logout" {
			out = append(out, m[1])
		}
	}
	return out
}

// TestCancelWorkflow: Cancel is JobService.CancelJob as the session's
// caller. A workflow not yet running is CANCELLED at once, a running
// one shows CANCELLING; the call is audited; without the CSRF token
// nothing happens; an ended one is refused with the API's message.
func TestCancelWorkflow(t *testing.T) {
	e := newActionEnv(t)
	e.setupAcme(t)
	e.create(t, workflow("acme", "w1", "n1", model.StatePending, ""))
	b := e.browser(t)
	csrf := b.login("op-token")
	waitPage(t, b, "/ui/workflows/acme/w1", "Cancel workflow")
	if _, page := b.get("/ui/hardware/acme/n1"); !strings.Contains(page, `action="/ui/workflows/acme/w1/cancel"`) {
		t.Errorf("the machine page's workflow list offers no Cancel for an unfinished workflow")
	}

	if resp, _ := b.do(http.MethodPost, "/ui/workflows/acme/w1/cancel", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cancel without CSRF token = %d; want 403", resp.StatusCode)
	}
	if st := e.get(t, model.KindWorkflow, "acme", "w1").(*model.Workflow).Status.State; st != model.StatePending {
		t.Errorf("after a refused cancel the workflow is %s; want PENDING", st)
	}
	if n := len(e.audited(t, "/CancelJob")); n != 0 {
		t.Errorf("a POST refused for its CSRF token reached the API (%d audit records)", n)
	}

	resp, page := b.do(http.MethodPost, "/ui/workflows/acme/w1/cancel", url.Values{"csrf": {csrf}, "reason": {"wrong image"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/workflows/acme/w1" {
		t.Fatalf("cancel = %d to %q; want 303 to the workflow\n%s", resp.StatusCode, resp.Header.Get("Location"), page)
	}
	wf := e.get(t, model.KindWorkflow, "acme", "w1").(*model.Workflow)
	if wf.Status.State != model.StateCancelled || wf.Status.CancelReason != "by acme-op: wrong image" {
		t.Errorf("workflow after cancel: %s, reason %q; want CANCELLED by acme-op: wrong image", wf.Status.State, wf.Status.CancelReason)
	}
	e.wantAudit(t, "/CancelJob", "acme-op", true)
	waitPage(t, b, "/ui/workflows/acme/w1", `id="wf-state">CANCELLED`)
	if _, page := b.get("/ui/workflows/acme/w1"); strings.Contains(page, "Cancel workflow") {
		t.Errorf("a cancelled workflow's page still offers Cancel")
	}

	// A running one: CANCELLING until its action ends.
	run := workflow("acme", "w2", "n1", model.StateRunning, "")
	e.create(t, run)
	waitPage(t, b, "/ui/workflows/acme/w2", "Cancel workflow")
	if resp, page := b.do(http.MethodPost, "/ui/workflows/acme/w2/cancel", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel of a running workflow = %d\n%s", resp.StatusCode, page)
	}
	waitPage(t, b, "/ui/workflows/acme/w2", `id="wf-state">CANCELLING`)
	if _, page := b.get("/ui/workflows/acme/w2"); !strings.Contains(page, "Cancel requested (the running action ends first): by acme-op") {
		t.Errorf("a cancelling workflow's page does not say the cancel was asked for, and by whom")
	}

	// An ended one: the API's refusal, shown.
	e.create(t, workflow("acme", "w3", "n1", model.StateSuccess, ""))
	waitPage(t, b, "/ui/workflows/acme/w3", "SUCCESS")
	resp, page = b.do(http.MethodPost, "/ui/workflows/acme/w3/cancel", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, "job acme/w3 already ended (SUCCEEDED): there is nothing to cancel") {
		t.Errorf("cancel of an ended workflow = %d; want 409 with the API's message\n%s", resp.StatusCode, page)
	}
	e.wantAudit(t, "/CancelJob", "acme-op", false)
}

// TestViewerCannotAct: a viewer's machine and workflow pages have no
// mutating form, and each action's POST forged with the viewer's own
// valid CSRF token is refused by the API (permission denied), audited,
// and changes nothing.
func TestViewerCannotAct(t *testing.T) {
	e := newActionEnv(t)
	e.setupAcme(t)
	e.create(t, bmcHardware("acme", "n2", "bmc-n2"))
	e.create(t, bmcMachine("acme", "bmc-n2", model.PowerOff))
	e.create(t, workflow("acme", "w1", "n1", model.StateRunning, ""))
	b := e.browser(t)
	csrf := b.login("viewer-token")
	waitPage(t, b, "/ui/hardware/acme/n2", "Machine bmc-n2: power")
	for _, path := range []string{"/ui/hardware/acme/n1", "/ui/hardware/acme/n2", "/ui/workflows/acme/w1"} {
		if _, page := b.get(path); len(forms(page)) != 0 {
			t.Errorf("a viewer's %s has forms %v; want none", path, forms(page))
		}
	}
	rv := e.get(t, model.KindHardware, "acme", "n1").GetObjectMeta().ResourceVersion
	for _, tc := range []struct {
		path, proc string
		form       url.Values
	}{
		{"/ui/workflows/acme/w1/cancel", "/CancelJob", url.Values{}},
		{"/ui/hardware/acme/n1/netboot", "HardwareService/SetNetboot", url.Values{"allow": {"true"}, "resourceVersion": {rv}}},
		{"/ui/hardware/acme/n2/power", "BmcJobService/Create", url.Values{"action": {"on"}}},
	} {
		tc.form.Set("csrf", csrf)
		resp, page := b.do(http.MethodPost, tc.path, tc.form)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "permission denied") {
			t.Errorf("viewer's forged POST %s = %d; want 403 with the API's permission denied\n%s", tc.path, resp.StatusCode, page)
		}
		e.wantAudit(t, tc.proc, "acme-viewer", false)
	}
	if st := e.get(t, model.KindWorkflow, "acme", "w1").(*model.Workflow).Status; st.CancelRequested != nil || st.State != model.StateRunning {
		t.Errorf("the viewer's cancel changed the workflow: %+v", st)
	}
	if hw := e.get(t, model.KindHardware, "acme", "n1"); hw.GetObjectMeta().ResourceVersion != rv {
		t.Errorf("the viewer's netboot change wrote the hardware")
	}
	if jobs, _, _ := e.st.List(context.Background(), model.KindJob, store.ListOptions{}); len(jobs) != 0 {
		t.Errorf("the viewer's power press made %d jobs", len(jobs))
	}
}

// TestNetboot: allowing and denying netboot is HardwareService.SetNetboot
// (what `anvil netboot` calls) as the session's caller, with the version
// the page showed: an operator (provision, as for reprovision) has the
// buttons; only allowPXE is written; a change made meanwhile is a
// conflict, not overwritten.
func TestNetboot(t *testing.T) {
	e := newActionEnv(t)
	two := hardware("acme", "n1", "52:54:00:0a:00:01", "10.0.1.11", nil)
	two.Spec.Interfaces = append(two.Spec.Interfaces, model.Interface{DHCP: &model.DHCP{MAC: "52:54:00:0a:00:02"},
		Netboot: &model.Netboot{AllowPXE: model.Bool(true), AllowWorkflow: model.Bool(false)}})
	e.create(t, two)
	b := e.browser(t)
	csrf := b.login("op-token")
	waitPage(t, b, "/ui/hardware/acme/n1", "allowed on 1 of 2 interfaces")
	_, page := b.get("/ui/hardware/acme/n1")
	if !strings.Contains(page, "Workflows are denied (allowWorkflow false) on 1 of 2 interfaces") {
		t.Errorf("the page does not say allowWorkflow is false on one interface")
	}
	rv := regexp.MustCompile(`name="resourceVersion" value="([^"]+)"`).FindStringSubmatch(page)
	if rv == nil {
		t.Fatalf("an operator's machine page has no netboot form:\n%s", page)
	}
	before := e.get(t, model.KindHardware, "acme", "n1").(*model.Hardware)

	if resp, _ := b.do(http.MethodPost, "/ui/hardware/acme/n1/netboot", url.Values{"allow": {"true"}, "resourceVersion": {rv[1]}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("netboot without CSRF token = %d; want 403", resp.StatusCode)
	}
	if n := len(e.audited(t, "/SetNetboot")); n != 0 {
		t.Errorf("a POST refused for its CSRF token reached the API (%d audit records)", n)
	}
	resp, page := b.do(http.MethodPost, "/ui/hardware/acme/n1/netboot", url.Values{"csrf": {csrf}, "allow": {"true"}, "resourceVersion": {rv[1]}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/hardware/acme/n1#netboot" {
		t.Fatalf("allow netboot = %d to %q\n%s", resp.StatusCode, resp.Header.Get("Location"), page)
	}
	hw := e.get(t, model.KindHardware, "acme", "n1").(*model.Hardware)
	for i, ifc := range hw.Spec.Interfaces {
		if ifc.Netboot == nil || !model.BoolValue(ifc.Netboot.AllowPXE, false) {
			t.Errorf("interface %d: allowPXE not true after Allow", i)
		}
	}
	if !reflect.DeepEqual(hw.Spec.Interfaces[1], before.Spec.Interfaces[1]) || !reflect.DeepEqual(hw.Labels, before.Labels) {
		t.Errorf("Allow changed more than the first interface's allowPXE: %+v", hw)
	}
	e.wantAudit(t, "HardwareService/SetNetboot", "acme-op", true)
	waitPage(t, b, "/ui/hardware/acme/n1", "allowed on every interface (2)")

	// Someone changes the Hardware after the page was loaded: Deny,
	// sent with the page's version, is a conflict and writes nothing.
	_, page = b.get("/ui/hardware/acme/n1")
	shown := regexp.MustCompile(`name="resourceVersion" value="([^"]+)"`).FindStringSubmatch(page)[1]
	hw.Labels = map[string]string{"rack": "b"}
	if _, err := e.st.Update(context.Background(), hw); err != nil {
		t.Fatal(err)
	}
	waitPage(t, b, "/ui/hardware/acme/n1", "rack=b")
	resp, page = b.do(http.MethodPost, "/ui/hardware/acme/n1/netboot", url.Values{"csrf": {csrf}, "allow": {"false"}, "resourceVersion": {shown}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, "was changed since this page was loaded") ||
		!strings.Contains(page, "hardware acme/n1 was changed since resourceVersion "+shown) {
		t.Errorf("netboot with a stale version = %d; want 409 saying it changed, with the API's message\n%s", resp.StatusCode, page)
	}
	if hw := e.get(t, model.KindHardware, "acme", "n1").(*model.Hardware); !model.BoolValue(hw.Spec.Interfaces[0].Netboot.AllowPXE, false) || hw.Labels["rack"] != "b" {
		t.Errorf("the stale change was written: %+v", hw)
	}
	e.wantAudit(t, "HardwareService/SetNetboot", "acme-op", false)
	if resp, _ := b.do(http.MethodPost, "/ui/hardware/acme/n1/netboot", url.Values{"csrf": {csrf}, "allow": {"maybe"}, "resourceVersion": {shown}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("allow=maybe = %d; want 400", resp.StatusCode)
	}
	if resp, page := b.do(http.MethodPost, "/ui/hardware/acme/nope/netboot", url.Values{"csrf": {csrf}, "allow": {"false"}}); resp.StatusCode != http.StatusNotFound ||
		!strings.Contains(page, "hardware acme/nope not found") {
		t.Errorf("netboot of an unknown machine = %d; want 404 with the API's message\n%s", resp.StatusCode, page)
	}
}

func bmcHardware(ns, name, machine string) *model.Hardware {
	hw := hardware(ns, name, "52:54:00:0a:00:77", "10.0.1.77", nil)
	hw.Spec.BMCRef = &model.LocalObjectReference{Name: machine, Kind: "Machine"}
	return hw
}

func bmcMachine(ns, name, power string) *model.Machine {
	read := time.Date(2026, 11, 28, 9, 30, 0, 0, time.UTC)
	return &model.Machine{TypeMeta: model.TypeMeta{APIVersion: model.BMCAPIVersion, Kind: model.KindMachine},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec: model.MachineSpec{Connection: model.Connection{Host: "192.0.2.7",
			AuthSecretRef: model.SecretReference{Name: "bmc-auth", Namespace: ns}}},
		Status: model.MachineStatus{PowerState: power, Conditions: []model.MachineCondition{{Type: model.ConditionContactable,
			Status: model.ConditionTrue, LastUpdateTime: &read}}}}
}

// TestPower: a power button makes the BMC Job `anvil power` makes
// (bmcjob), through BmcJobService.Create as the session's caller; the
// page shows the Machine's power state and the Job's state.
func TestPower(t *testing.T) {
	e := newActionEnv(t)
	e.create(t, bmcHardware("acme", "n2", "bmc-n2"))
	e.create(t, bmcMachine("acme", "bmc-n2", model.PowerOff))
	e.create(t, hardware("acme", "n3", "52:54:00:0a:00:03", "10.0.1.13", nil))
	e.create(t, bmcHardware("acme", "n4", "bmc-gone"))
	b := e.browser(t)
	csrf := b.login("op-token")
	waitPage(t, b, "/ui/hardware/acme/n2", `power <strong id="power-state">off</strong>; BMC answering since 2026-11-28T09:30:00Z`)
	_, page := b.get("/ui/hardware/acme/n2")
	for _, a := range model.PowerActions {
		if !strings.Contains(page, `<button type="submit" name="action" value="`+a+`">`) {
			t.Errorf("the machine page has no %s button", a)
		}
	}
	if _, page := b.get("/ui/hardware/acme/n3"); strings.Contains(page, `id="power"`) {
		t.Errorf("a machine without bmcRef shows a power section")
	}
	waitPage(t, b, "/ui/hardware/acme/n4", "Machine acme/bmc-gone (spec.bmcRef) does not exist")

	if resp, _ := b.do(http.MethodPost, "/ui/hardware/acme/n2/power", url.Values{"action": {"on"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("power without CSRF token = %d; want 403", resp.StatusCode)
	}
	resp, page := b.do(http.MethodPost, "/ui/hardware/acme/n2/power", url.Values{"csrf": {csrf}, "action": {"on"}})
	loc := resp.Header.Get("Location")
	m := regexp.MustCompile(`^/ui/hardware/acme/n2\?job=(bmc-n2-power-on-[a-z0-9]+)#power$`).FindStringSubmatch(loc)
	if resp.StatusCode != http.StatusSeeOther || m == nil {
		t.Fatalf("power on = %d to %q; want 303 to the machine page naming the job\n%s", resp.StatusCode, loc, page)
	}
	j := e.get(t, model.KindJob, "acme", m[1]).(*model.Job)
	if j.Labels[bmcjob.CreatedByLabel] != bmcjob.CreatedByUI || j.Spec.MachineRef.Name != "bmc-n2" || len(j.Spec.Tasks) != 1 ||
		j.Spec.Tasks[0].Describe() != "powerAction on" {
		t.Errorf("job = %+v; want one powerAction on for bmc-n2, made by the UI", j)
	}
	e.wantAudit(t, "BmcJobService/Create", "acme-op", true)
	_, page = b.get(strings.TrimSuffix(loc, "#power"))
	if !strings.Contains(page, "Job "+j.Name+" (powerAction on): <strong class=\"state\" id=\"power-job-state\">Pending</strong>") {
		t.Errorf("the page after the press does not show the job pending:\n%s", page)
	}

	// The executor's outcome, as it writes it, is shown on reload.
	now := time.Now()
	j.Status = model.JobStatus{StartTime: &now, CompletionTime: &now, Conditions: []model.JobCondition{
		{Type: model.ConditionRunning, Status: model.ConditionFalse},
		{Type: model.ConditionFailed, Status: model.ConditionTrue, Message: "task 0 (powerAction on): BMC said <no>"}}}
	if _, err := e.st.Update(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if _, page := b.get(strings.TrimSuffix(loc, "#power")); !strings.Contains(page, "id=\"power-job-state\">Failed</strong>: task 0 (powerAction on): BMC said &lt;no&gt;") {
		t.Errorf("the page does not show the job's failure, escaped:\n%s", page)
	}
	// A job of another machine named in the query is not shown.
	if _, page := b.get("/ui/hardware/acme/n4?job=" + j.Name); strings.Contains(page, j.Name) {
		t.Errorf("machine n4's page shows bmc-n2's job")
	}

	for _, tc := range []struct{ path, action, want string }{
		{"/ui/hardware/acme/n2/power", "sideways", `unknown power action &#34;sideways&#34; (want one of on, off, soft, cycle, reset, status)`},
		{"/ui/hardware/acme/n3/power", "on", "hardware acme/n3 has no spec.bmcRef"},
	} {
		resp, page := b.do(http.MethodPost, tc.path, url.Values{"csrf": {csrf}, "action": {tc.action}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, tc.want) {
			t.Errorf("POST %s action %s = %d; want 400 saying %s\n%s", tc.path, tc.action, resp.StatusCode, tc.want, page)
		}
	}
}

// events opens path's event stream and returns its events, each as its
// lines ("event: …\ndata: …\n"); the channel closes when the stream ends.
func (b *browser) events(path string) <-chan string {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		b.t.Fatalf("GET %s = %d %q; want 200 text/event-stream", path, resp.StatusCode, ct)
	}
	out := make(chan string, 10)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var ev strings.Builder
		for sc.Scan() {
			if sc.Text() == "" {
				out <- ev.String()
				ev.Reset()
				continue
			}
			ev.WriteString(sc.Text() + "\n")
		}
	}()
	return out
}

// TestPowerEvents: the machine page's power fragment is pushed when the
// executor's writes land — the Job's state and the Machine's power state
// — with no reload; a machine without bmcRef has no stream.
func TestPowerEvents(t *testing.T) {
	e := newActionEnv(t)
	e.create(t, bmcHardware("acme", "n2", "bmc-n2"))
	e.create(t, bmcMachine("acme", "bmc-n2", model.PowerOff))
	e.create(t, hardware("acme", "n3", "52:54:00:0a:00:03", "10.0.1.13", nil))
	b := e.browser(t)
	csrf := b.login("op-token")
	waitPage(t, b, "/ui/hardware/acme/n2", `id="power-live"`)
	resp, _ := b.do(http.MethodPost, "/ui/hardware/acme/n2/power", url.Values{"csrf": {csrf}, "action": {"on"}})
	job := regexp.MustCompile(`job=([a-z0-9-]+)`).FindStringSubmatch(resp.Header.Get("Location"))
	if job == nil {
		t.Fatalf("power on = %d to %q; want the job named", resp.StatusCode, resp.Header.Get("Location"))
	}
	events := b.events("/ui/hardware/acme/n2/power/events?job=" + job[1])
	first := testtool.Receive(t, events, "the first power event")
	if !strings.HasPrefix(first, "event: power\n") || !strings.Contains(first, `id="power-state">off`) || !strings.Contains(first, `id="power-job-state">Pending`) {
		t.Fatalf("first event %q; want power off, the job pending", first)
	}

	// What the executor writes when the Job is done: the Machine's
	// power state, then the Job's Completed condition.
	m := e.get(t, model.KindMachine, "acme", "bmc-n2").(*model.Machine)
	m.Status.PowerState = model.PowerOn
	if _, err := e.st.Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	j := e.get(t, model.KindJob, "acme", job[1]).(*model.Job)
	j.Status.Conditions = []model.JobCondition{{Type: model.ConditionCompleted, Status: model.ConditionTrue}}
	if _, err := e.st.Update(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	for {
		ev := testtool.Receive(t, events, "an event showing the job completed")
		if strings.Contains(ev, `id="power-job-state">Completed`) {
			if !strings.Contains(ev, `id="power-state">on`) {
				t.Errorf("event %q: the job completed but the power state is not on", ev)
			}
			break
		}
	}

	if resp, _ := b.get("/ui/hardware/acme/n3/power/events"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("power events of a machine without bmcRef = %d; want 404", resp.StatusCode)
	}
	viewer := e.browser(t)
	viewer.login("viewer-token")
	if ev := testtool.Receive(t, viewer.events("/ui/hardware/acme/n2/power/events"), "a viewer's power event"); !strings.Contains(ev, `id="power-state">on`) {
		t.Errorf("a viewer's power event %q; want the state, on", ev)
	}
}
