package model

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// parseFile parses a manifest file from testdata or examples.
func parseFile(t *testing.T, path string) *ParseResult {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ParseManifests(path, data)
	if err != nil {
		t.Fatalf("ParseManifests(%s): %v", path, err)
	}
	return res
}

// objectsJSON encodes the parsed objects, for comparing two parses.
func objectsJSON(t *testing.T, docs []Document) string {
	t.Helper()
	var objs []Object
	for _, d := range docs {
		objs = append(objs, d.Object)
	}
	b, err := json.Marshal(objs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// examples is the three example files as one multi-document manifest.
func examples(t *testing.T) []byte {
	t.Helper()
	var all []string
	for _, f := range []string{"../../examples/hardware.yaml", "../../examples/template.yaml", "../../examples/workflow.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, string(b))
	}
	return []byte(strings.Join(all, "\n---\n"))
}

// asList rewrites a multi-document manifest as kubectl's List export
// (wrap true) or as a top-level YAML sequence (Tinkerbell's file backend),
// the way those tools write them: through JSON, so with server fields too.
func asList(t *testing.T, multi []byte, wrap bool) []byte {
	t.Helper()
	res, err := ParseManifests("multi.yaml", multi)
	if err != nil {
		t.Fatal(err)
	}
	var items []any
	for i, d := range res.Docs {
		m := normalize(t, d.Object).(map[string]any)
		meta := m["metadata"].(map[string]any)
		meta["uid"] = "0b6c3f5e-0000-4000-8000-00000000000" + string(rune('0'+i))
		meta["resourceVersion"] = "42"
		items = append(items, m)
	}
	var v any = items
	if wrap {
		v = map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}, "items": items}
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestListForms: kubectl's List export and a top-level YAML list apply
// exactly the objects of the same manifest written as separate documents,
// each item named by its position in errors and warnings.
func TestListForms(t *testing.T) {
	multi := examples(t)
	want, err := ParseManifests("multi.yaml", multi)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		wrap bool
	}{{"kubectl List", true}, {"file backend list", false}} {
		t.Run(tc.name, func(t *testing.T) {
			data := asList(t, multi, tc.wrap)
			got, err := ParseManifests("list.yaml", data)
			if err != nil {
				t.Fatalf("ParseManifests:\n%s\n%v", data, err)
			}
			if g, w := objectsJSON(t, got.Docs), objectsJSON(t, want.Docs); g != w {
				t.Errorf("objects differ:\n got %s\nwant %s", g, w)
			}
			for i, d := range got.Docs {
				if d.Index != 1 || d.Item != i+1 {
					t.Errorf("doc %d at document %d item %d; want document 1 item %d", i, d.Index, d.Item, i+1)
				}
			}
		})
	}
}

// TestTypedListAndEmptyLists: a HardwareList holds Hardware; empty lists
// and an empty List apply nothing, without error.
func TestTypedListAndEmptyLists(t *testing.T) {
	res, err := ParseManifests("l.yaml", []byte(`apiVersion: tinkerbell.org/v1alpha1
kind: HardwareList
items:
- apiVersion: tinkerbell.org/v1alpha1
  kind: Hardware
  metadata: {name: a}
  spec: {interfaces: [{dhcp: {mac: "02:00:00:00:00:01"}}]}
---
[]
---
apiVersion: v1
kind: List
items: []
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Docs) != 1 || res.Docs[0].Object.GetObjectMeta().Name != "a" {
		t.Fatalf("docs = %+v; want Hardware a alone", res.Docs)
	}
}

// TestListErrors: a bad item is named by document and item, with its
// line and cause, and nothing of the file is returned.
func TestListErrors(t *testing.T) {
	hw := func(name string) string {
		return `{apiVersion: tinkerbell.org/v1alpha1, kind: Hardware, metadata: {name: ` + name + `}, spec: {interfaces: [{dhcp: {mac: "02:00:00:00:00:0` + name[len(name)-1:] + `"}}]}}`
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"invalid item", "apiVersion: v1\nkind: List\nitems:\n- " + hw("n1") + "\n- {apiVersion: tinkerbell.org/v1alpha1, kind: Hardware, metadata: {name: n2}, spec: {interfaces: [{dhcp: {mac: nope}}]}}\n",
			`l.yaml:5: document 1 item 2 (Hardware default/n2): spec.interfaces[0].dhcp.mac: `},
		{"list in a list", "- " + hw("n1") + "\n- - " + hw("n2") + "\n",
			"l.yaml:2: document 1 item 2: a list inside a list is not applied"},
		{"List in a List", "kind: List\nitems:\n- kind: List\n  items: []\n",
			"l.yaml:3: document 1 item 1: a List inside a list is not applied"},
		{"List in a sequence", "- " + hw("n1") + "\n- {kind: List, items: []}\n",
			"l.yaml:2: document 1 item 2: a List inside a list is not applied"},
		{"wrong kind", "kind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
			`l.yaml:3: document 1 item 1: kind: unknown kind "ConfigMap"`},
		{"wrong kind in a typed list", "kind: TemplateList\nitems:\n- " + hw("n1") + "\n",
			"l.yaml:3: document 1 item 1 (Hardware default/n1): kind: a TemplateList holds only Template objects"},
		{"items not a list", "kind: List\nitems: {a: b}\n",
			"l.yaml:1: document 1: kind List: items must be a list of objects"},
		{"scalar item", "- " + hw("n1") + "\n- 7\n",
			"l.yaml:2: document 1 item 2: a manifest document must be a mapping"},
		{"duplicate across items", "- " + hw("n1") + "\n- " + hw("n1") + "\n",
			"document 1 item 2 (Hardware default/n1): metadata.name: defined again (first in document 1 item 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := ParseManifests("l.yaml", []byte(tc.in))
			if err == nil {
				t.Fatalf("ParseManifests accepted it: %+v", res.Docs)
			}
			if res != nil {
				t.Errorf("returned documents along with the error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error =\n%v\nwant it to contain\n%s", err, tc.want)
			}
		})
	}
}

// TestV1alpha2Hardware: a v1alpha2 Hardware is stored as the internal
// model (what DHCP and the boot path read), the fields v1alpha1 cannot
// hold are named in warnings and kept, and its v1alpha2 form is what was
// applied.
func TestV1alpha2Hardware(t *testing.T) {
	const file = "testdata/hardware-v1alpha2.yaml"
	res := parseFile(t, file)
	h := res.Docs[0].Object.(*Hardware)
	if h.APIVersion != APIVersion {
		t.Errorf("stored apiVersion = %q; want %q", h.APIVersion, APIVersion)
	}
	if got := h.MACs(); !slices.Equal(got, []macaddr.MAC{macaddr.MustParse("3c:ec:ef:20:00:03"), macaddr.MustParse("3c:ec:ef:20:00:04")}) {
		t.Errorf("MACs = %v", got)
	}
	d := h.Spec.Interfaces[0].DHCP
	if d.IP == nil || d.IP.Address != "10.20.0.33" || d.IP.Netmask != "255.255.255.0" || d.IP.Gateway != "10.20.0.1" {
		t.Errorf("ip = %+v; want 10.20.0.33/255.255.255.0 via 10.20.0.1", d.IP)
	}
	if d.Arch != "x86_64" || d.UEFI == nil || !*d.UEFI || d.Hostname != "rack2-node03" || d.LeaseTime != 3600 || d.VLANID != "20" {
		t.Errorf("dhcp = %+v", d)
	}
	nb := h.Spec.Interfaces[0].Netboot
	if nb == nil || !*nb.AllowPXE || nb.IPXE == nil || nb.IPXE.Binary != "ipxe.efi" || nb.OSIE == nil || nb.OSIE.Kernel != "http://10.20.0.2:7080/boot/vmlinuz" {
		t.Errorf("netboot = %+v", nb)
	}
	second := h.Spec.Interfaces[1]
	if second.DisableDHCP == nil || !*second.DisableDHCP || *second.Netboot.AllowPXE {
		t.Errorf("second interface = %+v; want DHCP and netboot disabled", second)
	}
	if h.Spec.BMCRef == nil || h.Spec.BMCRef.Name != "rack2-node03-bmc" || h.Spec.BMCRef.Kind != "Machine" {
		t.Errorf("bmcRef = %+v", h.Spec.BMCRef)
	}
	if len(h.Spec.Disks) != 1 || h.Spec.Disks[0].Device != "/dev/nvme0n1" || h.Spec.UserData == nil || h.Spec.AgentID != "3c:ec:ef:20:00:03" {
		t.Errorf("spec = %+v", h.Spec)
	}
	wantWarn := []string{
		"spec.auto: a Tinkerbell field Anvil ignores",
		"spec.instance.lookupID: a Tinkerbell field",
		"spec.instance.metadata: a Tinkerbell field",
		".dhcp.v4.domainSearchList: a Tinkerbell field",
		".dhcp.v6: a Tinkerbell field",
		".isoboot: a Tinkerbell field",
	}
	all := strings.Join(res.Warnings, "\n")
	for _, w := range wantWarn {
		if !strings.Contains(all, w) {
			t.Errorf("warnings lack %q:\n%s", w, all)
		}
	}
	if !strings.Contains(all, "testdata/hardware-v1alpha2.yaml:15: document 1 (Hardware default/rack2-node03): spec.auto:") {
		t.Errorf("warnings do not name file, line and object:\n%s", all)
	}
	if len(res.Warnings) != len(wantWarn) {
		t.Errorf("%d warnings; want %d:\n%s", len(res.Warnings), len(wantWarn), all)
	}
	checkV1alpha2RoundTrip(t, file, h)
}

// TestV1alpha2Workflow: a v1alpha2 Workflow's one task becomes templateRef
// and hardwareRef, its boot options and template map too; the rest is
// kept, and its v1alpha2 form is what was applied.
func TestV1alpha2Workflow(t *testing.T) {
	const file = "testdata/workflow-v1alpha2.yaml"
	res := parseFile(t, file)
	w := res.Docs[0].Object.(*Workflow)
	s := w.Spec
	if s.TemplateRef != "debian-raw" || s.HardwareRef != "rack2-node03" || s.HardwareMap["device_1"] != "3c:ec:ef:20:00:03" ||
		s.BootOptions == nil || !s.BootOptions.ToggleAllowNetboot || s.BootOptions.BootMode != "netboot" {
		t.Errorf("spec = %+v", s)
	}
	all := strings.Join(res.Warnings, "\n")
	for _, p := range []string{"spec.tasks[0].agentID", "spec.timeoutSeconds", "spec.vars"} {
		if !strings.Contains(all, p+": a Tinkerbell field Anvil ignores") {
			t.Errorf("warnings lack %s:\n%s", p, all)
		}
	}
	checkV1alpha2RoundTrip(t, file, w)
}

// checkV1alpha2RoundTrip: obj (parsed from file) shown as v1alpha2 has
// the file's spec, metadata and no v1alpha1-fields annotation, and
// applying that output again stores the same object.
func checkV1alpha2RoundTrip(t *testing.T, file string, obj Object) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ToVersion(obj, APIVersionV1alpha2)
	if err != nil {
		t.Fatal(err)
	}
	got := normalize(t, out).(map[string]any)
	var in map[string]any
	if err := yaml.Unmarshal(data, &in); err != nil {
		t.Fatal(err)
	}
	in = normalize(t, in).(map[string]any)
	if !reflect.DeepEqual(got["spec"], in["spec"]) {
		a, _ := json.MarshalIndent(got["spec"], "", " ")
		b, _ := json.MarshalIndent(in["spec"], "", " ")
		t.Errorf("v1alpha2 spec after the round trip:\n%s\nwant\n%s", a, b)
	}
	if got["apiVersion"] != APIVersionV1alpha2 || got["kind"] != in["kind"] {
		t.Errorf("type = %v %v", got["apiVersion"], got["kind"])
	}
	meta := got["metadata"].(map[string]any)
	if meta["name"] != in["metadata"].(map[string]any)["name"] || meta["annotations"] != nil {
		t.Errorf("metadata = %v; want the file's name and no annotations", meta)
	}
	again, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ParseManifests("again.yaml", again)
	if err != nil {
		t.Fatalf("the v1alpha2 output does not apply:\n%s\n%v", again, err)
	}
	if g, w := objectsJSON(t, res.Docs), objectsJSON(t, []Document{{Object: obj}}); g != w {
		t.Errorf("applying the v1alpha2 output stores\n%s\nwant\n%s", g, w)
	}
}

// TestV1alpha1AsV1alpha2: a v1alpha1 Hardware and Workflow shown as
// v1alpha2 and applied again are stored unchanged: what v1alpha2 cannot
// say travels in the v1alpha1-fields annotation.
func TestV1alpha1AsV1alpha2(t *testing.T) {
	for _, f := range []string{"testdata/hardware-full.yaml", "../../examples/hardware.yaml", "../../examples/workflow.yaml"} {
		t.Run(f, func(t *testing.T) {
			res := parseFile(t, f)
			for _, d := range res.Docs {
				out, err := ToVersion(d.Object, APIVersionV1alpha2)
				if err != nil {
					t.Fatal(err)
				}
				b, err := yaml.Marshal(out)
				if err != nil {
					t.Fatal(err)
				}
				back, err := ParseManifests("v2.yaml", b)
				if err != nil {
					t.Fatalf("v1alpha2 form does not apply:\n%s\n%v", b, err)
				}
				if g, w := objectsJSON(t, back.Docs), objectsJSON(t, []Document{d}); g != w {
					t.Errorf("through v1alpha2:\n%s\n got %s\nwant %s", b, g, w)
				}
			}
		})
	}
}

// TestV1alpha2Refusals: what cannot be converted without changing what
// runs is refused, naming the field.
func TestV1alpha2Refusals(t *testing.T) {
	wf := func(spec string) string {
		return "apiVersion: tinkerbell.org/v1alpha2\nkind: Workflow\nmetadata: {name: w}\nspec: " + spec + "\n"
	}
	for _, tc := range []struct{ name, in, want string }{
		{"two tasks", wf("{tasks: [{taskRef: {name: a}}, {taskRef: {name: b}}]}"), "spec.tasks[1]: Anvil runs one Template per Workflow; this one has 2 tasks"},
		{"no task", wf("{}"), "spec.tasks: a Workflow needs one task"},
		{"task elsewhere", wf("{tasks: [{taskRef: {name: a, namespace: other}}]}"), `spec.tasks[0].taskRef.namespace: namespace "other" is not the Workflow's ("default")`},
		{"template", "apiVersion: tinkerbell.org/v1alpha2\nkind: Template\nmetadata: {name: t}\nspec: {data: x}\n", `apiVersion: apiVersion "tinkerbell.org/v1alpha2" is not "tinkerbell.org/v1alpha1" (the group of Template)`},
		{"bad prefix", "apiVersion: tinkerbell.org/v1alpha2\nkind: Hardware\nmetadata: {name: h}\nspec: {networkInterfaces: {\"02:00:00:00:00:01\": {ipam: {ipv4: {address: 10.0.0.2, prefix: \"33\"}}}}}\n",
			`spec.networkInterfaces.02:00:00:00:00:01.ipam.ipv4.prefix: prefix "33" is not an IPv4 prefix length`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifests("f.yaml", []byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v; want %q", err, tc.want)
			}
		})
	}
	if _, err := ToVersion(&Template{}, APIVersionV1alpha2); err == nil || !strings.Contains(err.Error(), "Template has no tinkerbell.org/v1alpha2 form") {
		t.Errorf("ToVersion(Template, v1alpha2) = %v", err)
	}
}

// TestUpstreamFieldWarning: a v1alpha1 field that Tinkerbell defines and
// Anvil does not is named as such; a field no one defines stays "unknown",
// in v1alpha2 documents too (and is not kept); Tinkerbell's own status
// fields, which its exports carry, pass silently.
func TestUpstreamFieldWarning(t *testing.T) {
	res, err := ParseManifests("f.yaml", []byte(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m1}
spec:
  auto: {enrollmentEnabled: true}
  foo: 1
  interfaces:
  - dhcp: {mac: "02:00:00:00:00:01"}
    isoboot: {sourceISO: http://x/hook.iso}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w}
spec: {templateRef: t, hardwareRef: m1}
status: {state: STATE_SUCCESS, agentID: "02:00:00:00:00:01", templateRending: successful, bootOptions: {allowNetboot: {toggledTrue: true}}}
---
apiVersion: tinkerbell.org/v1alpha2
kind: Hardware
metadata: {name: m2}
spec:
  bogus: 1
  attributes: {}
  networkInterfaces: {"02:00:00:00:00:02": {dhcp: {v4: {}}, netboot: {}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"f.yaml:5: document 1 (Hardware default/m1): spec.auto: a Tinkerbell field Anvil ignores",
		"f.yaml:6: document 1 (Hardware default/m1): spec.foo: unknown field, ignored",
		"f.yaml:9: document 1 (Hardware default/m1): spec.interfaces[0].isoboot: a Tinkerbell field Anvil ignores",
		"f.yaml:21: document 3 (Hardware default/m2): spec.bogus: unknown field, ignored",
	}
	if !reflect.DeepEqual(res.Warnings, want) {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(res.Warnings, "\n"), strings.Join(want, "\n"))
	}
	h := res.Docs[2].Object
	if a := h.GetObjectMeta().Annotations[V1alpha2FieldsAnnotation]; strings.Contains(a, "bogus") {
		t.Errorf("an unknown v1alpha2 field was kept: %s", a)
	}
	out, err := ToVersion(h, APIVersionV1alpha2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(out.(interface{ GetObjectMeta() *ObjectMeta }).GetObjectMeta())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "annotations") {
		t.Errorf("v1alpha2 output metadata %s; want no annotations", b)
	}
}

// FuzzManifestForms: lists and v1alpha2 documents never panic the parser,
// and every Hardware and Workflow it accepts, shown as v1alpha2 and
// applied again, is stored unchanged (the conversion loses nothing).
func FuzzManifestForms(f *testing.F) {
	for _, p := range []string{"testdata/hardware-v1alpha2.yaml", "testdata/workflow-v1alpha2.yaml", "testdata/hardware-full.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("kind: List\nitems:\n- kind: List\n  items: []\n"))                                  // a List in a List
	f.Add([]byte("- apiVersion: tinkerbell.org/v1alpha1\n  kind: Hardware\n  metadata: {name: a}\n")) // file backend
	f.Add([]byte("kind: HardwareList\nitems: &x [*x]\n"))                                             // alias cycle
	f.Add([]byte("apiVersion: tinkerbell.org/v1alpha2\nkind: Hardware\nmetadata: {name: h, annotations: {anvil.dev/v1alpha1-fields: '[{\"op\":\"add\",\"path\":\"/disks\",\"value\":[]}]'}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := ParseManifests("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, d := range res.Docs {
			if v2Type(KindOf(d.Object)) == nil {
				continue
			}
			out, err := ToVersion(d.Object, APIVersionV1alpha2)
			if err != nil {
				t.Fatalf("accepted object has no v1alpha2 form: %v", err)
			}
			b, err := json.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseManifests("v2.json", b)
			if err != nil {
				t.Fatalf("v1alpha2 form %s does not apply: %v", b, err)
			}
			if g, w := objectsJSON(t, back.Docs), objectsJSON(t, []Document{d}); g != w {
				t.Fatalf("through v1alpha2 (%s):\n got %s\nwant %s", b, g, w)
			}
		}
	})
}

// TestListAliasBudget: a list whose items each repeat a large anchored
// object is refused quickly, however small the file; a single item of the
// same size passes.
func TestListAliasBudget(t *testing.T) {
	// One anchored list of about 2^15 nodes (a 14-level binary tree of
	// aliases), repeated by every item.
	var b strings.Builder
	b.WriteString("- apiVersion: tinkerbell.org/v1alpha1\n  kind: Hardware\n  metadata: {name: h0}\n  spec:\n    metadata:\n      custom:\n        l0: &l0 [x, y]\n")
	for i := 1; i < 14; i++ {
		b.WriteString("        l" + itoa(i) + ": &l" + itoa(i) + " [*l" + itoa(i-1) + ", *l" + itoa(i-1) + "]\n")
	}
	b.WriteString("        big: &big [*l13]\n    interfaces: [{dhcp: {mac: \"02:00:00:00:00:00\"}}]\n")
	one := b.String()
	if _, err := ParseManifests("one.yaml", []byte(one)); err != nil {
		t.Fatalf("one large item: %v", err)
	}
	for i := 1; i < 200; i++ {
		b.WriteString("- {apiVersion: tinkerbell.org/v1alpha1, kind: Hardware, metadata: {name: h" + itoa(i) + "}, spec: {metadata: {custom: {x: *big}}}}\n")
	}
	_, err := ParseManifests("many.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "nodes through aliases") {
		t.Fatalf("%d bytes of list repeating a large anchor: %v; want refused for expanding too far", b.Len(), err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestKubectlExport: an export from a Kubernetes cluster running
// Tinkerbell applies without a warning (so --strict accepts it): its
// server-set metadata, owner references, finalizers and Tinkerbell's
// status fields are dropped silently; its spec is kept whole.
func TestKubectlExport(t *testing.T) {
	res := parseFile(t, "testdata/kubectl-export.yaml")
	if len(res.Warnings) != 0 {
		t.Errorf("warnings:\n%s", strings.Join(res.Warnings, "\n"))
	}
	if len(res.Docs) != 3 {
		t.Fatalf("%d objects; want 3", len(res.Docs))
	}
	h := res.Docs[0].Object.(*Hardware)
	if h.Namespace != "tink-system" || h.Spec.BMCRef == nil || h.Spec.BMCRef.Name != "rack4-node01-bmc" || h.UID != "" || h.ResourceVersion != "" {
		t.Errorf("hardware = %+v", h)
	}
	w := res.Docs[2].Object.(*Workflow)
	if w.Spec.TemplateRef != "rack4-node01" || w.Spec.BootOptions == nil || !w.Spec.BootOptions.ToggleAllowNetboot {
		t.Errorf("workflow spec = %+v", w.Spec)
	}
}
