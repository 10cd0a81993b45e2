package e2e

import (
	"strings"
	"testing"
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
// the installed OS.
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

	run := runInstallOS(t, ns, a, uefiOS, name, mac, nil)
	t.Logf("UEFI install: QEMU start → agent %.1fs, → workflow SUCCESS %.1fs, → installed OS %.1fs",
		run.res.seen[markerAgent].Seconds(), run.success.Seconds(), run.res.seen[markerInstalled].Seconds())
	assertInstalledOS(t, a, run, name, mac, ip)

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
