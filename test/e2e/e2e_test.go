// Package e2e holds Anvil's end-to-end tests: the real anvil binary serving
// in a private network namespace, real firmware (SeaBIOS with iPXE's option
// ROM, OVMF's own PXE client) in QEMU under TCG as the machines, and
// assertions on the server's own records (machine logs, metrics), not just
// on the serial console.
//
// They need root, /dev/net/tun, QEMU, OVMF, dnsmasq (IPv6 router
// advertisements, and the address server beside Anvil's proxy DHCP), ISC
// dhcrelay, systemd-boot's EFI binary (the UEFI test OS) and curl, and
// TestGuides the programs the guides run (jq, cloud-init) and util-linux's
// unshare and nsenter, and TestKubernetesModeInstall kube-apiserver (`make
// kube`) and etcd; `make test` installs them. In CI they fail
// when something is missing; elsewhere they skip.
package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "anvil-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Geteuid() == 0 {
		if err := buildAssets(dir); err != nil {
			// Tests report it through requireLab (failing in CI).
			fmt.Fprintln(os.Stderr, "e2e: preparing assets:", err)
			assets.anvil = ""
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// vmTimeout bounds one VM run under TCG on a busy 2-core machine; a normal
// BIOS boot takes ~10 s and a UEFI one ~20 s.
const vmTimeout = 3 * time.Minute

// vmTimeoutUnknown is how long an unknown machine is left trying: long
// enough for several DHCP attempts.
const vmTimeoutUnknown = 25 * time.Second

// hardwareYAML is a Hardware for mac with a fixed address, allowed to
// netboot, and a Template + Workflow so that its script is the boot
// environment.
func provisioningYAML(name, mac, ip, gateway string) string {
	return fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: %[1]s
spec:
  interfaces:
    - dhcp:
        mac: %[2]s
        hostname: %[1]s
        arch: x86_64
        lease_time: 600
        ip: {address: %[3]s, netmask: 255.255.255.0, gateway: %[4]s}
        name_servers: [%[4]s]
      netboot:
        allowPXE: true
        allowWorkflow: true
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata:
  name: %[1]s-install
spec:
  data: |
    version: "0.1"
    name: install
    global_timeout: 600
    tasks:
      - name: os-installation
        worker: "{{.device_1}}"
        actions:
          - name: stream-image
            image: quay.io/tinkerbell/actions/image2disk:latest
            timeout: 300
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata:
  name: %[1]s-install
spec:
  templateRef: %[1]s-install
  hardwareRef: %[1]s
  hardwareMap:
    device_1: %[2]s
`, name, mac, ip, gateway)
}

// assertBooted checks the serial console shows the test initramfs running
// with the kernel arguments the boot policy promised.
func assertBooted(t *testing.T, res vmResult, mac, grpcAuthority string) {
	t.Helper()
	i := strings.Index(res.serial, "ANVIL-E2E-BOOTED")
	if i < 0 {
		t.Fatalf("the VM did not boot the test initramfs (err %v); serial tail:\n%s", res.err, tail(res.serial, 40))
	}
	line := res.serial[i:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	for _, want := range []string{"worker_id=" + mac, "grpc_authority=" + grpcAuthority, "console=ttyS0"} {
		if !strings.Contains(line, want) {
			t.Errorf("kernel command line lacks %q: %s", want, line)
		}
	}
	if res.err != nil {
		t.Errorf("VM did not power off cleanly: %v", res.err)
	}
}

// assertRecord checks the machine's record on the server (anvil logs) has
// a line from service containing each of wants.
func assertRecord(t *testing.T, record, service string, wants ...string) {
	t.Helper()
	for _, line := range strings.Split(record, "\n") {
		if !strings.Contains(line, service) {
			continue
		}
		all := true
		for _, w := range wants {
			if !strings.Contains(line, w) {
				all = false
				break
			}
		}
		if all {
			return
		}
	}
	t.Errorf("the machine record has no %s line with %q; record:\n%s", service, wants, record)
}
