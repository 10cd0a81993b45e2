package crds_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/deploy/crds/crdstest"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestAll: every manifest is read, with the group and kind Tinkerbell
// and Rufio serve them under.
func TestAll(t *testing.T) {
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range defs {
		got = append(got, d.Group+"/"+d.Version+" "+d.Kind+" "+d.Plural)
	}
	want := []string{
		"anvil.dev/v1alpha1 BootProfile bootprofiles",
		"bmc.tinkerbell.org/v1alpha1 Job jobs",
		"bmc.tinkerbell.org/v1alpha1 Machine machines",
		"bmc.tinkerbell.org/v1alpha1 Task tasks",
		"tinkerbell.org/v1alpha1 Hardware hardware",
		"tinkerbell.org/v1alpha1 Template templates",
		"tinkerbell.org/v1alpha1 WorkflowRuleSet workflowrulesets",
		"tinkerbell.org/v1alpha1 Workflow workflows",
	}
	if !slices.Equal(got, want) {
		t.Errorf("definitions:\n%q\nwant\n%q", got, want)
	}
}

const ns = "default"

// TestServeTinkerbellObjects installs the definitions into a real API
// server, applies Anvil's examples of each kind, and checks what
// Tinkerbell's users and controllers rely on: objects read back as
// written (unknown fields kept), a Workflow's status written only through
// the status subresource, the printer columns of `kubectl get`, and the
// short names and category in discovery.
func TestServeTinkerbellObjects(t *testing.T) {
	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	byKind := install(t, c, defs)

	root := testtool.ModuleRoot(t)
	var objs []map[string]any
	for _, f := range []string{"hardware.yaml", "template.yaml", "workflow.yaml", "bmc/bmc.yaml", "bmc/job.yaml", "profiles/flatcar.yaml", "enrolment/rulesets.yaml"} {
		for _, o := range readExamples(t, filepath.Join(root, "examples", f)) {
			if _, ok := byKind[o["kind"].(string)]; ok { // not the Secret in bmc.yaml
				objs = append(objs, o)
			}
		}
	}
	// A field neither Anvil nor Tinkerbell knows, as another tool may
	// write: the API server must keep it.
	objs[0]["spec"].(map[string]any)["fromAnotherTool"] = map[string]any{"kept": true, "n": 3.0}
	// Rufio makes a Task of each of a Job's tasks, with its Machine's
	// connection; Anvil's examples have no Task of their own.
	objs = append(objs, taskFor(t, objs))

	seen := map[string]bool{}
	for _, o := range objs {
		d := byKind[o["kind"].(string)]
		seen[d.Kind] = true
		name := o["metadata"].(map[string]any)["name"].(string)
		c.JSON(t, http.MethodPost, d.Path(ns), o, http.StatusCreated)
		got := c.JSON(t, http.MethodGet, d.Path(ns)+"/"+name, nil, http.StatusOK)
		if !reflect.DeepEqual(got["spec"], o["spec"]) {
			t.Errorf("%s %s: spec read back\n%v\nwant\n%v", d.Kind, name, got["spec"], o["spec"])
		}
	}
	for _, d := range defs {
		if !seen[d.Kind] {
			t.Errorf("no example object of kind %s was applied", d.Kind)
		}
	}

	wf := workflowStatus(t, c, byKind["Workflow"])
	printerColumns(t, c, byKind, wf)
	discovery(t, c)
}

// install creates each definition and waits until the API server has
// established it; it returns them by kind.
func install(t *testing.T, c *kubetest.Cluster, defs []crds.Definition) map[string]crds.Definition {
	t.Helper()
	crdstest.Install(t, c, defs)
	byKind := map[string]crds.Definition{}
	for _, d := range defs {
		byKind[d.Kind] = d
	}
	return byKind
}

// readExamples returns the objects of a YAML file, each converted to JSON
// as kubectl sends it.
func readExamples(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		y, err := yaml.Marshal(&doc)
		if err != nil {
			t.Fatal(err)
		}
		js, err := sigsyaml.YAMLToJSON(y)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var o map[string]any
		if err := json.Unmarshal(js, &o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, o)
	}
	return out
}

