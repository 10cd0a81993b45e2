package ui_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/testtool"
	wfengine "github.com/anvilproj/anvil/internal/workflow"
)

// previewTemplate uses what a workflow's template data offers: the
// hardwareMap's device_1, the legacy .Hardware, the whole .hardware
// object with its inventory, Sprig and the workflow functions.
const previewTemplate = `version: "0.1"
name: install
global_timeout: 1800
tasks:
- name: os
  worker: "{{.device_1}}"
  volumes: ["/dev:/dev"]
  actions:
  - name: stream
    image: quay.io/tinkerbell/actions/image2disk:latest
    timeout: 600
    environment:
      DEST_DISK: {{ index .Hardware.Disks 0 | quote }}
      HOST: {{ .hardware.metadata.name | quote }}
      CORES: "{{ .hardware.status.attributes.cpu.totalCores }}"
      MAC: {{ .device_1 | upper | quote }}
  - name: partition
    image: quay.io/tinkerbell/actions/writefile:latest
    environment:
      PART: {{ formatPartition (index .Hardware.Disks 0) 1 | quote }}
`

// previewHardware is a machine with a disk and an inventory.
func previewHardware(ns, name, mac string) *model.Hardware {
	hw := hardware(ns, name, mac, "10.0.1.21", nil)
	hw.Spec.Disks = []model.Disk{{Device: "/dev/nvme0n1"}}
	hw.Status.Attributes = &model.Attributes{CPU: &model.CPUAttributes{TotalCores: 16}}
	return hw
}

func namedTemplate(ns, name, data string) *model.Template {
	return &model.Template{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindTemplate},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec:       model.TemplateSpec{Data: &data},
	}
}

// rowLinks returns the targets of the links under prefix in page's
// table rows, in order.
func rowLinks(page, prefix string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<td><a href="`+regexp.QuoteMeta(prefix)+`([^"]+)">`).FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestTemplatesListByOrgAndEscaped(t *testing.T) {
	e := newEnv(t)
	e.create(t, template("acme"))
	e.create(t, namedTemplate("acme", "evil", "# <script>alert(1)</script>\n"+templateData))
	e.create(t, template("globex"))
	b := e.browser(t)
	b.login("op-token")
	resp, page := b.get("/ui/templates")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/templates = %d", resp.StatusCode)
	}
	if got := rowLinks(page, "/ui/templates/"); !slices.Equal(got, []string{"acme/evil", "acme/t1"}) {
		t.Errorf("operator of acme sees templates %v; want acme/evil, acme/t1 (not globex's)", got)
	}
	if !regexp.MustCompile(`acme/t1</a></td>\s*<td>1</td><td>1</td>`).MatchString(page) {
		t.Errorf("the list does not count t1's 1 task and 1 action:\n%s", page)
	}
	_, page = b.get("/ui/templates/acme/evil")
	if strings.Contains(page, "<script>alert") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("a template's text is not shown escaped")
	}
	if resp, _ := b.get("/ui/templates/globex/t1"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another organisation's template = %d; want 404", resp.StatusCode)
	}
}

