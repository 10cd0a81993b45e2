package workflow

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	k8syaml "sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/tmplbudget"
)

func loadYAML[T any](t testing.TB, path string) *T {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := new(T)
	if err := k8syaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func exampleWorkflow() *model.Workflow {
	return &model.Workflow{
		ObjectMeta: model.ObjectMeta{Name: "wf1", Namespace: "default"},
		Spec: model.WorkflowSpec{
			TemplateRef: "debian-raw",
			HardwareRef: "rack1-node07",
			HardwareMap: map[string]string{"device_1": "3c:ec:ef:12:34:07"},
		},
	}
}

func templateOf(data string) *model.Template {
	return &model.Template{ObjectMeta: model.ObjectMeta{Name: "t", Namespace: "default"},
		Spec: model.TemplateSpec{Data: &data}}
}

func TestRenderTinkerbellExample(t *testing.T) {
	tmpl := loadYAML[model.Template](t, "testdata/template.yaml")
	hw := loadYAML[model.Hardware](t, "testdata/hardware.yaml")
	def, err := Render(t.Context(), tmpl, exampleWorkflow(), hw)
	if err != nil {
		t.Fatal(err)
	}
	if def.Name != "debian-raw" || def.GlobalTimeout != 1200 || len(def.Tasks) != 1 {
		t.Fatalf("def = %+v", def)
	}
	task := def.Tasks[0]
	if task.Worker != "3c:ec:ef:12:34:07" || len(task.Actions) != 3 {
		t.Fatalf("task = %+v", task)
	}
	a := task.Actions
	checks := []struct{ got, want string }{
		{a[0].Environment["DEST_DISK"], "/dev/nvme0n1"},
		{a[0].Environment["COMPRESSED"], "true"}, // yaml.v3 decodes a bool scalar into a string
		{a[1].Environment["DEST_DISK"], "/dev/nvme0n1p1"},
		{a[1].Environment["CONTENTS"], "rack1-node07"},
		{a[1].Environment["MODE"], "0644"},
		{a[2].Pid, "host"},
		{strings.Join(a[2].Command, " "), "reboot"},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("check %d: got %q, want %q", i, c.got, c.want)
		}
	}
	if a[0].Timeout != 600 || a[1].Timeout != 90 {
		t.Errorf("timeouts %d %d", a[0].Timeout, a[1].Timeout)
	}
}

func TestFormatPartition(t *testing.T) {
	for _, c := range []struct {
		dev  string
		n    any
		want string
		err  bool
	}{
		{"/dev/sda", 1, "/dev/sda1", false},
		{"/dev/vdb", 3, "/dev/vdb3", false},
		{"/dev/nvme0n1", 1, "/dev/nvme0n1p1", false},
		{"/dev/mmcblk0", 2, "/dev/mmcblk0p2", false},
		{"/dev/sda", int64(2), "/dev/sda2", false},
		{"/dev/sda", "4", "/dev/sda4", false},
		{"/dev/sda", 0, "", true},
		{"", 1, "", true},
		{"/dev/sda", "x", "", true},
	} {
		got, err := formatPartition(c.dev, c.n)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("formatPartition(%q, %v) = %q, %v; want %q, err=%v", c.dev, c.n, got, err, c.want, c.err)
		}
	}
}

func TestNetmaskToPrefixLength(t *testing.T) {
	for _, c := range []struct {
		mask string
		want int
		err  bool
	}{
		{"255.255.255.0", 24, false},
		{"255.255.0.0", 16, false},
		{"255.255.255.255", 32, false},
		{"0.0.0.0", 0, false},
		{"255.255.255.192", 26, false},
		{"255.0.255.0", 0, true},
		{"255.255.255.1", 0, true},
		{"not-a-mask", 0, true},
		{"ffff::", 0, true},
	} {
		got, err := netmaskToPrefixLength(c.mask)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("netmaskToPrefixLength(%q) = %d, %v; want %d, err=%v", c.mask, got, err, c.want, c.err)
		}
	}
}

const minimalHead = "version: \"0.1\"\nname: x\nglobal_timeout: 60\ntasks:\n"

