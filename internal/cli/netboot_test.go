package cli

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// twoNICs is a Hardware with two interfaces, netboot allowed on neither
// (the second has no netboot flags at all).
const twoNICs = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: rack1-node08, labels: {rack: "1"}}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:12:34:08", hostname: rack1-node08, ip: {address: 10.20.0.18, netmask: 255.255.255.0}}
    netboot: {allowPXE: false}
  - dhcp: {mac: "3c:ec:ef:12:35:08", hostname: rack1-node08-b, ip: {address: 10.20.0.19, netmask: 255.255.255.0}}
`

// allowWorkflow is each interface's allowWorkflow as stored (unset: true).
func allowWorkflow(t *testing.T, srv, hw string) []bool {
	t.Helper()
	h := getObject[model.Hardware](t, srv, "hardware", hw)
	var out []bool
	for _, i := range h.Spec.Interfaces {
		out = append(out, i.Netboot == nil || model.BoolValue(i.Netboot.AllowWorkflow, true))
	}
	return out
}

// TestNetbootCommand: netboot deny and allow change allowPXE (and, with
// --workflow, allowWorkflow) on every interface or those --mac names,
// print each change, and leave the rest of the Hardware as it was; what
// cannot be done is refused naming the cause.
func TestNetbootCommand(t *testing.T) {
	srv := startServer(t)
	mustRun(t, srv, "apply", "-f", filepath.Join(examples, "hardware.yaml"), "-f", writeFile(t, "node08.yaml", twoNICs))

	out := mustRun(t, srv, "netboot", "deny", "rack1-node07")
	if want := "hardware/rack1-node07: allowPXE false on 3c:ec:ef:12:34:07 (was true)\nhardware/rack1-node07: allowPXE false on every interface (1)\n"; out != want {
		t.Errorf("netboot deny printed\n%s\nwant\n%s", out, want)
	}
	if got := allowPXE(t, srv, "rack1-node07"); !reflect.DeepEqual(got, []bool{false}) {
		t.Errorf("allowPXE after deny: %v", got)
	}
	if out := mustRun(t, srv, "netboot", "deny", "rack1-node07"); !strings.Contains(out, "hardware/rack1-node07 unchanged") {
		t.Errorf("a second deny printed %q; want it unchanged", out)
	}

	// One interface of two, in another spelling of its MAC, and
	// allowWorkflow with it.
	before := getObject[model.Hardware](t, srv, "hardware", "rack1-node08")
	out = mustRun(t, srv, "netboot", "allow", "rack1-node08", "--mac", "3C-EC-EF-12-35-08")
	if want := "hardware/rack1-node08: allowPXE true on 3c:ec:ef:12:35:08 (was false)\nhardware/rack1-node08: allowPXE true on 1 of 2 interfaces\n"; out != want {
		t.Errorf("netboot allow --mac printed\n%s\nwant\n%s", out, want)
	}
	if got := allowPXE(t, srv, "rack1-node08"); !reflect.DeepEqual(got, []bool{false, true}) {
		t.Errorf("allowPXE after allow --mac of the second: %v", got)
	}
	after := getObject[model.Hardware](t, srv, "hardware", "rack1-node08")
	if after.Labels["rack"] != "1" || after.Spec.Interfaces[1].DHCP.Hostname != "rack1-node08-b" || after.Spec.Interfaces[1].Netboot.AllowWorkflow != nil ||
		!reflect.DeepEqual(after.Spec.Interfaces[0], before.Spec.Interfaces[0]) {
		t.Errorf("netboot allow changed more than allowPXE of the second interface: %+v", after)
	}
	out = mustRun(t, srv, "netboot", "deny", "rack1-node08", "--pxe=false", "--workflow", "--mac", "3c:ec:ef:12:34:08")
	if want := "hardware/rack1-node08: allowWorkflow false on 3c:ec:ef:12:34:08 (was true)\n"; !strings.HasPrefix(out, want) {
		t.Errorf("netboot deny --pxe=false --workflow printed\n%s\nwant it to start\n%s", out, want)
	}
	if got := allowWorkflow(t, srv, "rack1-node08"); !reflect.DeepEqual(got, []bool{false, true}) {
		t.Errorf("allowWorkflow after deny --workflow of the first: %v", got)
	}
	if got := allowPXE(t, srv, "rack1-node08"); !reflect.DeepEqual(got, []bool{false, true}) {
		t.Errorf("deny --pxe=false changed allowPXE: %v", got)
	}
	out = mustRun(t, srv, "netboot", "allow", "rack1-node08", "--workflow")
	if want := "hardware/rack1-node08: allowPXE true on 3c:ec:ef:12:34:08 (was false)\nhardware/rack1-node08: allowWorkflow true on 3c:ec:ef:12:34:08 (was false)\nhardware/rack1-node08: allowPXE true on every interface (2)\n"; out != want {
		t.Errorf("netboot allow --workflow printed\n%s\nwant\n%s", out, want)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown hardware", []string{"netboot", "deny", "nope"}, "hardware default/nope not found"},
		{"other namespace", []string{"netboot", "deny", "rack1-node07", "-n", "lab"}, "hardware lab/rack1-node07 not found"},
		{"MAC not on it", []string{"netboot", "deny", "rack1-node07", "--mac", "3c:ec:ef:12:34:99"},
			"hardware default/rack1-node07 has no interface with MAC 3c:ec:ef:12:34:99 (its MACs: 3c:ec:ef:12:34:07)"},
		{"not a MAC", []string{"netboot", "deny", "rack1-node07", "--mac", "eth0"}, `interfaces: "eth0" is not a MAC address`},
		{"no flag", []string{"netboot", "allow", "rack1-node07", "--pxe=false"}, "nothing to allow: --pxe=false without --workflow changes no flag"},
		{"no hardware", []string{"netboot", "allow"}, "accepts 1 arg(s), received 0"},
	} {
		_, _, err := run(t, srv, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: anvil %s: %v; want an error saying %q", tc.name, strings.Join(tc.args, " "), err, tc.want)
		}
	}
	if got := allowPXE(t, srv, "rack1-node07"); !reflect.DeepEqual(got, []bool{false}) {
		t.Errorf("a refused netboot changed allowPXE: %v", got)
	}
}