// taskFor returns the Task Rufio would make of the first task of the
// example Job, on the example Machine.
func taskFor(t *testing.T, objs []map[string]any) map[string]any {
	t.Helper()
	var job, machine map[string]any
	for _, o := range objs {
		switch o["kind"] {
		case "Job":
			job = o
		case "Machine":
			machine = o
		}
	}
	if job == nil || machine == nil {
		t.Fatal("the examples have no Job or no Machine")
	}
	tasks := job["spec"].(map[string]any)["tasks"].([]any)
	return map[string]any{
		"apiVersion": "bmc.tinkerbell.org/v1alpha1",
		"kind":       "Task",
		"metadata":   map[string]any{"name": job["metadata"].(map[string]any)["name"].(string) + "-task-0"},
		"spec": map[string]any{
			"task":       tasks[0],
			"connection": machine["spec"].(map[string]any)["connection"],
		},
	}
}

// workflow is the example Workflow's name and the status the test wrote.
type workflow struct {
	name   string
	status map[string]any
}

// workflowStatus writes a Workflow's status as Tinkerbell's controller
// does, through the status subresource, and checks that the subresource
// is the only way in: an update of the object ignores its status, an
// update of the status ignores the spec.
func workflowStatus(t *testing.T, c *kubetest.Cluster, d crds.Definition) workflow {
	t.Helper()
	list := c.JSON(t, http.MethodGet, d.Path(ns), nil, http.StatusOK)
	items := list["items"].([]any)
	if len(items) != 1 {
		t.Fatalf("%d workflows, want the example's one", len(items))
	}
	obj := items[0].(map[string]any)
	name := obj["metadata"].(map[string]any)["name"].(string)
	path := d.Path(ns) + "/" + name
	status := map[string]any{
		"state":             "RUNNING",
		"templateRendering": "successful",
		"currentState": map[string]any{
			"agentID": "3c:ec:ef:12:34:07", "taskID": "install", "taskName": "install",
			"actionID": "stream-image", "actionName": "stream-image", "state": "RUNNING",
		},
		"tasks": []any{map[string]any{
			"name": "install", "agentID": "3c:ec:ef:12:34:07",
			"actions": []any{map[string]any{
				"name": "stream-image", "image": "quay.io/tinkerbell/actions/image2disk:v1.0.0",
				"timeout": 600.0, "state": "RUNNING", "executionStart": "2026-11-27T21:00:00Z",
			}},
		}},
	}

	// Through the object: the status is dropped.
	obj["status"] = status
	got := c.JSON(t, http.MethodPut, path, obj, http.StatusOK)
	if got["status"] != nil {
		t.Errorf("an update of the object wrote its status: %v", got["status"])
	}

	// Through the status subresource: the status is written, a changed
	// spec is not.
	got["status"] = status
	spec := got["spec"].(map[string]any)
	template := spec["templateRef"]
	spec["templateRef"] = "changed-through-status"
	c.JSON(t, http.MethodPut, path+"/status", got, http.StatusOK)
	got = c.JSON(t, http.MethodGet, path, nil, http.StatusOK)
	if !reflect.DeepEqual(got["status"], status) {
		t.Errorf("status read back\n%v\nwant\n%v", got["status"], status)
	}
	if tr := got["spec"].(map[string]any)["templateRef"]; tr != template {
		t.Errorf("an update of the status changed spec.templateRef to %v", tr)
	}
	return workflow{name: name, status: status}
}

// table is the part of a meta.k8s.io/v1 Table the test reads.
type table struct {
	Kind              string `json:"kind"`
	ColumnDefinitions []struct {
		Name     string `json:"name"`
		Priority int    `json:"priority"`
	} `json:"columnDefinitions"`
	Rows []struct {
		Cells []any `json:"cells"`
	} `json:"rows"`
}

