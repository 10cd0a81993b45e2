package model

import (
	"strings"
	"testing"
)

const profileYAML = `apiVersion: anvil.dev/v1alpha1
kind: BootProfile
metadata: {name: flatcar-worker}
spec:
  selector: ["role=worker", "role in (gpu,storage),site=lab"]
  priority: 10
  kernel: /assets/flatcar/flatcar_production_pxe.vmlinuz
  initrds: [https://example.com/flatcar_production_pxe_image.cpio.gz]
  kernelArgs: ["flatcar.first_boot=1", "ignition.config.url={{ .ConfigURL \"ignition\" }}", "console=ttyS0,115200", "ds=nocloud-net;s={{ .ConfigURL \"\" }}"]
  configs:
    ignition: {format: butane, template: "variant: flatcar\nversion: 1.0.0\n"}
    user-data: {format: cloud-config, template: "#cloud-config\n"}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: n1, labels: {role: worker}}
spec:
  bootProfileRef: {name: flatcar-worker}
  interfaces:
    - dhcp: {mac: "00:00:00:00:00:01"}
`

func TestParseBootProfile(t *testing.T) {
	res, err := ParseManifests("f.yaml", []byte(profileYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("warnings: %q", res.Warnings)
	}
	if len(res.Docs) != 2 {
		t.Fatalf("got %d documents; want 2", len(res.Docs))
	}
	bp, ok := res.Docs[0].Object.(*BootProfile)
	if !ok {
		t.Fatalf("document 1 is %T; want *BootProfile", res.Docs[0].Object)
	}
	if bp.APIVersion != AnvilAPIVersion || bp.Namespace != DefaultNamespace || bp.Spec.Priority != 10 ||
		len(bp.Spec.Selector) != 2 || bp.Spec.Configs["ignition"].Format != ConfigButane {
		t.Errorf("decoded %+v", bp)
	}
	terms, err := bp.SelectorTerms()
	if err != nil || len(terms) != 2 || !terms[1].Matches(map[string]string{"role": "gpu", "site": "lab"}) {
		t.Errorf("SelectorTerms() = %v, %v", terms, err)
	}
	h := res.Docs[1].Object.(*Hardware)
	if h.Spec.BootProfileRef == nil || h.Spec.BootProfileRef.Name != "flatcar-worker" {
		t.Errorf("bootProfileRef = %+v", h.Spec.BootProfileRef)
	}
}

func TestBootProfileErrors(t *testing.T) {
	const head = "apiVersion: anvil.dev/v1alpha1\nkind: BootProfile\nmetadata: {name: p}\nspec:\n"
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"tinkerbell group", "apiVersion: tinkerbell.org/v1alpha1\nkind: BootProfile\nmetadata: {name: p}\nspec: {kernel: /k}\n",
			[]string{"f.yaml:1:", "apiVersion", `"anvil.dev/v1alpha1"`}},
		{"no kernel", head + "  initrds: [/i]\n", []string{"f.yaml:4:", "spec.kernel", "missing kernel"}},
		{"relative kernel", head + "  kernel: assets/k\n", []string{"f.yaml:5:", "spec.kernel", "want an http:// or https:// URL"}},
		{"ftp kernel", head + "  kernel: ftp://h/k\n", []string{"spec.kernel", "want an http"}},
		{"dotdot path", head + "  kernel: /assets/../etc/k\n", []string{"spec.kernel", "not a clean absolute path"}},
		{"bad initrd", head + "  kernel: /k\n  initrds: [/a, \"http://h/x y\"]\n", []string{"f.yaml:6:", "spec.initrds[1]", "whitespace"}},
		{"bad selector", head + "  kernel: /k\n  selector: [\"role=worker\", \"role in (a\"]\n", []string{"f.yaml:6:", "spec.selector[1]"}},
		{"empty selector term", head + "  kernel: /k\n  selector: [\"\"]\n", []string{"spec.selector[0]", "match every Hardware"}},
		{"bad arg template", head + "  kernel: /k\n  kernelArgs: [\"a={{ .MAC\"]\n", []string{"f.yaml:6:", "spec.kernelArgs[0]", "template"}},
		{"arg with space", head + "  kernel: /k\n  kernelArgs: [\"a=1 b=2\"]\n", []string{"spec.kernelArgs[0]", "whitespace"}},
		{"unknown config", head + "  kernel: /k\n  kernelArgs: [\"u={{ .ConfigURL \\\"ign\\\" }}\"]\n  configs: {ignition: {format: butane}}\n",
			[]string{"spec.kernelArgs[0]", `ConfigURL "ign"`, "have: ignition"}},
		{"bad format", head + "  kernel: /k\n  configs:\n    ignition: {format: json}\n", []string{"f.yaml:7:", "spec.configs.ignition.format", `unknown format "json"`, "butane"}},
		{"missing format", head + "  kernel: /k\n  configs:\n    ignition: {template: x}\n", []string{"spec.configs.ignition.format", "missing format"}},
		{"unsafe config name", head + "  kernel: /k\n  configs:\n    ../x: {format: plain}\n", []string{"spec.configs.../x", "not path-safe"}},
		{"bad config template", head + "  kernel: /k\n  configs:\n    c: {format: plain, template: \"{{ if }}\"}\n", []string{"spec.configs.c.template", "template"}},
		{"endless arg range", head + "  kernel: /k\n  kernelArgs: [\"a={{ range 1000000000000 }}{{ end }}\"]\n",
			[]string{"f.yaml:6:", "spec.kernelArgs[0]", "steps budget", "range over 1000000000000"}},
		{"endless config range", head + "  kernel: /k\n  configs:\n    c: {format: plain, template: \"{{ define \\\"d\\\" }}{{ range 1000000000000 }}{{ end }}{{ end }}\"}\n",
			[]string{"spec.configs.c.template", "steps budget", "range over 1000000000000"}},
		{"hardware ref without name", "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: n}\nspec:\n  bootProfileRef: {kind: BootProfile}\n  interfaces: [{dhcp: {mac: \"00:00:00:00:00:01\"}}]\n",
			[]string{"f.yaml:5:", "spec.bootProfileRef.name", "missing name"}},
		{"hardware ref wrong kind", "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: n}\nspec:\n  bootProfileRef: {kind: Template, name: t}\n  interfaces: [{dhcp: {mac: \"00:00:00:00:00:01\"}}]\n",
			[]string{"spec.bootProfileRef.kind", `kind "Template"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifests("f.yaml", []byte(tc.in))
			if err == nil {
				t.Fatalf("ParseManifests succeeded; want an error containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestBootProfileUnknownFieldWarning(t *testing.T) {
	in := "apiVersion: anvil.dev/v1alpha1\nkind: BootProfile\nmetadata: {name: p}\nspec:\n  kernel: /k\n  initrd: /i\n"
	res, err := ParseManifests("f.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "f.yaml:6:") || !strings.Contains(res.Warnings[0], "spec.initrd") {
		t.Errorf("warnings = %q; want one naming spec.initrd at line 6", res.Warnings)
	}
}

func TestBootProfileCopyAndKind(t *testing.T) {
	o, err := New(KindBootProfile)
	if err != nil || o.GetTypeMeta().APIVersion != AnvilAPIVersion || KindOf(o) != KindBootProfile {
		t.Fatalf("New(BootProfile) = %+v, %v", o, err)
	}
	for _, s := range []string{"bootprofile", "bootprofiles", "bp", "BootProfile"} {
		if k, err := ParseKind(s); err != nil || k != KindBootProfile {
			t.Errorf("ParseKind(%q) = %q, %v; want BootProfile", s, k, err)
		}
	}
	b := &BootProfile{Spec: BootProfileSpec{Configs: map[string]BootConfig{"a": {Format: ConfigPlain}}, Selector: []string{"a=b"}}}
	c := DeepCopy(b)
	c.Spec.Configs["a"] = BootConfig{Format: ConfigIgnition}
	c.Spec.Selector[0] = "x"
	if b.Spec.Configs["a"].Format != ConfigPlain || b.Spec.Selector[0] != "a=b" {
		t.Errorf("DeepCopy shares state with the original")
	}
}

// Config templates may use the renderer's functions (sprig's, secret, …):
// apply checks their syntax only.
func TestBootProfileConfigFunctions(t *testing.T) {
	in := "apiVersion: anvil.dev/v1alpha1\nkind: BootProfile\nmetadata: {name: p}\nspec:\n  kernel: /k\n  configs:\n" +
		"    ignition: {format: butane, template: \"t: {{ secret \\\"join\\\" \\\"kubeadm-token\\\" | quote }} {{ .Vars.x | default \\\"y\\\" }}\"}\n"
	if _, err := ParseManifests("f.yaml", []byte(in)); err != nil {
		t.Fatalf("a config template using the renderer's functions was refused: %v", err)
	}
}