func TestRenderErrors(t *testing.T) {
	hw := loadYAML[model.Hardware](t, "testdata/hardware.yaml")
	big := minimalHead + `  - name: t
    worker: w
    actions:
      - name: a
        image: i
        environment:
          X: "{{ repeat 300000 "x" }}"
`
	for _, c := range []struct {
		name string
		data string
		wf   func(*model.Workflow)
		want string
	}{
		{"missing key", minimalHead + "  - name: t\n    worker: \"{{.device_2}}\"\n    actions: [{name: a, image: i}]\n",
			nil, `map has no entry for key "device_2"`},
		{"output cap", big, nil, "output budget: output is more than 262144 bytes"},
		{"dup task", minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i}]}\n  - {name: t, worker: w, actions: [{name: a, image: i}]}\n",
			nil, `duplicate task name "t"`},
		{"dup action", minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i}, {name: a, image: j}]}\n",
			nil, `duplicate action name "a"`},
		{"no tasks", "version: \"0.1\"\nname: x\ntasks: []\n", nil, "no tasks"},
		{"no image", minimalHead + "  - {name: t, worker: w, actions: [{name: a}]}\n", nil, `action "a" has no image`},
		{"empty worker", minimalHead + "  - {name: t, worker: \"\", actions: [{name: a, image: i}]}\n", nil, "empty worker"},
		{"negative timeout", minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i, timeout: -1}]}\n", nil, "negative"},
		{"negative retries", minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i, retries: -2}]}\n", nil, "negative"},
		{"unknown runtime", minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i, runtime: docker}]}\n", nil,
			`action "a": runtime "docker": want container, native or nothing`},
		{"reserved key hardware", minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i}]}\n",
			func(wf *model.Workflow) { wf.Spec.HardwareMap["hardware"] = "x" }, `hardwareMap key "hardware" is reserved`},
		{"reserved key Hardware", minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i}]}\n",
			func(wf *model.Workflow) { wf.Spec.HardwareMap["Hardware"] = "x" }, `hardwareMap key "Hardware" is reserved`},
		{"env not available", minimalHead + "  - {name: t, worker: '{{ env \"HOME\" }}', actions: [{name: a, image: i}]}\n",
			nil, `function "env" not defined`},
		{"expandenv not available", minimalHead + "  - {name: t, worker: '{{ expandenv \"$HOME\" }}', actions: [{name: a, image: i}]}\n",
			nil, `function "expandenv" not defined`},
		{"bad yaml", "tasks: [\n", nil, "parse rendered template as YAML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wf := exampleWorkflow()
			if c.wf != nil {
				c.wf(wf)
			}
			_, err := Render(t.Context(), templateOf(c.data), wf, hw)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v; want it to contain %q", err, c.want)
			}
			if c.name == "output cap" && !errors.Is(err, tmplbudget.ErrExceeded) {
				t.Fatalf("err = %v; want tmplbudget.ErrExceeded", err)
			}
		})
	}
}

func TestRenderFunctions(t *testing.T) {
	data := minimalHead + `  - name: t
    worker: "{{ .device_1 | upper }}"
    actions:
      - name: a
        image: i
        environment:
          DEF: '{{ .nothing_here | default "fallback" }}'
          PREFIX: '{{ netmaskToPrefixLength "255.255.255.0" }}'
          YAML: '{{ toYaml (fromYaml "a: 1") }}'
          MAC: '{{ (index .Hardware.Interfaces 0).DHCP.MAC }}'
          HOST: '{{ .Hardware.Metadata.Instance.Hostname }}'
          USERDATA: '{{ .Hardware.UserData | trim }}'
          DISK: '{{ (index .hardware.disks 0).device }}'
`
	wf := exampleWorkflow()
	wf.Spec.HardwareMap["nothing_here"] = ""
	hw := loadYAML[model.Hardware](t, "testdata/hardware.yaml")
	def, err := Render(t.Context(), templateOf(data), wf, hw)
	if err != nil {
		t.Fatal(err)
	}
	if def.Tasks[0].Worker != "3C:EC:EF:12:34:07" {
		t.Errorf("worker %q", def.Tasks[0].Worker)
	}
	env := def.Tasks[0].Actions[0].Environment
	want := map[string]string{"DEF": "fallback", "PREFIX": "24", "YAML": "a: 1", "MAC": "3c:ec:ef:12:34:07",
		"HOST": "rack1-node07", "USERDATA": "#cloud-config hostname: rack1-node07" /* single-quoted YAML folds the newline */, "DISK": "/dev/nvme0n1"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

// TestRenderHardwareSpellings: `.hardware` is the whole Hardware as
// Tinkerbell renders it (spec, metadata, status with the agent's
// inventory), the spec's fields are also at its top level as Anvil had
// them, and `.Hardware.Status.Attributes` reads the inventory with Go
// names; a template that asks for an inventory the machine never sent
// fails rather than rendering an empty value.
func TestRenderHardwareSpellings(t *testing.T) {
	data := minimalHead + `  - name: t
    worker: "{{ .device_1 }}"
    actions:
      - name: a
        image: i
        environment:
          UPSTREAM_HOST: '{{ .hardware.spec.metadata.instance.hostname }}'
          ANVIL_HOST: '{{ .hardware.metadata.instance.hostname }}'
          NAME: '{{ .hardware.metadata.name }}'
          UPSTREAM_DISK: '{{ (index .hardware.spec.disks 0).device }}'
          CORES: '{{ .hardware.status.attributes.cpu.totalCores }}'
          GO_CORES: '{{ .Hardware.Status.Attributes.CPU.TotalCores }}'
          SERIAL: '{{ .Hardware.Status.Attributes.Product.SerialNumber }}'
`
	wf := exampleWorkflow()
	hw := loadYAML[model.Hardware](t, "testdata/hardware.yaml")
	hw.Status.Attributes = &model.Attributes{CPU: &model.CPUAttributes{TotalCores: 48}, Product: &model.Product{SerialNumber: "CZ2D1234"}}
	def, err := Render(t.Context(), templateOf(data), wf, hw)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"UPSTREAM_HOST": "rack1-node07", "ANVIL_HOST": "rack1-node07", "NAME": hw.Name,
		"UPSTREAM_DISK": "/dev/nvme0n1", "CORES": "48", "GO_CORES": "48", "SERIAL": "CZ2D1234"}
	env := def.Tasks[0].Actions[0].Environment
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}

	hw.Status.Attributes = nil
	for _, expr := range []string{"{{ .hardware.status.attributes.cpu.totalCores }}", "{{ .Hardware.Status.Attributes.CPU.TotalCores }}"} {
		_, err := Render(t.Context(), templateOf(minimalHead+"  - {name: t, worker: '"+expr+"', actions: [{name: a, image: i}]}\n"), wf, hw)
		if err == nil {
			t.Errorf("%s rendered without an inventory", expr)
		}
	}
}

