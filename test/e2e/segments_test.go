package e2e

import (
	"regexp"
	"strings"
	"testing"
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
		"--dhcp-leasefile=" + ns.t.TempDir() + "/leases", "--no-ping", "--log-dhcp", "--log-facility=-"}, extra...)
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
	if lease == "" || !strings.HasPrefix(lease, "10.77.0.1") {
		t.Fatalf("dnsmasq acknowledged no pool address for %s; its log:\n%s", mac, tail(dnsmasq.output(), 40))
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