// TestTemplatePreviewIsTheEngineRendering: the preview of a Template for
// a machine is what the workflow engine renders for the Workflow that
// reprovisioning the machine from the Template creates.
func TestTemplatePreviewIsTheEngineRendering(t *testing.T) {
	e := newEnv(t)
	const mac = "52:54:00:0a:00:21"
	e.create(t, previewHardware("acme", "n21", mac))
	e.create(t, namedTemplate("acme", "install", previewTemplate))
	ctx, cancel := context.WithCancel(context.Background())
	eng := wfengine.New(wfengine.Config{Store: e.st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-engDone })

	b := e.browser(t)
	csrf := b.login("op-token")
	waitPage(t, b, "/ui/templates/acme/install", `<option value="n21">`)
	resp, page := b.get("/ui/templates/acme/install?hardware=n21")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("preview = %d\n%s", resp.StatusCode, page)
	}
	m := regexp.MustCompile(`(?s)<pre class="yaml" id="rendered">(.*?)</pre>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no rendered workflow on the page:\n%s", page)
	}
	def, err := wfengine.ParseDefinition([]byte(html.UnescapeString(m[1])))
	if err != nil {
		t.Fatalf("the preview is no workflow: %v", err)
	}
	for _, want := range []string{`DEST_DISK: "/dev/nvme0n1"`, `HOST: "n21"`, `CORES: "16"`, `MAC: "52:54:00:0A:00:21"`, `PART: "/dev/nvme0n1p1"`} {
		if !strings.Contains(html.UnescapeString(m[1]), want) {
			t.Errorf("the preview lacks %s", want)
		}
	}

	// The real path: reprovision the machine; the engine renders it.
	if resp, _ := b.do(http.MethodPost, "/ui/hardware/acme/n21/reprovision", url.Values{"template": {"install"}, "csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("reprovision = %d", resp.StatusCode)
	}
	var wf *model.Workflow
	testtool.WaitFor(t, "the engine to render the new workflow", func() bool {
		objs := e.workflowsOf(t, "n21")
		if len(objs) == 1 && len(objs[0].(*model.Workflow).Status.Tasks) > 0 {
			wf = objs[0].(*model.Workflow)
		}
		return wf != nil
	})
	if wf.Status.GlobalTimeout != def.GlobalTimeout || len(wf.Status.Tasks) != len(def.Tasks) {
		t.Fatalf("engine: global timeout %d, %d tasks; preview: %d, %d", wf.Status.GlobalTimeout, len(wf.Status.Tasks), def.GlobalTimeout, len(def.Tasks))
	}
	for i, task := range wf.Status.Tasks {
		td := def.Tasks[i]
		if task.Name != td.Name || task.AgentID != wfengine.WorkerID(td.Worker) || !slices.Equal(task.Volumes, td.Volumes) || len(task.Actions) != len(td.Actions) {
			t.Fatalf("task %d: engine %s on %s %v (%d actions); preview %s on %s %v (%d actions)", i, task.Name, task.AgentID, task.Volumes,
				len(task.Actions), td.Name, wfengine.WorkerID(td.Worker), td.Volumes, len(td.Actions))
		}
		for j, a := range task.Actions {
			ad := td.Actions[j]
			if a.Name != ad.Name || a.Image != ad.Image || a.Timeout != ad.Timeout || fmt.Sprint(a.Environment) != fmt.Sprint(ad.Environment) {
				t.Errorf("action %d/%d: engine %s %s %d %v; preview %s %s %d %v", i, j, a.Name, a.Image, a.Timeout, a.Environment,
					ad.Name, ad.Image, ad.Timeout, ad.Environment)
			}
		}
	}
}

func TestTemplatePreviewErrors(t *testing.T) {
	e := newEnv(t)
	e.create(t, previewHardware("acme", "n21", "52:54:00:0a:00:21"))
	e.create(t, namedTemplate("acme", "missing", "version: \"0.1\"\nname: x\ntasks:\n- name: {{ .no_such_key }}\n"))
	// Output past the rendering budget (wfengine.MaxRenderedSize).
	e.create(t, namedTemplate("acme", "huge", "version: \"0.1\"\n{{ range until 100000 }}# padding padding padding padding\n{{ end }}"))
	b := e.browser(t)
	b.login("viewer-token")
	waitPage(t, b, "/ui/templates/acme/missing", `<option value="n21">`)

	resp, page := b.get("/ui/templates/acme/missing?hardware=n21")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="render-error">The template does not render (line 4):`) ||
		!strings.Contains(page, "no_such_key") {
		t.Errorf("missing key: %d; want 200 and the error with its line\n%s", resp.StatusCode, page)
	}
	if !strings.Contains(page, `<span class="ln bad" id="L4">`) {
		t.Errorf("the template's line 4 is not marked")
	}
	resp, page = b.get("/ui/templates/acme/huge?hardware=n21")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "exceeded its output budget: output is more than 262144 bytes") || strings.Contains(page, `id="rendered"`) {
		t.Errorf("huge output: %d; want 200 saying the budget is exceeded, no output\n%.2000s", resp.StatusCode, page)
	}
	resp, page = b.get("/ui/templates/acme/missing?hardware=nope")
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(page, "hardware acme/nope not found") {
		t.Errorf("unknown machine: %d; want 404 naming it\n%s", resp.StatusCode, page)
	}
}

