package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/internal/oci/ocitest"
	"github.com/anvilproj/anvil/internal/server"
	"github.com/anvilproj/anvil/internal/untar/untartest"
)

// desired is what apply sets of each object (kind/name → labels,
// annotations and spec), read with `get KIND -o json` for every kind.
func desired(t *testing.T, srv string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, kind := range []string{"hardware", "templates", "workflows"} {
		var list struct {
			Items []struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name        string            `json:"name"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec any `json:"spec"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(mustRun(t, srv, "get", kind, "-o", "json")), &list); err != nil {
			t.Fatal(err)
		}
		for _, it := range list.Items {
			out[it.Kind+"/"+it.Metadata.Name] = []any{it.Metadata.Labels, it.Metadata.Annotations, it.Spec}
		}
	}
	return out
}

// TestApplyListFormsRoundTrip: what `get -o yaml` exports (kubectl's
// List, server fields and status included), merged into one List of mixed
// kinds, and the same items as a top-level YAML list (Tinkerbell's file
// backend) apply on another server to the same objects.
func TestApplyListFormsRoundTrip(t *testing.T) {
	src := startServer(t)
	mustRun(t, src, "apply", "-f", examples)
	want := desired(t, src)
	if len(want) != 3 {
		t.Fatalf("the examples gave %d objects; want 3", len(want))
	}
	var items []any
	for _, kind := range []string{"hardware", "templates", "workflows"} {
		var list struct {
			Items []any `json:"items"`
		}
		if err := yaml.Unmarshal([]byte(mustRun(t, src, "get", kind, "-o", "yaml")), &list); err != nil {
			t.Fatal(err)
		}
		items = append(items, list.Items...)
	}
	kubectl, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}, "items": items})
	if err != nil {
		t.Fatal(err)
	}
	fileBackend, err := yaml.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"kubectl-list.yaml": kubectl, "file-backend.yaml": fileBackend} {
		t.Run(name, func(t *testing.T) {
			dst := startServer(t)
			path := writeFile(t, name, string(content))
			out, errOut, err := run(t, dst, "apply", "--strict", "-f", path)
			if err != nil {
				t.Fatalf("apply: %v\n%s", err, errOut)
			}
			if strings.Count(out, " created") != 3 {
				t.Errorf("apply output = %q; want 3 created", out)
			}
			if got := desired(t, dst); !reflect.DeepEqual(got, want) {
				t.Errorf("applied from %s:\n%v\nwant\n%v", name, got, want)
			}
			if out := mustRun(t, dst, "apply", "-f", path); strings.Count(out, " unchanged") != 3 {
				t.Errorf("re-apply output = %q; want 3 unchanged", out)
			}
		})
	}
}