// getTable lists path as kubectl get does, as a Table.
func getTable(t *testing.T, c *kubetest.Cluster, path string) table {
	t.Helper()
	status, b := c.Do(t, http.MethodGet, path, nil, "application/json;as=Table;v=v1;g=meta.k8s.io")
	if status != http.StatusOK {
		t.Fatalf("GET %s as a Table: status %d: %s", path, status, b)
	}
	var tb table
	if err := json.Unmarshal(b, &tb); err != nil {
		t.Fatal(err)
	}
	if tb.Kind != "Table" {
		t.Fatalf("GET %s as a Table: kind %q", path, tb.Kind)
	}
	return tb
}

// printerColumns: `kubectl get workflows` shows Tinkerbell's columns
// filled from the Workflow and the status written; Hardware and Template
// show their State.
func printerColumns(t *testing.T, c *kubetest.Cluster, byKind map[string]crds.Definition, wf workflow) {
	t.Helper()
	tb := getTable(t, c, byKind["Workflow"].Path(ns))
	var names []string
	wide := map[string]bool{}
	for _, col := range tb.ColumnDefinitions {
		names = append(names, col.Name)
		wide[col.Name] = col.Priority > 0
	}
	// No Age: a CRD that declares columns gets only those (and Name),
	// as Tinkerbell's do.
	wantNames := []string{"Name", "Template", "State", "Task", "Action", "Agent", "Hardware", "Template-Rendering"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("workflow columns %q, want %q", names, wantNames)
	}
	if !wide["Task"] || !wide["Template-Rendering"] || wide["State"] {
		t.Errorf("columns shown only with -o wide: %v, want Task and Template-Rendering", wide)
	}
	if len(tb.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(tb.Rows))
	}
	cur := wf.status["currentState"].(map[string]any)
	want := map[string]any{
		"Name": wf.name, "Template": "debian-raw", "State": "RUNNING", "Task": cur["taskName"],
		"Action": cur["actionName"], "Agent": cur["agentID"], "Hardware": "rack1-node07",
		"Template-Rendering": "successful",
	}
	for i, name := range names {
		if w, ok := want[name]; ok && tb.Rows[0].Cells[i] != w {
			t.Errorf("column %s: %v, want %v", name, tb.Rows[0].Cells[i], w)
		}
	}
	for _, kind := range []string{"Hardware", "Template"} {
		tb := getTable(t, c, byKind[kind].Path(ns))
		if len(tb.ColumnDefinitions) < 2 || tb.ColumnDefinitions[1].Name != "State" {
			t.Errorf("%s columns %v, want Name, State, ...", kind, tb.ColumnDefinitions)
		}
	}
}

// discovery: kubectl finds the kinds by their short names (`kubectl get
// wf`) and all of them by category (`kubectl get tinkerbell`).
func discovery(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	want := map[string]string{"hardware": "hw", "templates": "tpl", "workflows": "wf", "jobs": "j", "tasks": "t", "machines": "", "workflowrulesets": "wrs"}
	for _, gv := range []string{"tinkerbell.org/v1alpha1", "bmc.tinkerbell.org/v1alpha1"} {
		var list struct {
			Resources []struct {
				Name       string   `json:"name"`
				ShortNames []string `json:"shortNames"`
				Categories []string `json:"categories"`
			} `json:"resources"`
		}
		status, b := c.Do(t, http.MethodGet, "/apis/"+gv, nil, "application/json")
		if status != http.StatusOK {
			t.Fatalf("GET /apis/%s: status %d: %s", gv, status, b)
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		for _, r := range list.Resources {
			short, ok := want[r.Name]
			if !ok {
				continue // a subresource such as workflows/status
			}
			delete(want, r.Name)
			if short != "" && !slices.Equal(r.ShortNames, []string{short}) {
				t.Errorf("%s: short names %q, want [%s]", r.Name, r.ShortNames, short)
			}
			if !slices.Contains(r.Categories, "tinkerbell") {
				t.Errorf("%s: categories %q, want tinkerbell", r.Name, r.Categories)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("not in discovery: %v", want)
	}
}
