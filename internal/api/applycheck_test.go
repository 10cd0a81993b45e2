package api_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/oci"
)

// countingChecker answers every image with err and records the checks
// (apply checks concurrently).
type countingChecker struct {
	mu      sync.Mutex
	checked []string
	err     error
}

func (c *countingChecker) Check(_ context.Context, src oci.Source) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked = append(c.checked, src.Ref)
	return c.err
}

func templateWith(name string, actions ...string) string {
	return "apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: " + name + "}\nspec:\n  data: |\n" +
		"    version: \"0.1\"\n    name: x\n    global_timeout: 60\n    tasks:\n      - name: t\n        worker: \"{{.device_1}}\"\n        actions:\n" +
		"          - " + strings.Join(actions, "\n          - ") + "\n"
}

// TestApplyImageRules: a native image is not looked up unless its action
// asks for a container; runtime: native on an image with no native action
// is warned of; the same image in two actions is looked up once; a
// strict dry run refuses too.
func TestApplyImageRules(t *testing.T) {
	checker := &countingChecker{err: errString("the registry has no such image")}
	e := newEnv(t, envOptions{configure: func(c *api.Config) { c.ImageChecker = checker }})
	tpl := templateWith("rules",
		"{name: native, image: quay.io/tinkerbell/actions/cexec:v1.0.0, timeout: 60}",
		"{name: boxed, image: quay.io/tinkerbell/actions/writefile:v1.0.0, runtime: container, timeout: 60}",
		"{name: pinned, image: registry.lab/fw:1, runtime: native, timeout: 60}",
		"{name: a, image: registry.lab/tool:2, timeout: 60}",
		"{name: b, image: registry.lab/tool:2, timeout: 60}",
		"{name: computed, image: \"registry.lab/{{ .name }}:1\", timeout: 60}",
		"{name: odd, image: quay.io/tinkerbell/actions/cexec:v1.0.0, runtime: docker, timeout: 60}")
	r, err := apply(e, tpl, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`template "rules" action "pinned": image "registry.lab/fw:1" has no native action, and runtime: native forbids a container`,
		`template "rules" action "odd": runtime "docker": want container, native or nothing (a workflow of this template fails when it is rendered)`,
		`template "rules" action "boxed": image "quay.io/tinkerbell/actions/writefile:v1.0.0" runs in a container (runtime: container) and could not be resolved from quay.io: the registry has no such image`,
		`template "rules" action "a": image "registry.lab/tool:2" is not native and could not be resolved from registry.lab: the registry has no such image`,
		`template "rules" action "b": image "registry.lab/tool:2" is not native and could not be resolved from registry.lab: the registry has no such image`,
	}
	if !reflect.DeepEqual(r.GetWarnings(), want) {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(r.GetWarnings(), "\n"), strings.Join(want, "\n"))
	}
	if len(checker.checked) != 2 {
		t.Errorf("checked %v; want the writefile container image and registry.lab/tool:2, once each", checker.checked)
	}
	_, err = msgOf(e.man.Apply(context.Background(), connect.NewRequest(&v1.ApplyRequest{
		Source: "s.yaml", Content: templateWith("strict", "{name: a, image: registry.lab/tool:2, timeout: 60}"), DryRun: true, Strict: true})))
	wantCode(t, "strict dry run", err, connect.CodeInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), `s.yaml: refused (strict): 1 warning(s), nothing applied:`+"\n"+`template "strict" action "a": image "registry.lab/tool:2"`) {
		t.Errorf("strict refusal = %v", err)
	}
}

// bootHardware and bootWorkflow are manifests for the boot mode checks.
func bootHardware(name, mac, extra string) string {
	return "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: " + name + "}\nspec:\n" + extra +
		"  interfaces:\n  - dhcp: {mac: \"" + mac + "\"}\n---\n"
}