// TestApplyV1alpha2RoundTrip: v1alpha2 Hardware and Workflow apply (their
// ignored fields warned of), `get --api-version tinkerbell.org/v1alpha2`
// returns the files' specs, the default get their v1alpha1 form, and the
// v1alpha2 output applies back unchanged.
func TestApplyV1alpha2RoundTrip(t *testing.T) {
	srv := startServer(t)
	mustRun(t, srv, "apply", "-f", filepath.Join(examples, "template.yaml"))
	for _, f := range []struct{ file, kind, name string }{
		{"../model/testdata/hardware-v1alpha2.yaml", "hardware", "rack2-node03"},
		{"../model/testdata/workflow-v1alpha2.yaml", "workflow", "rack2-node03-install"},
	} {
		t.Run(f.kind, func(t *testing.T) {
			out, errOut, err := run(t, srv, "apply", "-f", f.file)
			if err != nil {
				t.Fatalf("apply: %v\n%s", err, errOut)
			}
			if !strings.Contains(out, f.kind+"/"+f.name+" created") {
				t.Errorf("apply output = %q", out)
			}
			if !strings.Contains(errOut, "warning: "+f.file+":") || !strings.Contains(errOut, "a Tinkerbell field Anvil ignores (kept in annotation anvil.dev/v1alpha2-fields)") {
				t.Errorf("apply warnings:\n%s", errOut)
			}
			raw, err := os.ReadFile(f.file)
			if err != nil {
				t.Fatal(err)
			}
			var file map[string]any
			if err := yaml.Unmarshal(raw, &file); err != nil {
				t.Fatal(err)
			}
			v2 := mustRun(t, srv, "get", f.kind+"/"+f.name, "-o", "yaml", "--api-version", "tinkerbell.org/v1alpha2")
			var got map[string]any
			if err := yaml.Unmarshal([]byte(v2), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got["spec"], file["spec"]) || got["apiVersion"] != "tinkerbell.org/v1alpha2" {
				t.Errorf("get --api-version v1alpha2:\n%s\nwant the spec of %s", v2, f.file)
			}
			if v1 := mustRun(t, srv, "get", f.kind, f.name, "-o", "yaml"); !strings.Contains(v1, "apiVersion: tinkerbell.org/v1alpha1") ||
				!strings.Contains(v1, "anvil.dev/v1alpha2-fields:") {
				t.Errorf("get -o yaml (v1alpha1):\n%s", v1)
			}
			again := writeFile(t, "again.yaml", v2)
			if out := mustRun(t, srv, "apply", "-f", again); !strings.Contains(out, f.kind+"/"+f.name+" unchanged") {
				t.Errorf("applying the v1alpha2 output: %q; want unchanged", out)
			}
		})
	}
	if _, errOut, err := run(t, srv, "get", "template", "debian-raw", "-o", "yaml", "--api-version", "tinkerbell.org/v1alpha2"); err == nil ||
		!strings.Contains(err.Error()+errOut, "Template has no tinkerbell.org/v1alpha2 form") {
		t.Errorf("get template --api-version v1alpha2 = %v %s; want a refusal", err, errOut)
	}
}

// TestApplyWarningsAndStrict: against a server whose quay.io mirror is a
// registry the test runs (and whose down.lab mirror is not running), apply
// warns of the absent and unreachable images, not of the native or present
// ones, and of a boot mode needing a BMC the Hardware lacks; --strict
// refuses the same file with the same text and stores nothing.
func TestApplyWarningsAndStrict(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	reg.Push(t, reg.Ref("tinkerbell/actions/custom:v1"), ocitest.Image(t, v1.Config{Entrypoint: []string{"/custom"}},
		ocitest.Layer(t, []untartest.Entry{{Name: "custom", Mode: 0o755, Body: "x"}})))
	down := ocitest.NewRegistry(t)
	down.Server.Close()
	srv := startServerWith(t, func(c *server.Config) {
		c.RegistryMirrors = []string{"quay.io=http://" + reg.Host, "down.lab=http://" + down.Host}
	})
	manifest := func(suffix string) string {
		return `apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: fw` + suffix + `}
spec:
  data: |
    version: "0.1"
    name: fw
    global_timeout: 600
    tasks:
      - name: t
        worker: "{{.device_1}}"
        actions:
          - {name: native, image: quay.io/tinkerbell/actions/image2disk:v1.0.0, timeout: 60}
          - {name: present, image: quay.io/tinkerbell/actions/custom:v1, timeout: 60}
          - {name: absent, image: quay.io/tinkerbell/actions/absent:v1, timeout: 60}
          - {name: down, image: down.lab/tools/fw:1, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m1` + suffix + `}
spec:
  auto: {enrollmentEnabled: true}
  interfaces:
  - dhcp: {mac: "02:00:00:00:01:0` + suffix + `"}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w` + suffix + `}
spec:
  templateRef: fw` + suffix + `
  hardwareRef: m1` + suffix + `
  hardwareMap: {device_1: "02:00:00:00:01:0` + suffix + `"}
  bootOptions: {bootMode: customboot}
`
	}
	wantWarnings := func(suffix string) []string {
		return []string{
			`fw.yaml:22: document 2 (Hardware default/m1` + suffix + `): spec.auto: a Tinkerbell field Anvil ignores`,
			`warning: template "fw` + suffix + `" action "absent": image "quay.io/tinkerbell/actions/absent:v1" is not native and could not be resolved via mirror http://` + reg.Host + `: the registry has no such image: `,
			`warning: template "fw` + suffix + `" action "down": image "down.lab/tools/fw:1" is not native and could not be resolved via mirror http://` + down.Host + `: cannot reach the registry: `,
			`warning: workflow "w` + suffix + `": spec.bootOptions.bootMode "customboot" needs a BMC to boot the machine, and hardware "m1` + suffix + `" has no spec.bmcRef`,
		}
	}
	warningLines := func(stderr string) []string {
		return regexp.MustCompile(`(?m)^warning: .*$`).FindAllString(stderr, -1)
	}
	checkWarnings := func(t *testing.T, stderr string, want []string) {
		t.Helper()
		got := warningLines(stderr)
		if len(got) != len(want) {
			t.Errorf("%d warnings; want %d:\n%s", len(got), len(want), stderr)
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks\n%s\nin\n%s", w, stderr)
			}
		}
	}

	out, errOut, err := run(t, srv, "apply", "-f", writeFile(t, "fw.yaml", manifest("1")))
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, errOut)
	}
	if strings.Count(out, " created") != 3 {
		t.Errorf("apply output = %q; want 3 created", out)
	}
	checkWarnings(t, errOut, wantWarnings("1"))

	_, errOut, err = run(t, srv, "apply", "--strict", "-f", writeFile(t, "fw.yaml", manifest("2")))
	if err == nil {
		t.Fatal("apply --strict of a file with warnings succeeded")
	}
	if !strings.Contains(errOut, "fw.yaml: refused (strict): 4 warning(s), nothing applied") {
		t.Errorf("strict refusal:\n%s", errOut)
	}
	for _, w := range wantWarnings("2") {
		if !strings.Contains(errOut, strings.TrimPrefix(w, "warning: ")) {
			t.Errorf("strict refusal lacks\n%s\nin\n%s", w, errOut)
		}
	}
	for _, obj := range [][]string{{"template", "fw2"}, {"hardware", "m12"}, {"workflow", "w2"}} {
		if _, _, err := run(t, srv, "get", obj[0], obj[1]); err == nil {
			t.Errorf("%s %s exists after a strict refusal", obj[0], obj[1])
		}
	}
}

