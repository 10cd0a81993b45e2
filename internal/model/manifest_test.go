package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// specOf returns the "spec" of a YAML document as generic JSON.
func specOf(t *testing.T, doc []byte) any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	return normalize(t, m["spec"])
}

// normalize round-trips v through JSON so numbers and maps compare equal.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoundTrip proves every documented field survives decode and encode:
// what apply stores is what get returns.
func TestRoundTrip(t *testing.T) {
	files := []string{
		"testdata/hardware-full.yaml",
		"../../examples/hardware.yaml",
		"../../examples/template.yaml",
		"../../examples/workflow.yaml",
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			res, err := ParseManifests(f, data)
			if err != nil {
				t.Fatalf("ParseManifests: %v", err)
			}
			if len(res.Warnings) != 0 {
				t.Errorf("unexpected warnings: %v", res.Warnings)
			}
			if len(res.Docs) != 1 {
				t.Fatalf("got %d documents; want 1", len(res.Docs))
			}
			encoded, err := json.Marshal(res.Docs[0].Object)
			if err != nil {
				t.Fatal(err)
			}
			// The stored form decodes back to the same object, too.
			back, err := Decode(KindOf(res.Docs[0].Object), encoded)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, res.Docs[0].Object) {
				t.Errorf("decode(encode(obj)) differs from obj")
			}
			got, want := specOf(t, encoded), specOf(t, data)
			if !reflect.DeepEqual(got, want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(want, "", " ")
				t.Errorf("spec after round trip:\n%s\nwant:\n%s", g, w)
			}
		})
	}
}

func TestParseDefaultsAndMultiDoc(t *testing.T) {
	in := `
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: t1}
spec: {data: "x: 1"}
---
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: h1, namespace: lab, resourceVersion: "99", uid: abc}
spec:
  interfaces: [{dhcp: {mac: "3C:EC:EF:12:34:07"}}]
`
	res, err := ParseManifests("multi.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Docs) != 2 {
		t.Fatalf("got %d docs; want 2", len(res.Docs))
	}
	if ns := res.Docs[0].Object.GetObjectMeta().Namespace; ns != "default" {
		t.Errorf("namespace = %q; want default", ns)
	}
	hw := res.Docs[1].Object.(*Hardware)
	if hw.ResourceVersion != "" || hw.UID != "" {
		t.Errorf("server-set fields kept: rv=%q uid=%q", hw.ResourceVersion, hw.UID)
	}
	if got := hw.MACs(); len(got) != 1 || got[0].String() != "3c:ec:ef:12:34:07" {
		t.Errorf("MACs() = %v; want lower-cased", got)
	}
	if res.Docs[1].Index != 3 || res.Docs[1].Line != 8 {
		t.Errorf("second object: index %d line %d; want index 3 line 8", res.Docs[1].Index, res.Docs[1].Line)
	}
}