func bootWorkflow(name, hw, mode string) string {
	return "apiVersion: tinkerbell.org/v1alpha1\nkind: Workflow\nmetadata: {name: " + name + "}\nspec:\n  templateRef: t\n  hardwareRef: " + hw +
		"\n  bootOptions: {bootMode: " + mode + "}\n---\n"
}

const bmcRefLine = "  bmcRef: {apiGroup: bmc.tinkerbell.org, kind: Machine, name: m}\n"

// TestApplyBMCWarning: a Workflow booting by custom BMC operations warns
// when its Hardware (in the file or already stored) has no bmcRef; netboot
// without one does not (somebody powers the machine on, as before).
func TestApplyBMCWarning(t *testing.T) {
	e := newEnv(t, envOptions{})
	tpl := templateWith("t", "{name: a, image: quay.io/tinkerbell/actions/cexec:v1.0.0, timeout: 60}") + "---\n"
	if _, err := apply(e, tpl+bootHardware("stored", "02:00:00:00:02:01", ""), false); err != nil {
		t.Fatal(err)
	}
	r, err := apply(e, bootHardware("with-bmc", "02:00:00:00:02:02", bmcRefLine)+
		bootHardware("no-bmc", "02:00:00:00:02:03", "")+
		bootWorkflow("w1", "with-bmc", "customboot")+bootWorkflow("w2", "no-bmc", "customboot")+bootWorkflow("w3", "stored", "customboot")+
		bootWorkflow("w4", "no-bmc", "netboot")+bootWorkflow("w5", "with-bmc", "netboot"), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`workflow "w2": spec.bootOptions.bootMode "customboot" needs a BMC to boot the machine, and hardware "no-bmc" has no spec.bmcRef: the workflow waits until the machine is booted another way`,
		`workflow "w3": spec.bootOptions.bootMode "customboot" needs a BMC to boot the machine, and hardware "stored" has no spec.bmcRef: the workflow waits until the machine is booted another way`,
	}
	if !reflect.DeepEqual(r.GetWarnings(), want) {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(r.GetWarnings(), "\n"), strings.Join(want, "\n"))
	}
}

// bootMachine is a Machine named m driven by the providers of order.
func bootMachine(order string) string {
	return "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Machine\nmetadata: {name: m}\nspec:\n  connection:\n    host: 10.9.9.9\n" +
		"    authSecretRef: {name: bm-auth}\n    providerOptions: {preferredOrder: [" + order + "]}\n---\n"
}

