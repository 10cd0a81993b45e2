package bootpolicy

import (
	"context"
	"flag"
	"os"
	"slices"
	"testing"

	"github.com/anvilproj/anvil/internal/httpboot"
	"github.com/anvilproj/anvil/internal/model"
)

var update = flag.Bool("update", false, "rewrite testdata/*.ipxe from the policy's output")

// A Hardware whose netboot.osie points at a HookOS build boots Hook's kernel
// and initramfs with every kernel argument Hook's services read (Smee's
// set: grpc_authority, worker_id, hw_addr, tinkerbell_tls,
// tinkerbell_insecure_tls, syslog_host, facility, vlan_id, console), so the
// tink-agent in it reports to Anvil's gRPC port as the Hardware's agent.
// The whole script is in testdata/hookos.ipxe.
func TestScriptHookOS(t *testing.T) {
	cfg := baseConfig()
	cfg.TLS, cfg.InsecureTLS = true, true // anvil serve's defaults with its own CA
	hook := with(hw("node-07", nic(mac1, "10.0.0.17", bp(true))), func(h *model.Hardware) {
		h.Spec.AgentID = "rack1-node07"
		h.Spec.Metadata = &model.HardwareMetadata{Facility: &model.MetadataFacility{FacilityCode: "lab1"}}
		i := &h.Spec.Interfaces[0]
		i.DHCP.VLANID = "42"
		i.Netboot.OSIE = &model.OSIE{
			BaseURL:      "http://10.0.0.5:8080/hook",
			Kernel:       "vmlinuz-latest-lts-x86_64",
			Initrd:       "initramfs-latest-lts-x86_64",
			KernelParams: []string{"intel_iommu=on", "iommu=pt"},
		}
	})
	p, _ := newPolicy(t, cfg, hook, wf("default", "install", "node-07", "PENDING"))
	s, err := p.Script(context.Background(), httpboot.ScriptRequest{MAC: mustMAC(mac1)})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel", "http://10.0.0.5:8080/hook/vmlinuz-latest-lts-x86_64", "initrd=initramfs-latest-lts-x86_64",
		"grpc_authority=10.0.0.1:42113", "worker_id=rack1-node07", "hw_addr=" + mac1,
		"tinkerbell_tls=true", "tinkerbell_insecure_tls=true", "syslog_host=10.0.0.1", "anvil.server=http://10.0.0.1:7080",
		"console=tty0", "console=ttyS0,115200", "vlan_id=42", "facility=lab1", "intel_iommu=on", "iommu=pt"}
	if got := kernelLine(s.Body); !slices.Equal(got, want) {
		t.Errorf("kernel line:\n%q\nwant\n%q", got, want)
	}
	const golden = "testdata/hookos.ipxe"
	if *update {
		if err := os.WriteFile(golden, []byte(s.Body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if s.Body != string(b) {
		t.Errorf("script differs from %s (go test -update rewrites it):\n%s", golden, s.Body)
	}
}