// TestParseErrors checks that each kind of bad input names the file, line,
// document and field, and that nothing is returned alongside an error.
func TestParseErrors(t *testing.T) {
	const hwHead = "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata:\n  name: n1\nspec:\n"
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{"unknown kind", "apiVersion: tinkerbell.org/v1alpha1\nkind: Gadget\nmetadata: {name: a}\n",
			[]string{"f.yaml:2:", "document 1", "kind:", `unknown kind "Gadget"`}},
		{"missing kind", "apiVersion: tinkerbell.org/v1alpha1\nmetadata: {name: a}\n",
			[]string{"f.yaml:1:", "missing kind"}},
		{"wrong apiVersion", "apiVersion: v1\nkind: Hardware\nmetadata: {name: a}\n",
			[]string{"f.yaml:1:", "apiVersion", `"v1"`}},
		{"missing MAC", hwHead + "  interfaces:\n    - dhcp:\n        hostname: x\n",
			[]string{"f.yaml:7:", "document 1 (Hardware default/n1)", "spec.interfaces[0].dhcp.mac", "missing MAC"}},
		{"bad MAC", hwHead + "  interfaces:\n    - dhcp:\n        mac: zz:00:00:00:00:01\n",
			[]string{"f.yaml:8:", "spec.interfaces[0].dhcp.mac", "not a MAC"}},
		{"bad IP", hwHead + "  interfaces:\n    - dhcp:\n        mac: 00:00:00:00:00:01\n        ip:\n          address: 10.0.0.300\n",
			[]string{"f.yaml:10:", "spec.interfaces[0].dhcp.ip.address", `"10.0.0.300" is not an IP`}},
		{"bad netmask", hwHead + "  interfaces:\n    - dhcp:\n        mac: 00:00:00:00:00:01\n        ip: {address: 10.0.0.3, netmask: 255.0.255.0}\n",
			[]string{"spec.interfaces[0].dhcp.ip.netmask", "contiguous"}},
		{"no interfaces", hwHead + "  disks: [{device: /dev/sda}]\n",
			[]string{"spec.interfaces", "at least one interface"}},
		{"duplicate MAC", hwHead + "  interfaces:\n    - dhcp: {mac: 00:00:00:00:00:01}\n    - dhcp: {mac: 00:00:00:00:00:01}\n",
			[]string{"spec.interfaces[1].dhcp.mac", "also the MAC"}},
		{"wrong type", hwHead + "  interfaces:\n    - dhcp:\n        mac: 00:00:00:00:00:01\n        uefi: maybe\n",
			[]string{"f.yaml:9:", "uefi", "cannot use string as bool"}},
		{"bad name", "apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: Bad_Name}\nspec: {data: x}\n",
			[]string{"metadata.name", `"Bad_Name"`}},
		{"missing template data", "apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: t}\nspec: {}\n",
			[]string{"spec.data", "missing template data"}},
		{"workflow without templateRef", "apiVersion: tinkerbell.org/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec: {hardwareRef: h}\n",
			[]string{"spec.templateRef", "missing templateRef"}},
		{"invalid YAML", "apiVersion: [\n", []string{"f.yaml", "invalid YAML"}},
		{"duplicate object", "apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: t}\nspec: {data: x}\n---\n" +
			"apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: t}\nspec: {data: y}\n",
			[]string{"f.yaml:6:", "document 2", "defined again (first in document 1)"}},
		{"duplicate key", hwHead + "  disks: []\n  disks: []\n", []string{"spec.disks", "key defined twice"}},
		{"bad registry settings", "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata:\n  name: n1\n  annotations:\n" +
			"    anvil.dev/registries: '{\"mirrors\":{\"quay.io\":\"ftp://x\"}}'\nspec:\n  interfaces:\n    - dhcp: {mac: 00:00:00:00:00:01}\n",
			[]string{"metadata.annotations[anvil.dev/registries]", "mirrors[quay.io]", "want an http:// or https:// URL"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := ParseManifests("f.yaml", []byte(tc.in))
			if err == nil {
				t.Fatalf("ParseManifests succeeded; want an error containing %q", tc.want)
			}
			if res != nil {
				t.Errorf("got documents alongside an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	in := "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: a}\nspec:\n  interfaces:\n    - dhcp: {mac: bad}\n" +
		"---\napiVersion: tinkerbell.org/v1alpha1\nkind: Nope\n"
	_, err := ParseManifests("f.yaml", []byte(in))
	var list ErrorList
	if !asErrorList(err, &list) || len(list) != 2 {
		t.Fatalf("got %v; want an ErrorList of 2", err)
	}
}

func asErrorList(err error, out *ErrorList) bool {
	l, ok := err.(ErrorList)
	*out = l
	return ok
}

func TestUnknownFieldWarning(t *testing.T) {
	in := "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: a}\nspec:\n  interfaces:\n    - dhcp:\n        mac: 00:00:00:00:00:01\n        macc: typo\n"
	res, err := ParseManifests("f.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "f.yaml:8:") ||
		!strings.Contains(res.Warnings[0], "spec.interfaces[0].dhcp.macc: unknown field") {
		t.Errorf("warnings = %q; want one naming spec.interfaces[0].dhcp.macc at line 8", res.Warnings)
	}
}

func TestCheckReferences(t *testing.T) {
	in := `apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w}
spec:
  templateRef: tpl
  hardwareRef: hw
`
	res, err := ParseManifests("wf.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	err = CheckReferences(res.Docs, func(kind, ns, name string) bool { return false })
	if err == nil {
		t.Fatal("missing references accepted")
	}
	for _, w := range []string{"wf.yaml:5:", "spec.templateRef", "Template default/tpl does not exist",
		"wf.yaml:6:", "spec.hardwareRef", "Hardware default/hw does not exist"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	inStore := func(kind, ns, name string) bool { return ns == "default" && (name == "tpl" || name == "hw") }
	if err := CheckReferences(res.Docs, inStore); err != nil {
		t.Errorf("references that exist refused: %v", err)
	}
}

// FuzzParseManifests: the parser never panics, and what it accepts encodes
// and decodes back to the same object.
func FuzzParseManifests(f *testing.F) {
	for _, p := range []string{"testdata/hardware-full.yaml", "../../examples/template.yaml", "../../examples/workflow.yaml",
		"testdata/rufio/machine.yaml", "testdata/rufio/job.yaml", "testdata/rufio/secret.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("---\n---\n"))                                                                                                         // empty documents
	f.Add([]byte("apiVersion: tinkerbell.org/v1alpha1\nkind: ["))                                                                       // broken YAML
	f.Add([]byte("a: &x [*x]"))                                                                                                         // alias
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- {kind: Template, apiVersion: tinkerbell.org/v1alpha1, metadata: {name: t}}\n")) // kubectl's List
	f.Add([]byte("- - {kind: Hardware}\n"))                                                                                             // a list in a list
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := ParseManifests("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, d := range res.Docs {
			b, err := json.Marshal(d.Object)
			if err != nil {
				t.Fatalf("accepted object does not encode: %v", err)
			}
			back, err := Decode(KindOf(d.Object), b)
			if err != nil {
				t.Fatalf("accepted object does not decode: %v", err)
			}
			if err := Validate(back); err != nil {
				t.Fatalf("accepted object fails validation after a round trip: %v", err)
			}
		}
	})
}

// TestDeepCopy: the copy equals the original and shares nothing mutable
// with it.
func TestDeepCopy(t *testing.T) {
	data, err := os.ReadFile("testdata/hardware-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := ParseManifests("f.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	orig := res.Docs[0].Object.(*Hardware)
	now := time.Now()
	orig.CreationTimestamp = &now
	c := DeepCopy(orig)
	if !reflect.DeepEqual(c, orig) {
		t.Fatal("DeepCopy(h) differs from h")
	}
	// Mutate every kind of reference in the copy; the original must not move.
	c.Labels["rack"] = "changed"
	c.Spec.Interfaces[0].DHCP.MAC = "changed"
	*c.Spec.Interfaces[0].Netboot.AllowPXE = true
	c.Spec.Interfaces[0].DHCP.NameServers[0] = "changed"
	c.Spec.Metadata.Custom["anything"].([]any)[1] = "changed"
	*c.CreationTimestamp = now.Add(time.Hour)
	if orig.Labels["rack"] != "r1" || orig.Spec.Interfaces[0].DHCP.MAC != "3c:ec:ef:12:34:08" ||
		*orig.Spec.Interfaces[0].Netboot.AllowPXE || orig.Spec.Interfaces[0].DHCP.NameServers[0] != "10.20.0.1" ||
		orig.Spec.Metadata.Custom["anything"].([]any)[1] != "two" || !orig.CreationTimestamp.Equal(now) {
		t.Error("mutating the copy changed the original")
	}
}

// TestMACsCanonicalKeepsSpelling: MACs() (what the store indexes) is
// canonical, and the Hardware itself keeps the MAC as written, so `get -o
// yaml` shows what was applied.
func TestMACsCanonicalKeepsSpelling(t *testing.T) {
	doc := []byte(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m1}
spec:
  interfaces:
    - dhcp: {mac: 5254.00AA.BB01}
    - dhcp: {mac: 52-54-00-AA-BB-02}
`)
	res, err := ParseManifests("m1.yaml", doc)
	if err != nil {
		t.Fatal(err)
	}
	h := res.Docs[0].Object.(*Hardware)
	if got, want := h.MACs(), []macaddr.MAC{macaddr.MustParse("52:54:00:aa:bb:01"), macaddr.MustParse("52:54:00:aa:bb:02")}; !slices.Equal(got, want) {
		t.Errorf("MACs() = %v; want %v", got, want)
	}
	if got, want := h.AgentIDs(), []string{"52:54:00:aa:bb:01"}; !reflect.DeepEqual(got, want) {
		t.Errorf("AgentIDs() = %v; want %v", got, want)
	}
	if got := h.Spec.Interfaces[0].DHCP.MAC; got != "5254.00AA.BB01" {
		t.Errorf("stored MAC = %q; want it as written, 5254.00AA.BB01", got)
	}
	if !reflect.DeepEqual(specOf(t, doc), normalize(t, h.Spec)) {
		t.Errorf("spec after parsing = %v; want the document's %v", normalize(t, h.Spec), specOf(t, doc))
	}
}

func TestDuplicateMACInOtherSpelling(t *testing.T) {
	h := &Hardware{ObjectMeta: ObjectMeta{Name: "m1"}, Spec: HardwareSpec{Interfaces: []Interface{
		{DHCP: &DHCP{MAC: "52:54:00:aa:bb:01"}}, {DHCP: &DHCP{MAC: "5254.00AA.BB01"}},
	}}}
	err := Validate(h)
	if err == nil || !strings.Contains(err.Error(), "spec.interfaces[1].dhcp.mac") {
		t.Errorf("Validate(the same MAC in two spellings) = %v; want an error on spec.interfaces[1].dhcp.mac", err)
	}
}

// TestInterfaceMAC: an interface's MAC is its dhcp.mac read as an address,
// and the zero MAC when there is none or it is not one (Validate refuses
// the latter, so lookups never see it).
func TestInterfaceMAC(t *testing.T) {
	tests := []struct {
		name  string
		iface Interface
		want  string
	}{
		{"no dhcp", Interface{}, ""},
		{"no mac", Interface{DHCP: &DHCP{}}, ""},
		{"not a MAC", Interface{DHCP: &DHCP{MAC: "node07"}}, ""},
		{"eight bytes", Interface{DHCP: &DHCP{MAC: "02:00:5e:10:00:00:00:01"}}, ""},
		{"hyphens, upper case", Interface{DHCP: &DHCP{MAC: "3C-EC-EF-12-34-07"}}, "3c:ec:ef:12:34:07"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.iface.MAC()
			if m.String() != tc.want || m.IsValid() != (tc.want != "") {
				t.Errorf("MAC() = %q (valid %t); want %q", m, m.IsValid(), tc.want)
			}
		})
	}
}
