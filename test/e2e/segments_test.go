package e2e

import (
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// Boot paths where Anvil shares the network with other DHCP software: an
// address server beside it (proxy DHCP), a third-party relay in front of
// it, and a VLAN the boot environment reaches it over.

// peerHost is another machine on a lab segment: a namespace joined to the
// segment's bridge by a veth pair, with ip (CIDR) on its end, named dev.
func peerHost(t *testing.T, seg *netns, br, name, dev, ip string) *netns {
	t.Helper()
	host := newNetns(t, name)
	run(t, "ip", "link", "add", dev+"-br", "netns", seg.name, "type", "veth", "peer", dev, "netns", host.name)
	seg.ip("link", "set", dev+"-br", "master", br, "up")
	host.ip("addr", "add", ip, "dev", dev)
	host.ip("link", "set", dev, "up")
	return host
}

// routedLab is the two-subnet lab: the machines' segment (namespace seg:
// br0 with tap0) and the server's subnet (namespace srv), with seg
// routing between them.
//
//	[VM]--tap0--br0 (10.78.0.1) --- veth (10.79.0.1 | 10.79.0.2) --- anvil (10.79.0.2)
//	           namespace "seg"                                   namespace "srv"
func routedLab(t *testing.T) (seg, srv *netns) {
	t.Helper()
	seg = newNetns(t, "seg")
	srv = newNetns(t, "srv")
	seg.bridge("br0", "10.78.0.1/24", "fd78::1/64")
	seg.tap("br0", "tap0")
	run(t, "ip", "link", "add", "vseg", "netns", seg.name, "type", "veth", "peer", "vsrv", "netns", srv.name)
	seg.ip("addr", "add", "10.79.0.1/24", "dev", "vseg")
	seg.ip("link", "set", "vseg", "up")
	srv.ip("addr", "add", "10.79.0.2/24", "dev", "vsrv")
	srv.ip("link", "set", "vsrv", "up")
	srv.ip("route", "add", "10.78.0.0/24", "via", "10.79.0.1")
	if out, err := seg.exec(t.Context(), "sysctl", "-w", "net.ipv4.ip_forward=1"); err != nil {
		t.Fatalf("ip_forward: %v %s", err, out)
	}
	return seg, srv
}

// startDnsmasqDHCP runs dnsmasq in ns as the segment's address server on
// dev: addresses from the pool (dnsmasq's --dhcp-range), the router
// option, nothing about network boot, and every exchange in its log.
func startDnsmasqDHCP(ns *netns, dev, pool, router string, extra ...string) *proc {
	ns.t.Helper()
	args := append([]string{"--keep-in-foreground", "--port=0", "--conf-file=/dev/null", "--pid-file=",
		"--interface=" + dev, "--bind-interfaces", "--dhcp-range=" + pool, "--dhcp-option=option:router," + router,
		"--dhcp-leasefile=" + filepath.Join(ns.t.TempDir(), "leases"), "--no-ping", "--log-dhcp", "--log-facility=-"}, extra...)
	return ns.background("dnsmasq-dhcp-"+dev, "dnsmasq", args...)
}

// dnsmasqACK is dnsmasq's log line for an address it acknowledged.
var dnsmasqACK = regexp.MustCompile(`DHCPACK\(([^)]+)\) ([0-9.]+) ([0-9a-f:]+)`)

// dnsmasqLease returns the address dnsmasq's log says it gave mac on dev,
// or "".
func dnsmasqLease(log, dev, mac string) string {
	for _, m := range dnsmasqACK.FindAllStringSubmatch(log, -1) {
		if m[1] == dev && m[3] == mac {
			return m[2]
		}
	}
	return ""
}

// TestNetbootProxyDHCP: Anvil in proxy mode next to dnsmasq on the same
// segment. dnsmasq hands out the address from its pool and knows nothing
// of network boot; Anvil gives OVMF's PXE client and then iPXE only their
// boot information, never an address, and the machine boots the boot
// environment with dnsmasq's address.
//
//	[VM]--tap0--br0 (10.77.0.1, anvil --dhcp-mode proxy)
//	             └──veth── dnsmasq (10.77.0.2, pool 10.77.0.100-150)
func TestNetbootProxyDHCP(t *testing.T) {
	requireLab(t)
	ns := newNetns(t, "proxy")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	peer := peerHost(t, ns, "br0", "proxy-dhcp", "vdhcp", "10.77.0.2/24")
	dnsmasq := startDnsmasqDHCP(peer, "vdhcp", "10.77.0.100,10.77.0.150,255.255.255.0,10m", serverIP)
	a := startAnvil(t, ns, serverIP, "--dhcp-mode", "proxy")
	name, mac, reserved := "proxied-node", "52:54:00:77:00:40", "10.77.0.40"
	a.apply(t, provisioningYAML(name, mac, reserved, gateway))

	res := ns.boot(vm{name: name, mac: mac, tap: "tap0", uefi: true}, vmTimeout)
	assertBooted(t, res, mac, serverIP+":42113")

	// dnsmasq gave the address: to the firmware, and again to iPXE.
	lease := dnsmasqLease(dnsmasq.output(), "vdhcp", mac)
	if a, err := netip.ParseAddr(lease); err != nil || a.Compare(netip.MustParseAddr("10.77.0.100")) < 0 || a.Compare(netip.MustParseAddr("10.77.0.150")) > 0 {
		t.Fatalf("dnsmasq acknowledged no pool address for %s (got %q); its log:\n%s", mac, lease, tail(dnsmasq.output(), 40))
	}
	if n := strings.Count(dnsmasq.output(), "DHCPACK(vdhcp) "+lease+" "+mac); n < 2 {
		t.Errorf("dnsmasq acknowledged %s to %s %d times; want 2 (firmware, iPXE)", lease, mac, n)
	}
	t.Logf("dnsmasq leased %s; anvil gave the boot", lease)

	// Anvil gave the boot: ipxe.efi to the firmware's PXE client, the
	// script to iPXE, and never an address (not the Hardware's either).
	record := a.cli(t, "logs", "hardware/"+name)
	assertRecord(t, record, "dhcp", "PXEClient", "ipxe.efi")
	// The machine's REQUEST for dnsmasq's lease names it: Anvil files the
	// machine's TFTP download from that address in its record.
	assertRecord(t, record, "dhcp", "another server (10.77.0.2), address "+lease)
	assertRecord(t, record, "dhcp", "iPXE", "auto.ipxe")
	assertRecord(t, record, "tftp", "RRQ ipxe.efi", "sent")
	assertRecord(t, record, "http", "auto.ipxe", "PENDING")
	assertRecord(t, record, "http", "initramfs-x86_64", "200")
	if strings.Contains(record, reserved) {
		t.Errorf("in proxy mode the record mentions the Hardware's address %s; record:\n%s", reserved, record)
	}
	if !strings.Contains(a.p.output(), "source="+lease) {
		t.Errorf("anvil's log has no request from dnsmasq's address %s", lease)
	}
	if n := a.metric(t, "anvil_dhcp_replies_total", `type="offer"`); n < 1 {
		t.Errorf("anvil_dhcp_replies_total{type=offer} = %v; want >= 1", n)
	}
}

// TestNetbootThroughDhcrelay: as TestNetbootThroughRelay, with ISC's
// dhcrelay instead of `anvil relay` in front of Anvil, adding its relay
// agent information (option 82), and OVMF's PXE client as the machine: its
// DHCP goes through the relay, its TFTP download of ipxe.efi and
// everything after through the router.
func TestNetbootThroughDhcrelay(t *testing.T) {
	requireLab(t)
	testtool.RequireBinary(t, "dhcrelay", "isc-dhcp-relay")
	seg, srv := routedLab(t)
	a := startAnvil(t, srv, "10.79.0.2")
	// -a: add option 82 and drop replies that do not bring it back.
	relay := seg.background("dhcrelay", "dhcrelay", "-4", "-d", "-a", "--no-pid", "-id", "br0", "-iu", "vseg", "10.79.0.2")
	name, mac, ip := "dhcrelayed-node", "52:54:00:78:00:31", "10.78.0.31"
	a.apply(t, provisioningYAML(name, mac, ip, "10.78.0.1"))

	res := seg.boot(vm{name: name, mac: mac, tap: "tap0", uefi: true}, vmTimeout)
	assertBooted(t, res, mac, "10.79.0.2:42113")

	// dhcrelay carried both ways, for the firmware and for iPXE.
	log := relay.output()
	for _, want := range []string{"Forwarded BOOTREQUEST for " + mac + " to 10.79.0.2", "Forwarded BOOTREPLY for " + mac + " to " + ip} {
		if strings.Count(log, want) < 2 {
			t.Errorf("dhcrelay's log has %q %d times; want >= 2 (firmware, iPXE):\n%s", want, strings.Count(log, want), tail(log, 40))
		}
	}
	record := a.cli(t, "logs", "hardware/"+name)
	assertRecord(t, record, "dhcp", "PXEClient", ip, "relay", "ipxe.efi")
	assertRecord(t, record, "dhcp", "iPXE", ip, "relay", "auto.ipxe")
	assertRecord(t, record, "tftp", "RRQ ipxe.efi from "+ip, "sent")
	assertRecord(t, record, "http", "initramfs-x86_64", "200")
}

// TestInstallOverVLAN: the provisioning network is VLAN 42. The firmware
// (SeaBIOS with iPXE) boots on the untagged native segment, where dnsmasq
// gives it an address and Anvil, in proxy mode, the boot; the Hardware's
// dhcp.vlan_id puts vlan_id=42 on the boot environment's command line, so
// the agent configures only eth0.42, gets its address there (dnsmasq's
// reservation on VLAN 42: the Hardware's address), and runs the whole
// install over the tagged VLAN, routed to Anvil by the server's leg on the
// VLAN. The installed OS then boots from the disk. The machine is cabled
// to a trunk port (trunkSwitch): untagged to br0, VLAN 42 to br42.
//
//	[VM]==trunk==┬ native ─ br0 (10.77.0.1, anvil --dhcp-mode proxy) ─ dnsmasq vdhcp (10.77.0.2, pool)
//	             └ VLAN 42 ─ br42 (10.42.0.1, the VLAN's router) ─ dnsmasq vdhcp42 (10.42.0.2, 10.42.0.50 for the VM)
func TestInstallOverVLAN(t *testing.T) {
	requireLab(t)
	prepareInstall(t)
	ns := newNetns(t, "vlan")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.ip("link", "add", "br42", "type", "bridge")
	ns.ip("addr", "add", "10.42.0.1/24", "dev", "br42")
	ns.ip("link", "set", "br42", "up")
	sw := startTrunkSwitch(t, ns, "br0", "br42", 42)

	name, mac, ip := "node-vlan", "52:54:00:77:04:20", "10.42.0.50"
	peer := peerHost(t, ns, "br0", "vlan-dhcp", "vdhcp", "10.77.0.2/24")
	run(t, "ip", "link", "add", "vdhcp42-br", "netns", ns.name, "type", "veth", "peer", "vdhcp42", "netns", peer.name)
	ns.ip("link", "set", "vdhcp42-br", "master", "br42", "up")
	peer.ip("addr", "add", "10.42.0.2/24", "dev", "vdhcp42")
	peer.ip("link", "set", "vdhcp42", "up")
	dnsmasq := startDnsmasqDHCP(peer, "vdhcp", "10.77.0.100,10.77.0.150,255.255.255.0,10m", serverIP,
		"--interface=vdhcp42", "--dhcp-range=set:v42,10.42.0.0,static,255.255.255.0,10m",
		"--dhcp-option=tag:v42,option:router,10.42.0.1", "--dhcp-host="+mac+","+ip)

	a := startAnvil(t, ns, serverIP, "--dhcp-mode", "proxy", "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images)
	a.apply(t, installSpec{os: biosOS, name: name, mac: mac, ip: ip, server: serverIP, vlanID: 42,
		imageURL: "http://" + serverIP + ":7080/images/" + biosOS.file}.yaml())

	run := runInstallOS(t, ns, a, biosOS, vm{name: name, mac: mac, netdev: sw.netdev()}, nil)
	t.Logf("install over VLAN 42: QEMU start → agent %.1fs, → workflow SUCCESS %.1fs, → installed OS %.1fs; frames from the machine: %d tagged 42, %d untagged",
		run.res.seen[markerAgent].Seconds(), run.success.Seconds(), run.res.seen[markerInstalled].Seconds(), sw.tagged.Load(), sw.untagged.Load())
	assertInstalled(t, a, run, name, mac, ip)

	// The boot environment was told the VLAN and the agent used it alone.
	for _, want := range []string{"vlan_id=42", "eth0.42: " + ip + "/24 from DHCP server 10.42.0.2"} {
		if !strings.Contains(run.res.serial, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if sw.tagged.Load() == 0 {
		t.Error("the machine sent no frame tagged with VLAN 42")
	}
	// dnsmasq: the firmware's address on the native segment, the agent's
	// on VLAN 42.
	log := dnsmasq.output()
	if lease := dnsmasqLease(log, "vdhcp", mac); lease == "" {
		t.Errorf("dnsmasq gave %s no address on the native segment:\n%s", mac, tail(log, 40))
	}
	if lease := dnsmasqLease(log, "vdhcp42", mac); lease != ip {
		t.Errorf("dnsmasq's address for %s on VLAN 42 = %q; want %s:\n%s", mac, lease, ip, tail(log, 40))
	}
	// Anvil: the image and the metadata went to the VLAN address.
	for _, want := range []string{"path=/images/" + biosOS.file + " route=/images/{path...} code=200", "path=/metadata route=/metadata code=200"} {
		if !logLineHas(a.p.output(), want, "source="+ip) {
			t.Errorf("anvil's log has no %q from %s", want, ip)
		}
	}
}

// logLineHas reports whether one line of log contains every one of wants.
func logLineHas(log string, wants ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, w := range wants {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}