func TestJobsPage(t *testing.T) {
	e := newEnv(t)
	e.create(t, hardware("acme", "n1", "52:54:00:0a:00:01", "10.0.1.11", nil))
	e.create(t, hardware("acme", "n2", "52:54:00:0a:00:02", "10.0.1.12", nil))
	for i := range 55 {
		e.create(t, workflow("acme", fmt.Sprintf("w%02d", i), "n1", model.StateSuccess, ""))
	}
	e.create(t, workflow("acme", "x-failed", "n2", model.StateFailed, "<script>alert(3)</script>"))
	e.create(t, workflow("globex", "g1", "n1", model.StateFailed, "globex's"))
	b := e.browser(t)
	b.login("op-token")
	waitPage(t, b, "/ui/jobs?state=FAILED", "x-failed")

	for _, tc := range []struct {
		name, path  string
		n           int
		first, last string
	}{
		{"newest first, 50 a page", "/ui/jobs", 50, "acme/x-failed", "acme/w06"},
		{"second page", "/ui/jobs?page=2", 6, "acme/w05", "acme/w00"},
		{"state", "/ui/jobs?state=FAILED", 1, "acme/x-failed", "acme/x-failed"},
		{"device by name", "/ui/jobs?device=n2", 1, "acme/x-failed", "acme/x-failed"},
		{"device by MAC", "/ui/jobs?device=52-54-00-0A-00-02", 1, "acme/x-failed", "acme/x-failed"},
		{"unknown device", "/ui/jobs?device=n9", 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, page := b.get(tc.path)
			got := rowLinks(page, "/ui/workflows/")
			if resp.StatusCode != http.StatusOK || len(got) != tc.n {
				t.Fatalf("%s: %d, %d rows; want 200, %d: %v", tc.path, resp.StatusCode, len(got), tc.n, got)
			}
			if tc.n > 0 && (got[0] != tc.first || got[len(got)-1] != tc.last) {
				t.Errorf("%s: rows %s … %s; want %s … %s", tc.path, got[0], got[len(got)-1], tc.first, tc.last)
			}
		})
	}
	_, page := b.get("/ui/jobs")
	if strings.Contains(page, "globex") {
		t.Errorf("the jobs page of acme's operator shows globex's job")
	}
	if strings.Contains(page, "<script>alert(3)") || !strings.Contains(page, "&lt;script&gt;alert(3)&lt;/script&gt;") {
		t.Errorf("a job's message is not escaped")
	}
	if !strings.Contains(page, `href="/ui/jobs?page=2" rel="next"`) {
		t.Errorf("the first page does not link the second")
	}
	for _, bad := range []string{"/ui/jobs?state=NONE", "/ui/jobs?page=x", "/ui/jobs?tab=nope"} {
		if resp, _ := b.get(bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s = %d; want 400", bad, resp.StatusCode)
		}
	}
}

func TestBMCJobsTab(t *testing.T) {
	e := newEnv(t)
	on, off := "on", "off"
	job := func(ns, name string, task model.BMCAction, conds ...model.JobCondition) *model.Job {
		return &model.Job{TypeMeta: model.TypeMeta{APIVersion: model.BMCAPIVersion, Kind: model.KindJob},
			ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
			Spec:       model.JobSpec{MachineRef: model.ObjectReference{Name: "bmc-" + name}, Tasks: []model.BMCAction{task}},
			Status:     model.JobStatus{Conditions: conds}}
	}
	e.create(t, job("acme", "power-on", model.BMCAction{PowerAction: &on},
		model.JobCondition{Type: model.ConditionCompleted, Status: model.ConditionTrue}))
	e.create(t, job("acme", "pxe", model.BMCAction{OneTimeBootDeviceAction: &model.OneTimeBootDeviceAction{Devices: []string{"pxe"}}},
		model.JobCondition{Type: model.ConditionFailed, Status: model.ConditionTrue, Message: "<b>bmc said no</b>"}))
	e.create(t, job("globex", "power-off", model.BMCAction{PowerAction: &off}))
	b := e.browser(t)
	b.login("op-token")
	resp, page := b.get("/ui/jobs?tab=bmc")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("BMC jobs = %d", resp.StatusCode)
	}
	for _, want := range []string{"2 BMC jobs", "<td>acme/power-on</td><td>bmc-power-on</td><td>power on</td>", "next boot pxe",
		"&lt;b&gt;bmc said no&lt;/b&gt;", `state-failed">FAILED`, `state-success">SUCCESS`} {
		if !strings.Contains(page, want) {
			t.Errorf("BMC jobs page lacks %q", want)
		}
	}
	if strings.Contains(page, "power-off") || strings.Contains(page, "<b>bmc") {
		t.Errorf("BMC jobs page shows globex's job or unescaped text:\n%s", page)
	}
}