func TestRenderWithoutHardware(t *testing.T) {
	wf := exampleWorkflow()
	wf.Spec.HardwareRef = ""
	def, err := Render(t.Context(), templateOf(minimalHead+"  - {name: t, worker: '{{.device_1}}', actions: [{name: a, image: i}]}\n"), wf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if def.Tasks[0].Worker != "3c:ec:ef:12:34:07" {
		t.Errorf("worker %q", def.Tasks[0].Worker)
	}
	_, err = Render(t.Context(), templateOf(minimalHead+"  - {name: t, worker: '{{.hardware.metadata}}', actions: [{name: a, image: i}]}\n"), wf, nil)
	if err == nil || !strings.Contains(err.Error(), "map has no entry for key") {
		t.Fatalf("err = %v", err)
	}
}

func TestCheckTemplateStatic(t *testing.T) {
	data := `version: "0.1"
name: x
tasks:
  - name: install
    worker: "{{.device_1}}"
    actions:
      - name: a
        image: i
        environment:
          X: {{ if .foo }}
            {{ .foo }}{{ end }}
      - name: "{{ .dyn }}"
        image: i
      - name: "{{ .dyn }}"
        image: i
      - name: a
        image: j
  - name: install
    worker: w
    actions:
      - name: a
        image: i
`
	errs := CheckTemplateStatic(data)
	if len(errs) != 2 {
		t.Fatalf("errs = %v", errs)
	}
	if !strings.Contains(errs[0].Error(), `line 16: duplicate action name "a"`) || !strings.Contains(errs[0].Error(), "line 7") {
		t.Errorf("errs[0] = %v", errs[0])
	}
	if !strings.Contains(errs[1].Error(), `line 18: duplicate task name "install"`) {
		t.Errorf("errs[1] = %v", errs[1])
	}
	if errs := CheckTemplateStatic("tasks:\n  - {{ .x }}: [\n"); errs != nil {
		t.Errorf("unparsable: %v", errs)
	}
	tmpl := loadYAML[model.Template](t, "testdata/template.yaml")
	if errs := CheckTemplateStatic(*tmpl.Spec.Data); errs != nil {
		t.Errorf("example: %v", errs)
	}
}

// TestRenderConcurrentSharedTemplate: renders of one template share its
// parsed form (parseTemplate's cache); run at once with different data,
// each gets its own workers, and the race detector sees no shared write.
func TestRenderConcurrentSharedTemplate(t *testing.T) {
	tmpl := templateOf(minimalHead + "  - name: t\n    worker: \"{{.device_1}}\"\n    actions: [{name: a, image: i}]\n")
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			wf := exampleWorkflow()
			want := fmt.Sprintf("02:00:00:00:00:%02x", i)
			wf.Spec.HardwareMap = map[string]string{"device_1": want}
			def, err := Render(t.Context(), tmpl, wf, nil)
			if err != nil || def.Tasks[0].Worker != want {
				t.Errorf("render %d: %+v, %v; want worker %s", i, def, err, want)
			}
		})
	}
	wg.Wait()
	if _, err := Render(t.Context(), templateOf(minimalHead+"  - name: t\n    worker: \"{{.device_2}}\"\n    actions: [{name: a, image: i}]\n"),
		exampleWorkflow(), nil); err == nil {
		t.Error("a template naming a missing key rendered: missingkey=error lost with the cache")
	}
}

