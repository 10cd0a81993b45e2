package crds_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/internal/crdgen"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestManifestsAreGenerated: each checked-in manifest is what the
// generator writes from the model today, so a field added to the model
// without `go generate ./deploy/crds` fails here instead of being pruned
// or refused by the API server.
func TestManifestsAreGenerated(t *testing.T) {
	docs, err := crdgen.ReadDocs(filepath.Join(testtool.ModuleRoot(t), "internal", "model"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := crdgen.Generate(f, b, docs)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s differs from what the generator writes from internal/model: run `go generate ./deploy/crds`", f)
		}
	}
}

// schemaOf returns the openAPIV3Schema of d's one version, as the
// manifest declares it.
func schemaOf(t *testing.T, d crds.Definition) *crdgen.Schema {
	t.Helper()
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema *crdgen.Schema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(d.JSON, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema.OpenAPIV3Schema == nil {
		t.Fatalf("%s: want one version with a schema", d.File)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// fields flattens s into field path → "type[/format]", in the notation
// of testdata/tinkerbell-v1alpha1-fields.txt: [] steps into a list's
// items, {} into a map's values.
func fields(s *crdgen.Schema, path string, out map[string]string) {
	typ := s.Type
	if s.IntOrString {
		typ = "int-or-string"
	}
	if s.Format != "" {
		typ += "/" + s.Format
	}
	out[path] = typ
	for name, p := range s.Properties {
		fields(p, path+"."+name, out)
	}
	if s.Items != nil {
		fields(s.Items, path+"[]", out)
	}
	if s.AdditionalProperties != nil {
		fields(s.AdditionalProperties, path+"{}", out)
	}
}

// TestSchemaIsStructural: every declared field has a type, except where
// Kubernetes allows none (int-or-string, or a value kept as written),
// and every object keeps unknown fields: what the API server requires of
// a structural schema, and what keeps Anvil from losing a field it does
// not model. The API server test below installs them; this names the
// field when one is wrong.
func TestSchemaIsStructural(t *testing.T) {
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		var walk func(s *crdgen.Schema, path string)
		walk = func(s *crdgen.Schema, path string) {
			if s.Type == "" && !s.IntOrString && !s.PreserveUnknown {
				t.Errorf("%s: %s has no type", d.Kind, path)
			}
			if s.Type == "object" && s.AdditionalProperties == nil && !s.PreserveUnknown {
				t.Errorf("%s: object %s does not keep unknown fields", d.Kind, path)
			}
			for name, p := range s.Properties {
				walk(p, path+"."+name)
			}
			if s.Items != nil {
				walk(s.Items, path+"[]")
			}
			if s.AdditionalProperties != nil {
				walk(s.AdditionalProperties, path+"{}")
			}
		}
		root := schemaOf(t, d)
		for _, part := range []string{"spec", "status"} {
			if root.Properties[part] == nil {
				t.Errorf("%s: no %s in the schema", d.Kind, part)
				continue
			}
			walk(root.Properties[part], part)
		}
	}
}

// knownGaps are the parts of Tinkerbell's schema Anvil's does not type as
// Tinkerbell's does, each with why. A path covers the fields under it.
// Every one is kept as written (the objects around it keep unknown
// fields); the test fails if a gap closes, so the list stays true.
var knownGaps = map[string]string{
	"Hardware spec.resources{}": "Tinkerbell's values are resource quantities (int-or-string); Anvil's model reads them as strings " +
		"(map[string]string), so a number would make the Hardware unreadable to Anvil: the API server refusing it at apply is the better failure",
	"Hardware spec.metadata.custom.":               "free-form in Anvil's model (map[string]any): its members are kept as written, not typed",
	"Hardware spec.metadata.instance.storage.":     "free-form in Anvil's model (rootio reads it, Anvil passes it on): kept as written, not typed",
	"Hardware status.attributes":                   "the out-of-band inventory Tinkerbell's discovery writes; Anvil writes its inventory to an annotation (tinkerbell.org/agent-attributes), kept as written, not typed",
	"Machine spec.connection.providerOptions.rpc.": "Rufio's webhook provider, which Anvil does not drive: free-form in the model (map[string]any), kept as written, not typed",
	"Task spec.connection.providerOptions.rpc.":    "as Machine's",
}

// gapOf returns the known gap covering kind's path, or "".
func gapOf(kind, path string) string {
	key := kind + " " + path
	for g := range knownGaps {
		if key == g || strings.HasPrefix(key, g) && (strings.HasSuffix(g, ".") || strings.HasPrefix(key[len(g):], ".") || strings.HasPrefix(key[len(g):], "[") || strings.HasPrefix(key[len(g):], "{")) {
			return g
		}
	}
	return ""
}

// TestTinkerbellFields: every field of Tinkerbell's (and Rufio's)
// v1alpha1 schemas is in Anvil's with the same type, but for the known
// gaps: so an object Tinkerbell's API server takes, Anvil's takes too,
// and `kubectl explain` shows the same fields.
func TestTinkerbellFields(t *testing.T) {
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	anvil := map[string]map[string]string{}
	for _, d := range defs {
		anvil[d.Kind] = map[string]string{}
		root := schemaOf(t, d)
		for _, part := range []string{"spec", "status"} {
			fields(root.Properties[part], part, anvil[d.Kind])
		}
	}
	f, err := os.Open(filepath.Join("testdata", "tinkerbell-v1alpha1-fields.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	used := map[string]bool{}
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Fields(line)
		if len(parts) != 3 {
			t.Fatalf("bad line %q", line)
		}
		kind, path, want := parts[0], parts[1], parts[2]
		n++
		have, ok := anvil[kind][path]
		if ok && sameType(have, want) {
			continue
		}
		if g := gapOf(kind, path); g != "" {
			used[g] = true
			continue
		}
		if !ok {
			t.Errorf("%s %s (%s): not in Anvil's schema", kind, path, want)
		} else {
			t.Errorf("%s %s: Anvil's type %s, Tinkerbell's %s", kind, path, have, want)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 500 {
		t.Fatalf("%d fields read; the list is incomplete", n)
	}
	for g := range knownGaps {
		if !used[g] {
			t.Errorf("known gap %q: Anvil's schema matches Tinkerbell's there now; remove it from knownGaps", g)
		}
	}
}

// sameType compares types, and formats where a format is checked by the
// API server and changes what it accepts (date-time); int32/int64 and
// uri are not enforced there.
func sameType(have, want string) bool {
	ht, hf, _ := strings.Cut(have, "/")
	wt, wf, _ := strings.Cut(want, "/")
	if ht != wt {
		return false
	}
	return (hf == "date-time") == (wf == "date-time")
}

// TestAPIServerEnforcesSchema installs the definitions into a real API
// server and checks what declaring the fields changed: a wrong type is
// refused with the field named, a field Anvil does not model is kept as
// written (in spec, in status, inside a list's element), and the
// group's OpenAPI (what `kubectl explain` reads) lists the fields.
func TestAPIServerEnforcesSchema(t *testing.T) {
	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	byKind := install(t, c, defs)

	refused := []struct {
		kind, field string
		spec        map[string]any
	}{
		{"Workflow", "spec.templateRef", map[string]any{"templateRef": 5, "hardwareRef": "hw"}},
		{"Hardware", "spec.interfaces", map[string]any{"interfaces": "x"}},
		{"Hardware", "spec.interfaces[0].dhcp.lease_time", map[string]any{"interfaces": []any{map[string]any{"dhcp": map[string]any{"mac": "3c:ec:ef:12:34:07", "lease_time": "a day"}}}}},
		{"Machine", "spec.connection.port", map[string]any{"connection": map[string]any{"host": "10.0.0.9", "port": "623", "authSecretRef": map[string]any{"name": "bmc"}}}},
		{"BootProfile", "spec.kernelArgs", map[string]any{"kernel": "/assets/vmlinuz", "kernelArgs": "console=ttyS0"}},
	}
	for i, r := range refused {
		d := byKind[r.kind]
		obj := map[string]any{
			"apiVersion": d.Group + "/" + d.Version, "kind": r.kind,
			"metadata": map[string]any{"name": "wrong-type-" + string(rune('a'+i))},
			"spec":     r.spec,
		}
		status, b := c.Do(t, http.MethodPost, d.Path(ns), obj, "application/json")
		if status != http.StatusUnprocessableEntity {
			t.Errorf("%s with a wrong %s: status %d, want 422: %s", r.kind, r.field, status, b)
			continue
		}
		t.Logf("%s with a wrong %s: %s", r.kind, r.field, b)
		if !bytes.Contains(b, []byte(r.field)) {
			t.Errorf("%s with a wrong %s: the refusal does not name the field: %s", r.kind, r.field, b)
		}
	}

	// Fields nobody models, where Anvil's schema declares objects: kept.
	hw := byKind["Hardware"]
	spec := map[string]any{
		"fromAnotherTool": map[string]any{"kept": true, "n": 3.0},
		"interfaces": []any{map[string]any{
			"vendorNIC": map[string]any{"firmware": "1.2"},
			"dhcp": map[string]any{
				"mac": "3c:ec:ef:12:34:07", "lease_time": 86400.0, "futureOption": "x",
				"ip": map[string]any{"address": "10.0.0.7", "prefix": 24.0},
			},
			"netboot": map[string]any{"allowPXE": true, "secureBoot": map[string]any{"enabled": true}},
		}},
		"metadata": map[string]any{"custom": map[string]any{"rack": "r1", "u": 7.0, "tags": []any{"a"}}},
	}
	obj := map[string]any{
		"apiVersion": hw.Group + "/" + hw.Version, "kind": "Hardware",
		"metadata": map[string]any{"name": "unknown-fields"},
		"spec":     spec,
	}
	got := c.JSON(t, http.MethodPost, hw.Path(ns), obj, http.StatusCreated)
	if !reflect.DeepEqual(got["spec"], spec) {
		t.Errorf("Hardware spec read back\n%v\nwant\n%v", got["spec"], spec)
	}
	status := map[string]any{"state": "active", "attributes": map[string]any{"cpu": map[string]any{"cores": 8.0}}}
	got["status"] = status
	c.JSON(t, http.MethodPut, hw.Path(ns)+"/unknown-fields/status", got, http.StatusOK)
	got = c.JSON(t, http.MethodGet, hw.Path(ns)+"/unknown-fields", nil, http.StatusOK)
	if !reflect.DeepEqual(got["status"], status) {
		t.Errorf("Hardware status read back\n%v\nwant\n%v", got["status"], status)
	}

	openAPIListsFields(t, c)
}

// openAPIBound keeps the wait for the API server to publish the CRDs'
// OpenAPI (it does so asynchronously after they are established) from
// hanging the test; it measures nothing.
const openAPIBound = time.Minute

// openAPIListsFields: the group's OpenAPI v3, which `kubectl explain`
// reads, declares Workflow's status fields with their types and
// descriptions.
func openAPIListsFields(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), openAPIBound)
	defer cancel()
	var last string
	for {
		var doc struct {
			Components struct {
				Schemas map[string]*crdgen.Schema `json:"schemas"`
			} `json:"components"`
		}
		status, b := c.Do(t, http.MethodGet, "/openapi/v3/apis/tinkerbell.org/v1alpha1", nil, "application/json")
		if status == http.StatusOK {
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			if wf := doc.Components.Schemas["org.tinkerbell.v1alpha1.Workflow"]; wf != nil && wf.Properties["status"] != nil {
				st := wf.Properties["status"]
				got := map[string]string{}
				fields(st, "status", got)
				for path, typ := range map[string]string{
					"status.state": "string", "status.currentState.agentID": "string",
					"status.tasks[].actions[].timeout":        "integer/int64",
					"status.tasks[].actions[].executionStart": "string/date-time",
				} {
					if got[path] != typ {
						t.Errorf("OpenAPI v3: Workflow %s is %q, want %q", path, got[path], typ)
					}
				}
				if st.Properties["history"] == nil || st.Properties["history"].Description == "" {
					t.Errorf("OpenAPI v3: Workflow status.history has no description")
				}
				return
			}
			last = "no Workflow status in the document"
		} else {
			last = string(b)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GET /openapi/v3/apis/tinkerbell.org/v1alpha1: Workflow not published within %v: %.300s", openAPIBound, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestAPIServerTakesExamples: every object of a served kind in Anvil's
// examples and in internal/model's testdata (Hardware with every field
// Tinkerbell documents, Rufio's objects, a `kubectl get -o yaml` export
// of a Tinkerbell cluster) is created as written, spec and status, with
// the declared schema: declaring the fields refused none of them and
// pruned nothing.
func TestAPIServerTakesExamples(t *testing.T) {
	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	byKind := install(t, c, defs)
	root := testtool.ModuleRoot(t)
	var files []string
	for _, pattern := range []string{"examples/*.yaml", "examples/*/*.yaml", "internal/model/testdata/*.yaml", "internal/model/testdata/*/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	n, withStatus := 0, 0
	for _, f := range files {
		for _, o := range expandLists(readExamples(t, f)) {
			kind, _ := o["kind"].(string)
			d, ok := byKind[kind]
			if !ok || o["apiVersion"] != d.Group+"/"+d.Version {
				continue // a Secret, a v1alpha2 object, another group's
			}
			n++
			// The name is made unique (files reuse names) and the
			// namespace and server-set metadata of exports dropped.
			name := "ex-" + strings.ToLower(d.Kind) + "-" + strconv.Itoa(n)
			o["metadata"] = map[string]any{"name": name}
			where := filepath.Base(f) + " " + d.Kind
			got := c.JSON(t, http.MethodPost, d.Path(ns), o, http.StatusCreated)
			if !reflect.DeepEqual(got["spec"], o["spec"]) {
				t.Errorf("%s: spec read back\n%v\nwant\n%v", where, got["spec"], o["spec"])
			}
			if o["status"] == nil {
				continue
			}
			withStatus++
			got["status"] = o["status"]
			got = c.JSON(t, http.MethodPut, d.Path(ns)+"/"+name+"/status", got, http.StatusOK)
			if !reflect.DeepEqual(got["status"], o["status"]) {
				t.Errorf("%s: status read back\n%v\nwant\n%v", where, got["status"], o["status"])
			}
		}
	}
	t.Logf("%d objects created, %d with a status", n, withStatus)
	if n < 15 {
		t.Errorf("%d objects created; the examples were not found", n)
	}
}

// expandLists replaces each kind: List by its items.
func expandLists(objs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o["kind"] != "List" {
			out = append(out, o)
			continue
		}
		items, _ := o["items"].([]any)
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}