// TestApplyNoImageCheck: with --no-apply-image-check the server asks no
// registry (the one its mirror names counts no request) and warns of
// nothing about an image it cannot tell is reachable.
func TestApplyNoImageCheck(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	srv := startServerWith(t, func(c *server.Config) {
		c.RegistryMirrors = []string{"quay.io=http://" + reg.Host}
		c.NoApplyImageCheck = true
	})
	path := writeFile(t, "t.yaml", `apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: t}
spec:
  data: |
    version: "0.1"
    name: t
    global_timeout: 60
    tasks:
      - name: t
        worker: "{{.device_1}}"
        actions:
          - {name: absent, image: quay.io/tinkerbell/actions/absent:v1, timeout: 60}
`)
	out, errOut, err := run(t, srv, "apply", "--strict", "-f", path)
	if err != nil || !strings.Contains(out, "template/t created") || errOut != "" {
		t.Errorf("apply --strict = %v\n%s%s; want the template created without warnings", err, out, errOut)
	}
	if n := reg.Requests("/v2/"); n != 0 {
		t.Errorf("the registry got %d requests; want none", n)
	}
}

// TestApplyKubectlExport: an export from a cluster running Tinkerbell
// (server-set metadata, owner references, Tinkerbell's status) applies
// under --strict with no warning.
func TestApplyKubectlExport(t *testing.T) {
	srv := startServer(t)
	out, errOut, err := run(t, srv, "apply", "--strict", "-f", "../model/testdata/kubectl-export.yaml")
	if err != nil || errOut != "" {
		t.Fatalf("apply --strict: %v\n%s", err, errOut)
	}
	for _, w := range []string{"hardware/rack4-node01 created", "template/rack4-node01 created", "workflow/rack4-node01 created"} {
		if !strings.Contains(out, w) {
			t.Errorf("apply output %q lacks %q", out, w)
		}
	}
	var wf struct {
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, srv, "get", "workflow", "rack4-node01", "-n", "tink-system", "-o", "json")), &wf); err != nil {
		t.Fatal(err)
	}
	if wf.Status.State != "SUCCESS" {
		t.Errorf("the exported SUCCESS workflow is %q after apply; want SUCCESS (not run again)", wf.Status.State)
	}
}
