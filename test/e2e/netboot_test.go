package e2e

import (
	"strings"
	"testing"
)

// Addresses of the single-segment lab.
const (
	serverIP = "10.77.0.1"
	gateway  = "10.77.0.1"
)

// TestNetbootBIOS: SeaBIOS runs iPXE from the NIC's option ROM; iPXE asks
// anvil for DHCP (user class iPXE), is sent straight to its script, and the
// script boots the boot environment's kernel and initramfs.
func TestNetbootBIOS(t *testing.T) {
	requireLab(t)
	ns := newNetns(t, "bios")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP)
	mac := "52:54:00:77:00:10"
	a.apply(t, provisioningYAML("bios-node", mac, "10.77.0.10", gateway))

	res := ns.boot(vm{name: "bios-node", mac: mac, tap: "tap0"}, vmTimeout)
	assertBooted(t, res, mac, serverIP+":42113")

	record := a.cli(t, "logs", "hardware/bios-node")
	assertRecord(t, record, "dhcp", "10.77.0.10")
	assertRecord(t, record, "http", "auto.ipxe", "PENDING")
	assertRecord(t, record, "http", "vmlinuz-x86_64", "200")
	assertRecord(t, record, "http", "initramfs-x86_64", "200")
	if n := a.metric(t, "anvil_dhcp_packets_total", `outcome="acked"`); n < 1 {
		t.Errorf("anvil_dhcp_packets_total{outcome=acked} = %v; want >= 1", n)
	}
}

// TestNetbootUEFI: OVMF with the NIC's option ROM disabled, so the
// firmware's own PXE client asks for DHCP (arch 7), loads ipxe.efi over
// TFTP, and that iPXE fetches the script and boots the kernel.
func TestNetbootUEFI(t *testing.T) {
	requireLab(t)
	ns := newNetns(t, "uefi")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP)
	mac := "52:54:00:77:00:20"
	a.apply(t, provisioningYAML("uefi-node", mac, "10.77.0.20", gateway))

	res := ns.boot(vm{name: "uefi-node", mac: mac, tap: "tap0", uefi: true}, vmTimeout)
	assertBooted(t, res, mac, serverIP+":42113")

	record := a.cli(t, "logs", "hardware/uefi-node")
	assertRecord(t, record, "dhcp", "ipxe.efi")
	assertRecord(t, record, "tftp", "RRQ ipxe.efi", "sent", "bytes")
	assertRecord(t, record, "http", "auto.ipxe", "PENDING")
	assertRecord(t, record, "http", "vmlinuz-x86_64", "200")
}

// TestUnknownMACReservation: in reservation mode a machine no Hardware
// names gets no answer at all, and the server records that it asked.
func TestUnknownMACReservation(t *testing.T) {
	requireLab(t)
	ns := newNetns(t, "unknown")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP)
	mac := "52:54:00:77:00:99"

	// iPXE gives up on DHCP after a while and the ROM returns to SeaBIOS,
	// which has nothing else to boot: the VM idles until the timeout.
	res := ns.boot(vm{name: "stranger", mac: mac, tap: "tap0"}, vmTimeoutUnknown)
	if strings.Contains(res.serial, "ANVIL-E2E-BOOTED") {
		t.Fatal("an unknown machine booted the boot environment")
	}
	record := a.cli(t, "logs", "--mac", mac)
	assertRecord(t, record, "dhcp", "unknown-mac")
	if n := a.metric(t, "anvil_dhcp_packets_total", `outcome="unknown-mac"`); n < 1 {
		t.Errorf("anvil_dhcp_packets_total{outcome=unknown-mac} = %v; want >= 1", n)
	}
	if n := a.metric(t, "anvil_dhcp_packets_total", `outcome="offered"`); n != 0 {
		t.Errorf("anvil_dhcp_packets_total{outcome=offered} = %v; want 0 (nothing to offer)", n)
	}
}

// TestNetbootThroughRelay: the machine's segment has no anvil, only
// `anvil relay`; the server sits on another subnet behind a router
// (routedLab).
func TestNetbootThroughRelay(t *testing.T) {
	requireLab(t)
	seg, srv := routedLab(t)
	a := startAnvil(t, srv, "10.79.0.2")
	seg.background("relay", assets.anvil, "relay", "--interface", "br0", "--server", "10.79.0.2")
	mac := "52:54:00:78:00:30"
	a.apply(t, provisioningYAML("relayed-node", mac, "10.78.0.30", "10.78.0.1"))

	res := seg.boot(vm{name: "relayed-node", mac: mac, tap: "tap0"}, vmTimeout)
	assertBooted(t, res, mac, "10.79.0.2:42113")
	record := a.cli(t, "logs", "hardware/relayed-node")
	assertRecord(t, record, "dhcp", "10.78.0.30", "relay")
	assertRecord(t, record, "http", "initramfs-x86_64", "200")
}
