package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// markerLocalDisk is what Anvil's local-disk iPXE script echoes on the
// console (internal/ipxe).
const markerLocalDisk = "booting from local disk"

// TestInstallUEFI: a blank UEFI machine (OVMF, q35) is installed end to end
// and boots the installed OS from its disk. OVMF's own PXE client loads
// ipxe.efi, the boot environment's agent writes the GPT disk with its EFI
// system partition (make-os-image.sh --uefi) and names the machine in the
// systemd-boot entry. The machine keeps netboot on, so its next network
// boot gets iPXE again and Anvil's local-disk script, whose `exit` hands
// the machine back to OVMF's boot manager; OVMF goes on through the NIC's
// other boot options to the disk (bootindex 2), whose systemd-boot boots
// the installed OS. The agent's inventory of the machine is on its
// Hardware: the serial and disk given on QEMU's command line, UEFI with
// Secure Boot off (OVMF's non-secure-boot build).
func TestInstallUEFI(t *testing.T) {
	requireLab(t)
	prepareInstall(t)
	ns := newNetns(t, "uefi-install")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP, "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images)
	name, mac, ip := "node-uefi-install", "52:54:00:77:02:10", "10.77.0.210"
	a.apply(t, installSpec{os: uefiOS, name: name, mac: mac, ip: ip, server: serverIP, keepNetboot: true,
		imageURL: "http://" + serverIP + ":7080/images/" + uefiOS.file}.yaml())

	const serial = "anvil-e2e-uefi"
	run := runInstallOS(t, ns, a, uefiOS, vm{name: name, mac: mac, tap: "tap0",
		qemuArgs: []string{"-smbios", "type=1,serial=" + serial}}, nil)
	t.Logf("UEFI install: QEMU start → agent %.1fs, → workflow SUCCESS %.1fs, → installed OS %.1fs",
		run.res.seen[markerAgent].Seconds(), run.success.Seconds(), run.res.seen[markerInstalled].Seconds())
	assertInstalledOS(t, a, run, name, mac, ip)
	assertInventory(t, a, name, serial, mac)

	// On the console: the boot environment, then iPXE's local-disk
	// script, then the installed OS, in that order.
	agent := strings.Index(run.res.serial, markerAgent)
	local := strings.LastIndex(run.res.serial, markerLocalDisk)
	installed := strings.Index(run.res.serial, markerInstalled)
	if agent < 0 || local < agent || installed < local {
		t.Errorf("console order: agent at %d, local-disk script at %d, installed OS at %d; want them in that order", agent, local, installed)
	}
	record := a.cli(t, "logs", "hardware/"+name)
	// The first boot went through the firmware's PXE (ipxe.efi over TFTP)
	// into the boot environment; the one after the install got the
	// local-disk script.
	assertRecord(t, record, "tftp", "RRQ ipxe.efi", "sent")
	assertRecord(t, record, "http", "initramfs-x86_64", "200")
	assertRecord(t, record, "http", uefiOS.file, "200")
	assertRecord(t, record, "http", "auto.ipxe", markerLocalDisk)
}

// assertInventory checks the inventory the agent sent (internal/hwinfo)
// on the Hardware name: the SMBIOS serial given to QEMU, the lab VM's one
// vCPU and its virtio disk, its NIC, and UEFI with Secure Boot off.
func assertInventory(t *testing.T, a *anvil, name, serial, mac string) {
	t.Helper()
	out := a.cli(t, "get", "hardware", name, "-o", "json")
	var hw struct {
		Status struct {
			Attributes *model.Attributes `json:"attributes"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &hw); err != nil {
		t.Fatalf("hardware %s as JSON: %v\n%s", name, err, out)
	}
	at := hw.Status.Attributes
	if at == nil || at.Anvil == nil {
		t.Fatalf("hardware %s has no status.attributes:\n%s", name, out)
	}
	if at.Product == nil || at.Product.SerialNumber != serial || at.Product.Vendor != "QEMU" {
		t.Errorf("product = %+v; want QEMU's with serial %s", at.Product, serial)
	}
	if at.CPU == nil || at.CPU.TotalThreads != 1 {
		t.Errorf("cpu = %+v; want the VM's one vCPU", at.CPU)
	}
	if len(at.BlockDevices) == 0 || !strings.HasPrefix(at.BlockDevices[len(at.BlockDevices)-1].Name, "vd") {
		t.Errorf("blockDevices = %+v; want the virtio disk", at.BlockDevices)
	}
	found := false
	for _, n := range at.NetworkInterfaces {
		found = found || n.MAC == mac
	}
	if !found {
		t.Errorf("networkInterfaces = %+v; want one with MAC %s", at.NetworkInterfaces, mac)
	}
	if at.Anvil.Firmware != "uefi" || at.Anvil.SecureBoot != "disabled" {
		t.Errorf("firmware %q, secure boot %q; want uefi, disabled", at.Anvil.Firmware, at.Anvil.SecureBoot)
	}
}

// ovmfHTTPBootOnly leaves OVMF's HTTP boot client as the NIC's only boot
// option: its PXE clients (IPv4 and IPv6) and its IPv6 stack are switched
// off through fw_cfg (edk2's OvmfPkg/RUNTIME_CONFIG.md), so the firmware
// cannot fall back to PXE.
var ovmfHTTPBootOnly = []string{
	"-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=no",
	"-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=no",
}

// TestHTTPBootUEFI: OVMF's own UEFI HTTP boot client asks for DHCP as
// HTTPClient (arch 16), Anvil answers with option 60 HTTPClient and the
// http:// URL of ipxe.efi, the firmware downloads it over HTTP (no TFTP at
// all), and that iPXE fetches its script and boots the boot environment.
func TestHTTPBootUEFI(t *testing.T) {
	requireLab(t)
	ns := newNetns(t, "httpboot")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP)
	mac := "52:54:00:77:00:21"
	a.apply(t, provisioningYAML("httpboot-node", mac, "10.77.0.21", gateway))

	res := ns.boot(vm{name: "httpboot-node", mac: mac, tap: "tap0", uefi: true, qemuArgs: ovmfHTTPBootOnly}, vmTimeout)
	assertBooted(t, res, mac, serverIP+":42113")
	if !strings.Contains(res.serial, "HTTPv4") {
		t.Errorf("OVMF did not boot its HTTP boot option; serial:\n%s", tail(res.serial, 40))
	}

	record := a.cli(t, "logs", "hardware/httpboot-node")
	binaryURL := "http://" + serverIP + ":7080/ipxe/binary/ipxe.efi"
	assertRecord(t, record, "dhcp", "HTTPClient", "10.77.0.21", binaryURL)
	assertRecord(t, record, "http", "/ipxe/binary/ipxe.efi", "200")
	assertRecord(t, record, "http", "auto.ipxe", "PENDING")
	assertRecord(t, record, "http", "initramfs-x86_64", "200")
	if strings.Contains(record, "RRQ") {
		t.Errorf("an HTTP boot used TFTP; record:\n%s", record)
	}
	if n := a.metric(t, "anvil_http_boot_requests_total", `route="/ipxe/binary/{name}"`, `code="200"`); n < 1 {
		t.Errorf("anvil_http_boot_requests_total{route=/ipxe/binary/{name},code=200} = %v; want >= 1", n)
	}
}