func TestAuditPage(t *testing.T) {
	e := newEnv(t)
	t0 := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	for i := range 60 {
		if err := e.audit.Append(audit.Record{Time: t0.Add(time.Duration(i) * time.Second), Subject: "acme-op", Org: "acme",
			Procedure: "/anvil.v1.HardwareService/Update", Namespace: "acme", Object: fmt.Sprintf("name=n%02d", i), Outcome: "ok", ClientIP: "10.9.0.1"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []audit.Record{
		{Time: t0.Add(time.Hour), Subject: "acme-op", Org: "acme", Procedure: "/anvil.v1.WorkflowService/Reprovision", Namespace: "acme",
			Object: "hardware=<i>n1</i> template=t1", Outcome: "failed_precondition", Message: "busy <b>now</b>", ClientIP: "10.9.0.2"},
		{Time: t0.Add(time.Hour), Subject: "globex-op", Org: "globex", Procedure: "/anvil.v1.HardwareService/Delete", Namespace: "globex",
			Object: "name=g1", Outcome: "ok"},
	} {
		if err := e.audit.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	b := e.browser(t)
	b.login("viewer-token")
	resp, page := b.get("/ui/audit")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `href="/ui/audit">Audit log</a>`) {
		t.Fatalf("audit page for acme's viewer = %d, or no nav link\n%s", resp.StatusCode, page)
	}
	objects := regexp.MustCompile(`<td>acme: ([^<]*(?:&lt;[^<]*)*)</td>`)
	rows := func(page string) []string {
		var out []string
		for _, m := range objects.FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	got := rows(page)
	if len(got) != 50 || got[0] != "hardware=&lt;i&gt;n1&lt;/i&gt; template=t1" || got[1] != "name=n59" || got[49] != "name=n11" {
		t.Errorf("first page: %d rows %v; want 50, the newest first (the Reprovision, n59 … n11)", len(got), got)
	}
	for _, want := range []string{"WorkflowService/Reprovision", "10.9.0.2", "busy &lt;b&gt;now&lt;/b&gt;", "failed_precondition", `href="/ui/audit?page=2" rel="next"`} {
		if !strings.Contains(page, want) {
			t.Errorf("audit page lacks %q", want)
		}
	}
	if strings.Contains(page, "globex") || strings.Contains(page, "<i>n1") || strings.Contains(page, "<b>now") {
		t.Errorf("audit page shows globex's record or unescaped text")
	}
	_, page = b.get("/ui/audit?page=2")
	if got := rows(page); len(got) != 11 || got[0] != "name=n10" || got[10] != "name=n00" || strings.Contains(page, `rel="next"`) {
		t.Errorf("second page: %v; want n10 … n00 and no next page", got)
	}
	if resp, page := b.get("/ui/audit?page=201"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "narrow the filters") {
		t.Errorf("audit page 201 = %d; want 400 saying how far back it goes", resp.StatusCode)
	}
	_, page = b.get("/ui/audit?action=reprovision")
	if got := rows(page); len(got) != 1 {
		t.Errorf("action filter: %v; want the one Reprovision", got)
	}
	_, page = b.get("/ui/audit?object=name%3Dn0&subject=acme-op")
	if got := rows(page); len(got) != 10 {
		t.Errorf("object and subject filter: %d rows; want n00 … n09", len(got))
	}

	// An admin reads every organisation's records.
	admin := e.browser(t)
	admin.login("admin-token")
	if _, page := admin.get("/ui/audit?object=g1"); !strings.Contains(page, "globex-op") {
		t.Errorf("the admin's audit page lacks globex's record")
	}

	// A caller the API does not let read the audit sees why, politely,
	// and no nav link.
	b2 := e.browser(t)
	b2.login("no-org-token")
	resp, page = b2.get("/ui/audit")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, `id="audit-refused">Your role may not read this:`) {
		t.Errorf("audit page for a caller of no organisation = %d; want 403 with the API's refusal\n%s", resp.StatusCode, page)
	}
	if strings.Contains(page, `href="/ui/audit"`) {
		t.Errorf("a caller who may not read the audit log gets the nav link")
	}
}
