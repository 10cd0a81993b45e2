package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRufioManifests: manifests in the shape of Rufio's samples (Machine,
// Job, Secret, and a Hardware whose bmcRef names the Machine) parse with no
// warning and keep every field.
func TestRufioManifests(t *testing.T) {
	var all []byte
	for _, f := range []string{"secret.yaml", "machine.yaml", "job.yaml", "hardware.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata/rufio", f))
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, b...), "\n---\n"...)
	}
	res, err := ParseManifests("rufio.yaml", all)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) > 0 {
		t.Errorf("warnings: %v", res.Warnings)
	}
	if len(res.Docs) != 4 {
		t.Fatalf("got %d documents, want 4", len(res.Docs))
	}
	sec := res.Docs[0].Object.(*Secret)
	plain, err := sec.Plain()
	if err != nil {
		t.Fatal(err)
	}
	if string(plain[SecretUsernameKey]) != "admin" || string(plain[SecretPasswordKey]) != "s3cret-pw" || sec.Type != "kubernetes.io/basic-auth" {
		t.Errorf("secret = %q/%q type %q", plain[SecretUsernameKey], plain[SecretPasswordKey], sec.Type)
	}
	m := res.Docs[1].Object.(*Machine)
	c := m.Spec.Connection
	if c.Host != "10.1.2.3" || c.Port != 623 || c.AuthSecretRef.Name != "bm-auth" || c.ProviderOptions.IPMITOOL.CipherSuite != "17" ||
		c.ProviderOptions.IntelAMT.Port != 16992 || strings.Join(c.ProviderOptions.PreferredOrder, ",") != "ipmitool,redfish" {
		t.Errorf("machine connection = %+v", c)
	}
	j := res.Docs[2].Object.(*Job)
	var got []string
	for _, a := range j.Spec.Tasks {
		got = append(got, a.Describe())
	}
	if want := "powerAction off|oneTimeBootDeviceAction pxe|powerAction on"; strings.Join(got, "|") != want || j.Spec.MachineRef.Name != "machine-sample" {
		t.Errorf("job tasks = %q, want %q", strings.Join(got, "|"), want)
	}
	hw := res.Docs[3].Object.(*Hardware)
	if hw.Spec.BMCRef == nil || hw.Spec.BMCRef.Name != "machine-sample" || hw.Spec.BMCRef.Kind != KindMachine {
		t.Errorf("bmcRef = %+v", hw.Spec.BMCRef)
	}
	// Encoding keeps Rufio's field names.
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"apiVersion":"bmc.tinkerbell.org/v1alpha1"`, `"machineRef":{"name":"machine-sample"`, `"oneTimeBootDeviceAction":{"device":["pxe"]}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
}

func TestBMCErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"machine without host", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Machine\nmetadata: {name: m}\nspec:\n  connection:\n    authSecretRef: {name: s}\n",
			[]string{"f.yaml:5:", "spec.connection.host: missing host"}},
		{"machine without secret", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Machine\nmetadata: {name: m}\nspec:\n  connection:\n    host: 10.0.0.1\n",
			[]string{"spec.connection.authSecretRef.name: missing name"}},
		{"bad cipher suite", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Machine\nmetadata: {name: m}\nspec:\n  connection:\n    host: h\n    authSecretRef: {name: s}\n    providerOptions:\n      ipmitool: {cipherSuite: \"1\"}\n",
			[]string{"f.yaml:9:", "cipherSuite", "suites 3 and 17"}},
		{"bad redfish port", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Machine\nmetadata: {name: m}\nspec:\n  connection:\n    host: h\n    authSecretRef: {name: s}\n    providerOptions:\n      redfish: {port: 70000}\n",
			[]string{"providerOptions.redfish.port", "70000 is not a port"}},
		{"bad intelAMT scheme", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Machine\nmetadata: {name: m}\nspec:\n  connection:\n    host: h\n    authSecretRef: {name: s}\n    providerOptions:\n      intelAMT: {hostScheme: ftp, port: 16993}\n",
			[]string{"providerOptions.intelAMT.hostScheme", `"ftp": want http or https`}},
		{"unknown provider", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Machine\nmetadata: {name: m}\nspec:\n  connection:\n    host: h\n    authSecretRef: {name: s}\n    providerOptions:\n      preferredOrder: [IntelAMT, asrockrack]\n",
			[]string{"preferredOrder[1]", `unknown provider "asrockrack"`}},
		{"bad power action", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec:\n  machineRef: {name: m}\n  tasks:\n  - powerAction: sideways\n",
			[]string{"f.yaml:7:", "spec.tasks[0].powerAction", `"sideways" is not a power action`}},
		{"two actions in one task", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec:\n  machineRef: {name: m}\n  tasks:\n  - powerAction: \"on\"\n    oneTimeBootDeviceAction: {device: [pxe]}\n",
			[]string{"spec.tasks[0]: a task holds exactly one action"}},
		{"bad boot device", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec:\n  machineRef: {name: m}\n  tasks:\n  - oneTimeBootDeviceAction: {device: [floppy]}\n",
			[]string{`"floppy" is not a boot device`}},
		{"job naming another namespace's machine", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Job\nmetadata: {name: j, namespace: acme}\nspec:\n  machineRef: {name: m, namespace: globex}\n  tasks:\n  - powerAction: \"off\"\n",
			[]string{"f.yaml:5:", "spec.machineRef.namespace", `"globex": a Job drives the Machines of its own namespace ("acme") only`}},
		{"job without machine", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec:\n  tasks:\n  - powerAction: status\n",
			[]string{"spec.machineRef.name: missing name"}},
		{"bmcRef of another kind", "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: h}\nspec:\n  bmcRef: {kind: Template, name: x}\n  interfaces:\n  - dhcp: {mac: 3c:ec:ef:12:34:07}\n",
			[]string{"spec.bmcRef.kind", "names a Machine"}},
		{"bad bootDevice", "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec:\n  machineRef: {name: m}\n  tasks:\n  - bootDevice: {device: usb, efiBoot: true}\n",
			[]string{"spec.tasks[0].bootDevice.device", `"usb" is not a boot device`}},
		{"customboot with a bad action", "apiVersion: tinkerbell.org/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec:\n  templateRef: t\n  hardwareRef: h\n  bootOptions:\n    bootMode: customboot\n    custombootConfig:\n      preparingActions:\n      - powerAction: \"off\"\n      postActions:\n      - powerAction: sideways\n",
			[]string{"spec.bootOptions.custombootConfig.postActions[0].powerAction", `"sideways" is not a power action`}},
		{"custombootConfig without customboot", "apiVersion: tinkerbell.org/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec:\n  templateRef: t\n  hardwareRef: h\n  bootOptions:\n    bootMode: netboot\n    custombootConfig:\n      preparingActions:\n      - powerAction: \"off\"\n",
			[]string{"spec.bootOptions.custombootConfig", `with bootMode customboot only (bootMode is "netboot")`}},
		{"secret not base64", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  password: \"not base64!\"\n",
			[]string{"f.yaml:5:", "data.password: not valid base64"}},
		{"secret in the wrong group", "apiVersion: tinkerbell.org/v1alpha1\nkind: Secret\nmetadata: {name: s}\n",
			[]string{`is not "v1"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifests("f.yaml", []byte(tc.in))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			// A secret's value never appears in an error.
			if strings.Contains(err.Error(), "not base64!") {
				t.Errorf("error %q repeats the secret's value", err)
			}
		})
	}
}

// TestCanonicalProvider: Rufio's (bmclib's) provider names in any case,
// and Anvil's own.
func TestCanonicalProvider(t *testing.T) {
	for in, want := range map[string]string{"IntelAMT": ProviderIntelAMT, "intelamt": ProviderIntelAMT, "intelAMT": ProviderIntelAMT,
		"gofish": ProviderRedfish, "Redfish": ProviderRedfish, "ipmitool": ProviderIPMI, "IPMI": ProviderIPMI, "rpc": ProviderRPC} {
		if got, ok := CanonicalProvider(in); !ok || got != want {
			t.Errorf("%s: %s %v; want %s", in, got, ok, want)
		}
	}
	if _, ok := CanonicalProvider("dell"); ok {
		t.Error("dell: accepted")
	}
}

// TestBMCExamples: the manifests docs/bmc.md runs parse without a
// warning, the Redfish and Intel AMT Machines' options included.
func TestBMCExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/bmc/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples/bmc: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		res, err := ParseManifests(f, data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(res.Warnings) != 0 {
			t.Errorf("%s: warnings %v", f, res.Warnings)
		}
		for _, d := range res.Docs {
			if m, ok := d.Object.(*Machine); ok && m.Name == "bmc-node08" {
				o := m.Spec.Connection.ProviderOptions
				if o == nil || o.Redfish == nil || o.Redfish.Port != 443 || o.Redfish.SystemName != "1" || o.PreferredOrder[0] != ProviderRedfish {
					t.Errorf("%s: redfish options %+v", f, o)
				}
			}
			if m, ok := d.Object.(*Machine); ok && m.Name == "bmc-node09" {
				o := m.Spec.Connection.ProviderOptions
				if name, _ := CanonicalProvider(o.PreferredOrder[0]); o.IntelAMT == nil || o.IntelAMT.Port != 16992 || o.IntelAMT.HostScheme != "http" || name != ProviderIntelAMT {
					t.Errorf("%s: intelAMT options %+v", f, o)
				}
			}
		}
	}
}