// TestCheckTemplateStaticRefusesUnrunnable: what can never render is
// refused at apply time, at its line: a syntax error, an unknown function,
// a range that could never finish.
func TestCheckTemplateStaticRefusesUnrunnable(t *testing.T) {
	for _, c := range []struct{ name, data, want string }{
		{"range over a huge literal", minimalHead + "  - name: t\n    worker: '{{ range 1000000000000 }}{{ end }}'\n",
			"line 6: template exceeded its steps budget: range over 1000000000000"},
		{"syntax", minimalHead + "  - name: '{{ .x '\n", "line 5: "},
		{"unknown function", minimalHead + "\n  - name: '{{ env \"HOME\" }}'\n", `line 6: function "env" not defined`},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := CheckTemplateStatic(c.data)
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
				t.Fatalf("CheckTemplateStatic = %v; want one error containing %q", errs, c.want)
			}
			var se *StaticError
			if !errors.As(errs[0], &se) {
				t.Errorf("error %v is a %T; want a *StaticError (with its line)", errs[0], errs[0])
			}
		})
	}
}

// TestRenderBudget: the probes that spun a core forever in the workflow
// renderer fail with the budget they hit, leaving nothing running.
func TestRenderBudget(t *testing.T) {
	wf := exampleWorkflow()
	wf.Spec.HardwareMap["n"] = "1000000000000"
	for _, c := range []struct{ name, expr, limit string }{
		{"range over a computed count", `{{ range (atoi .n) }}{{ end }}`, tmplbudget.LimitSteps},
		{"nested ranges", `{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}`, tmplbudget.LimitSteps},
		{"repeat", `{{ repeat (atoi .n) "x" }}`, tmplbudget.LimitValue},
		{"until", `{{ until (atoi .n) }}`, tmplbudget.LimitValue},
		{"untilStep", `{{ untilStep 0 (atoi .n) 1 }}`, tmplbudget.LimitValue},
		{"recursive template", `{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}`, tmplbudget.LimitDepth},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := minimalHead + "  - {name: t, worker: w, actions: [{name: a, image: i, command: ['" + c.expr + "']}]}\n"
			// The time budget is not under test: a race-instrumented run
			// on a busy machine must not reach it first.
			b := Budget
			b.Time = time.Hour
			_, err := render(t.Context(), b, templateOf(data), wf, nil)
			var e *tmplbudget.ExceededError
			if !errors.As(err, &e) || e.Limit != c.limit || !strings.Contains(err.Error(), c.limit+" budget") {
				t.Fatalf("Render = %v; want the %s budget exceeded", err, c.limit)
			}
			if g := executingTemplates(); len(g) > 0 {
				t.Errorf("a template is still executing:\n%s", strings.Join(g, "\n\n"))
			}
		})
	}
}

// executingTemplates returns the stacks of goroutines inside a template
// execution.
func executingTemplates() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "text/template.(*state)") {
			out = append(out, g)
		}
	}
	return out
}

// TestTemplateActions: the actions whose image is written out are listed
// with their task, runtime and line; a computed image is left out.
func TestTemplateActions(t *testing.T) {
	data := `version: "0.1"
name: t
tasks:
  - name: install
    worker: "{{.device_1}}"
    actions:
      - name: stream
        image: quay.io/tinkerbell/actions/image2disk:v1.0.0
      - name: custom
        image: "{{ .image }}"
      - name: tool
        runtime: container
        image: registry.lab/tools/fw:1
`
	got := TemplateActions(data)
	want := []StaticAction{
		{Task: "install", Name: "stream", Image: "quay.io/tinkerbell/actions/image2disk:v1.0.0", Line: 8},
		{Task: "install", Name: "tool", Image: "registry.lab/tools/fw:1", Runtime: "container", Line: 13},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("TemplateActions = %+v; want %+v", got, want)
	}
}