// TestApplyISOBootRefused: isoboot (and v1alpha1's "iso") is refused at
// apply, naming each thing missing: the Hardware's bmcRef, its Machine,
// virtual media in the Machine's provider (only Redfish has it), an
// isoURL when the server serves no boot ISO (api.Config.BootISO).
// With all of them it is accepted.
func TestApplyISOBootRefused(t *testing.T) {
	tpl := templateWith("t", "{name: a, image: quay.io/tinkerbell/actions/cexec:v1.0.0, timeout: 60}") + "---\n"
	const pre = `spec.bootOptions.bootMode: "isoboot" boots the machine from virtual media through its BMC, and `
	const iso = `, isoURL: "http://10.0.0.1/boot.iso"`
	for _, tc := range []struct {
		name          string
		bootISO       bool
		hw, machine   string
		mode, isoLine string
		want          string // "" accepted
	}{
		{name: "no bmc", mode: "isoboot", isoLine: iso,
			want: pre + `hardware "h" has no spec.bmcRef; use bootMode netboot`},
		{name: "no bmc, no url (iso)", mode: "iso",
			want: `"iso" boots the machine from virtual media through its BMC, and hardware "h" has no spec.bmcRef, and spec.bootOptions.isoURL is empty and this server serves no boot ISO of its own`},
		{name: "no machine", hw: bmcRefLine, mode: "isoboot", isoLine: iso,
			want: pre + `machine "m" (hardware "h"'s spec.bmcRef) does not exist`},
		{name: "ipmi machine", hw: bmcRefLine, machine: bootMachine(""), mode: "isoboot", isoLine: iso,
			want: pre + `machine "m" is driven by ipmitool, which has no virtual media (put redfish first in its spec.connection.providerOptions.preferredOrder)`},
		{name: "amt first", hw: bmcRefLine, machine: bootMachine("intelAMT, redfish"), mode: "isoboot", isoLine: iso,
			want: pre + `machine "m" is driven by intelAMT`},
		{name: "no url", hw: bmcRefLine, machine: bootMachine("redfish"), mode: "isoboot",
			want: pre + `spec.bootOptions.isoURL is empty and this server serves no boot ISO of its own`},
		{name: "redfish and url", hw: bmcRefLine, machine: bootMachine("redfish, ipmitool"), mode: "isoboot", isoLine: iso},
		{name: "redfish and the server's ISO", bootISO: true, hw: bmcRefLine, machine: bootMachine("gofish"), mode: "isoboot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{configure: func(c *api.Config) { c.BootISO = tc.bootISO }})
			_, err := apply(e, tpl+tc.machine+bootHardware("h", "02:00:00:00:02:09", tc.hw)+bootWorkflow("w", "h", tc.mode+tc.isoLine), false)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, "apply", err, connect.CodeInvalidArgument)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Workflow default/w") {
				t.Fatalf("error = %v\nwant it to contain %s", err, tc.want)
			}
			if _, gerr := e.st.Get(context.Background(), model.KindWorkflow, "default", "w"); gerr == nil {
				t.Error("the refused workflow was stored")
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestApplyWaitDaemonImage: waitdaemon's IMAGE is checked as the image
// it is (waitdaemon itself runs natively, whatever the runtime): a native
// IMAGE is not looked up, another is; the server's --action-runtime
// container makes every image one that is pulled.
func TestApplyWaitDaemonImage(t *testing.T) {
	tpl := templateWith("wd",
		"{name: kexec, image: ghcr.io/jacobweinstock/waitdaemon:latest, timeout: 90, environment: {IMAGE: quay.io/tinkerbell/actions/kexec:v1.0.0}}",
		"{name: custom, image: ghcr.io/jacobweinstock/waitdaemon:latest, runtime: container, timeout: 90, environment: {IMAGE: registry.lab/finish:1}}")
	for _, tc := range []struct {
		runtime string
		want    []string
		checked []string
	}{
		{runtime: "", checked: []string{"registry.lab/finish:1"}, want: []string{
			`template "wd" action "custom": waitdaemon's IMAGE "registry.lab/finish:1" runs in a container (runtime: container) and could not be resolved from registry.lab: the registry has no such image`,
		}},
		{runtime: "container", checked: []string{"quay.io/tinkerbell/actions/kexec:v1.0.0", "registry.lab/finish:1"}, want: []string{
			`template "wd" action "kexec": waitdaemon's IMAGE "quay.io/tinkerbell/actions/kexec:v1.0.0" runs in a container (the server's --action-runtime container) and could not be resolved from quay.io: the registry has no such image`,
			`template "wd" action "custom": waitdaemon's IMAGE "registry.lab/finish:1" runs in a container (runtime: container) and could not be resolved from registry.lab: the registry has no such image`,
		}},
	} {
		checker := &countingChecker{err: errString("the registry has no such image")}
		e := newEnv(t, envOptions{configure: func(c *api.Config) { c.ImageChecker, c.ActionRuntime = checker, tc.runtime }})
		r, err := apply(e, tpl, false)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.GetWarnings(), tc.want) {
			t.Errorf("--action-runtime %q: warnings =\n%s\nwant\n%s", tc.runtime, strings.Join(r.GetWarnings(), "\n"), strings.Join(tc.want, "\n"))
		}
		slices.Sort(checker.checked)
		if !slices.Equal(checker.checked, tc.checked) {
			t.Errorf("--action-runtime %q: checked %q; want %q", tc.runtime, checker.checked, tc.checked)
		}
	}
}
