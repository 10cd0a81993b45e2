package dhcp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/dhcp/dhcptest"
	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
)

// The test network: Anvil at 10.0.0.1, machines in 10.0.0.0/24, a relay at
// 10.9.0.1.
const (
	serverIP = "10.0.0.1"
	httpBase = "http://10.0.0.1:7080"
	relayIP  = "10.9.0.1"
)

// Test MACs and the Hardware they stand for.
var (
	macM1        = mustMAC("52:54:00:00:00:01") // full reservation, netboot allowed
	macNoPXE     = mustMAC("52:54:00:00:00:02") // reservation, allowPXE false
	macDisabled  = mustMAC("52:54:00:00:00:03") // disableDhcp
	macOverride  = mustMAC("52:54:00:00:00:04") // tftp_server_name (IP) + boot_file_name
	macNoIP      = mustMAC("52:54:00:00:00:05") // netboot allowed, no address
	macSNPOnly   = mustMAC("52:54:00:00:00:06") // netboot.ipxe.binary = snponly.efi
	macOverrideN = mustMAC("52:54:00:00:00:07") // tftp_server_name is a host name
	macUnknown   = mustMAC("52:54:00:ff:ff:ff")
)

func mustMAC(s string) macaddr.MAC { return macaddr.MustParse(s) }

func testBackend() *dhcptest.Backend {
	b := &dhcptest.Backend{}
	m1 := &dhcp.Host{
		Name:      "default/m1",
		IP:        netip.MustParseAddr("10.0.0.5"),
		Netmask:   net.CIDRMask(24, 32),
		Gateway:   netip.MustParseAddr("10.0.0.1"),
		DNS:       []netip.Addr{netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("9.9.9.9")},
		NTP:       []netip.Addr{netip.MustParseAddr("10.0.0.1")},
		Hostname:  "m1",
		Domain:    "lab.example",
		LeaseTime: 2 * time.Hour,
		Routes:    []dhcp.Route{{Dest: netip.MustParsePrefix("192.168.0.0/16"), Router: netip.MustParseAddr("10.0.0.254")}},
		AllowPXE:  true,
	}
	b.Set(macM1, m1)
	b.Set(macNoPXE, &dhcp.Host{Name: "default/nopxe", IP: netip.MustParseAddr("10.0.0.6"), Netmask: net.CIDRMask(24, 32)})
	b.Set(macDisabled, &dhcp.Host{Name: "default/disabled", DisableDHCP: true, IP: netip.MustParseAddr("10.0.0.7"), AllowPXE: true})
	b.Set(macOverride, &dhcp.Host{Name: "default/override", IP: netip.MustParseAddr("10.0.0.8"), AllowPXE: true,
		TFTPServer: "10.0.0.50", BootFile: "pxelinux.0"})
	b.Set(macNoIP, &dhcp.Host{Name: "default/noip", AllowPXE: true})
	b.Set(macSNPOnly, &dhcp.Host{Name: "default/snponly", IP: netip.MustParseAddr("10.0.0.9"), AllowPXE: true, IPXEBinary: ipxe.BinarySNPOnly})
	b.Set(macOverrideN, &dhcp.Host{Name: "default/overriden", IP: netip.MustParseAddr("10.0.0.10"), AllowPXE: true,
		TFTPServer: "tftp.lab.example", BootFile: "grub.efi"})
	return b
}

func newServer(t testing.TB, mode dhcp.Mode, b dhcp.Backend) *dhcp.Server {
	t.Helper()
	s, err := dhcp.New(dhcp.Config{
		Mode:     mode,
		ServerIP: netip.MustParseAddr(serverIP),
		HTTPBase: httpBase,
		Backend:  b,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// client firmware, as the test packets present themselves.
type firmware struct {
	name        string
	arch        int // option 93; -1: absent
	vendorClass string
}

var (
	fwNone  = firmware{"plain", -1, ""}
	fwBIOS  = firmware{"bios", 0, "PXEClient:Arch:00000:UNDI:002001"}
	fwUEFI  = firmware{"uefi-x86_64", 7, "PXEClient:Arch:00007:UNDI:003016"}
	fwARM64 = firmware{"uefi-arm64", 11, "PXEClient:Arch:00011:UNDI:003000"}
	fwHTTP  = firmware{"http-x86_64", 16, "HTTPClient:Arch:00016:UNDI:003001"}
	// What AAVMF (qemu-efi-aarch64) sends for UEFI HTTP boot.
	fwHTTPARM64 = firmware{"http-arm64", 19, "HTTPClient:Arch:00019:UNDI:003000"}
)

// packet describes a request to build.
type packet struct {
	typ        dhcpv4.MessageType
	mac        macaddr.MAC
	fw         firmware
	userClass  string // option 77 as iPXE sends it (a bare string)
	giaddr     string
	ciaddr     string
	requested  string // option 50
	serverID   string // option 54
	broadcast  bool
	extra      []dhcpv4.Option
	hops       uint8
	opReply    bool
	noMsgType  bool
	noHardware bool
	// longHardware: chaddr is 16 bytes (hlen 16), the first six the MAC.
	longHardware bool
}

func (p packet) build(t testing.TB) *dhcpv4.DHCPv4 {
	t.Helper()
	mods := []dhcpv4.Modifier{dhcpv4.WithHwAddr(p.mac.HardwareAddr())}
	if !p.noMsgType {
		mods = append(mods, dhcpv4.WithMessageType(p.typ))
	}
	if p.fw.arch >= 0 {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, binary.BigEndian.AppendUint16(nil, uint16(p.fw.arch))))
	}
	if p.fw.vendorClass != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClassIdentifier(p.fw.vendorClass)))
	}
	if p.userClass != "" {
		mods = append(mods, dhcpv4.WithUserClass(p.userClass, false))
	}
	if p.giaddr != "" {
		mods = append(mods, dhcpv4.WithRelay(net.ParseIP(p.giaddr)))
	}
	if p.ciaddr != "" {
		mods = append(mods, dhcpv4.WithClientIP(net.ParseIP(p.ciaddr)))
	}
	if p.requested != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(p.requested))))
	}
	if p.serverID != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP(p.serverID))))
	}
	if p.broadcast {
		mods = append(mods, dhcpv4.WithBroadcast(true))
	}
	for _, o := range p.extra {
		mods = append(mods, dhcpv4.WithOption(o))
	}
	req, err := dhcpv4.New(mods...)
	if err != nil {
		t.Fatalf("dhcpv4.New: %v", err)
	}
	if p.hops != 0 {
		req.HopCount = p.hops
	}
	if p.opReply {
		req.OpCode = dhcpv4.OpcodeBootReply
	}
	if p.noHardware {
		req.ClientHWAddr = nil
	}
	if p.longHardware {
		req.ClientHWAddr = append(p.mac.HardwareAddr(), make([]byte, 10)...)
	}
	// What the server sees is what came off the wire.
	parsed, err := dhcpv4.FromBytes(req.ToBytes())
	if err != nil {
		t.Fatalf("FromBytes(built packet): %v", err)
	}
	return parsed
}

// from is where a packet appears to come from: the relay, or a client
// without an address.
func (p packet) from() netip.AddrPort {
	switch {
	case p.giaddr != "":
		return netip.MustParseAddrPort(p.giaddr + ":67")
	case p.ciaddr != "":
		return netip.MustParseAddrPort(p.ciaddr + ":68")
	}
	return netip.MustParseAddrPort("0.0.0.0:68")
}

// absent marks an option that must not be in the reply.
var absent = []byte(nil)

// expect is what a reply must look like. Empty strings are not checked
// unless named in the fields' docs.
type expect struct {
	reply   dhcpv4.MessageType // MessageTypeNone: no reply
	outcome string
	yiaddr  string // checked always when there is a reply: "" means 0.0.0.0
	siaddr  string // likewise
	ciaddr  string // likewise
	file    string // likewise
	sname   string // likewise
	to      string // checked when there is a reply
	opts    map[uint8][]byte
}

func check(t *testing.T, resp *dhcpv4.DHCPv4, to netip.AddrPort, d dhcp.Decision, want expect) {
	t.Helper()
	if d.Outcome != want.outcome {
		t.Errorf("outcome = %q (%s); want %q", d.Outcome, d.Message(), want.outcome)
	}
	if want.reply == dhcpv4.MessageTypeNone {
		if resp != nil {
			t.Errorf("reply = %s; want none", resp.Summary())
		}
		return
	}
	if resp == nil {
		t.Fatalf("no reply (%s); want %s", d.Message(), want.reply)
	}
	// Every reply must survive the wire.
	wire, err := dhcpv4.FromBytes(resp.ToBytes())
	if err != nil {
		t.Fatalf("reply does not parse back: %v", err)
	}
	if got := wire.MessageType(); got != want.reply {
		t.Errorf("reply type = %s; want %s", got, want.reply)
	}
	if d.Reply != want.reply {
		t.Errorf("decision reply = %s; want %s", d.Reply, want.reply)
	}
	if wire.OpCode != dhcpv4.OpcodeBootReply {
		t.Errorf("op = %s; want BootReply", wire.OpCode)
	}
	ipField := func(name string, got net.IP, want string) {
		t.Helper()
		if want == "" {
			want = "0.0.0.0"
		}
		if got.String() != want {
			t.Errorf("%s = %s; want %s", name, got, want)
		}
	}
	ipField("yiaddr", wire.YourIPAddr, want.yiaddr)
	ipField("siaddr", wire.ServerIPAddr, want.siaddr)
	ipField("ciaddr", wire.ClientIPAddr, want.ciaddr)
	if wire.BootFileName != want.file {
		t.Errorf("file = %q; want %q", wire.BootFileName, want.file)
	}
	if wire.ServerHostName != want.sname {
		t.Errorf("sname = %q; want %q", wire.ServerHostName, want.sname)
	}
	if to.String() != want.to {
		t.Errorf("to = %s; want %s", to, want.to)
	}
	for code, v := range want.opts {
		got, ok := wire.Options[code]
		switch {
		case v == nil && ok:
			t.Errorf("option %d = %x; want absent", code, got)
		case v != nil && !bytes.Equal(got, v):
			t.Errorf("option %d = %x (%q); want %x (%q)", code, got, got, v, v)
		}
	}
	// The server identifier is in every reply.
	if got := wire.ServerIdentifier(); !got.Equal(net.ParseIP(serverIP)) {
		t.Errorf("option 54 = %s; want %s", got, serverIP)
	}
}

func ip4(s string) []byte { return netip.MustParseAddr(s).AsSlice() }

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// m1Lease is the lease part of every answer to macM1 in reservation mode.
func m1Lease() map[uint8][]byte {
	return map[uint8][]byte{
		1:   ip4("255.255.255.0"),
		3:   ip4("10.0.0.1"),
		6:   append(ip4("1.1.1.1"), ip4("9.9.9.9")...),
		12:  []byte("m1"),
		15:  []byte("lab.example"),
		42:  ip4("10.0.0.1"),
		51:  u32(7200),
		58:  u32(3600),
		59:  u32(6300),
		121: {16, 192, 168, 10, 0, 0, 254, 0, 10, 0, 0, 1}, // 192.168/16 via .254, then the gateway as default
	}
}

func noLease() map[uint8][]byte {
	return map[uint8][]byte{1: absent, 3: absent, 6: absent, 12: absent, 15: absent, 42: absent, 51: absent, 58: absent, 59: absent, 121: absent}
}

func merge(ms ...map[uint8][]byte) map[uint8][]byte {
	out := map[uint8][]byte{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

var pxeOpts = map[uint8][]byte{60: []byte("PXEClient"), 43: {6, 1, 8, 255}}

const broadcast = "255.255.255.255:68"

func TestReply(t *testing.T) {
	scriptM1 := httpBase + "/ipxe/script/52:54:00:00:00:01/auto.ipxe"
	tests := []struct {
		name string
		mode dhcp.Mode
		port int // 0: 67
		in   packet
		want expect
	}{
		{
			name: "reservation BIOS PXE discover gets lease and undionly over TFTP",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.5", siaddr: serverIP,
				file: "undionly.kpxe", to: broadcast, opts: merge(m1Lease(), pxeOpts)},
		},
		{
			name: "reservation plain client gets only the lease",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwNone},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.5", to: broadcast,
				opts: merge(m1Lease(), map[uint8][]byte{60: absent, 43: absent})},
		},
		{
			name: "reservation request for the reserved address is acked",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, fw: fwUEFI, requested: "10.0.0.5", serverID: serverIP},
			want: expect{reply: dhcpv4.MessageTypeAck, outcome: dhcp.OutcomeAcked, yiaddr: "10.0.0.5", siaddr: serverIP,
				file: "ipxe.efi", to: broadcast, opts: merge(m1Lease(), pxeOpts)},
		},
		{
			name: "reservation request for another address is NAKed",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, requested: "10.0.0.99", serverID: serverIP},
			want: expect{reply: dhcpv4.MessageTypeNak, outcome: dhcp.OutcomeNAK, to: broadcast,
				opts: merge(noLease(), map[uint8][]byte{56: []byte("asked for 10.0.0.99, reserved address is 10.0.0.5")})},
		},
		{
			name: "reservation INIT-REBOOT request without server id for another address is NAKed",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, requested: "192.168.1.20"},
			want: expect{reply: dhcpv4.MessageTypeNak, outcome: dhcp.OutcomeNAK, to: broadcast},
		},
		{
			name: "reservation renewal from a wrong ciaddr is NAKed by broadcast",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, ciaddr: "10.0.0.77"},
			want: expect{reply: dhcpv4.MessageTypeNak, outcome: dhcp.OutcomeNAK, to: broadcast},
		},
		{
			name: "relayed NAK goes to the relay",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, requested: "10.0.0.99", giaddr: relayIP},
			want: expect{reply: dhcpv4.MessageTypeNak, outcome: dhcp.OutcomeNAK, to: relayIP + ":67"},
		},
		{
			name: "reservation renewal is acked by unicast to ciaddr",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, ciaddr: "10.0.0.5"},
			want: expect{reply: dhcpv4.MessageTypeAck, outcome: dhcp.OutcomeAcked, yiaddr: "10.0.0.5", ciaddr: "10.0.0.5",
				to: "10.0.0.5:68", opts: m1Lease()},
		},
		{
			name: "request selecting another server is ignored",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, requested: "10.0.0.99", serverID: "10.0.0.2"},
			want: expect{outcome: dhcp.OutcomeIgnored},
		},
		{
			name: "inform is acked without address or lease time, to ciaddr",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeInform, mac: macM1, ciaddr: "10.0.0.5"},
			want: expect{reply: dhcpv4.MessageTypeAck, outcome: dhcp.OutcomeAcked, ciaddr: "10.0.0.5", to: "10.0.0.5:68",
				opts: map[uint8][]byte{1: ip4("255.255.255.0"), 3: ip4("10.0.0.1"), 51: absent, 58: absent, 59: absent}},
		},
		{
			name: "release is logged, not answered",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeRelease, mac: macM1, ciaddr: "10.0.0.5"},
			want: expect{outcome: dhcp.OutcomeReleased},
		},
		{
			name: "decline is logged, not answered",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDecline, mac: macM1, requested: "10.0.0.5"},
			want: expect{outcome: dhcp.OutcomeDeclined},
		},
		{
			name: "disableDhcp is not answered",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macDisabled, fw: fwBIOS},
			want: expect{outcome: dhcp.OutcomeDHCPDisabled},
		},
		{
			name: "disableDhcp is not answered in auto-proxy either",
			mode: dhcp.ModeAutoProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macDisabled, fw: fwBIOS},
			want: expect{outcome: dhcp.OutcomeDHCPDisabled},
		},
		{
			name: "TFTP server and boot file override the netboot logic",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macOverride, fw: fwUEFI, userClass: "iPXE"},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.8", siaddr: "10.0.0.50",
				sname: "10.0.0.50", file: "pxelinux.0", to: broadcast, opts: map[uint8][]byte{66: absent}},
		},
		{
			name: "a TFTP server name goes in sname and option 66",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macOverrideN, fw: fwBIOS},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.10",
				sname: "tftp.lab.example", file: "grub.efi", to: broadcast, opts: map[uint8][]byte{66: []byte("tftp.lab.example")}},
		},
		{
			name: "the override reaches clients that are not PXE clients",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macOverride, fw: fwNone},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.8", siaddr: "10.0.0.50",
				sname: "10.0.0.50", file: "pxelinux.0", to: broadcast, opts: map[uint8][]byte{60: absent, 43: absent}},
		},
		{
			name: "ipxe binary override",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macSNPOnly, fw: fwUEFI},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.9", siaddr: serverIP,
				file: "snponly.efi", to: broadcast},
		},
		{
			name: "ipxe binary override for HTTP boot is a URL",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macSNPOnly, fw: fwHTTP},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.9", siaddr: serverIP,
				file: httpBase + "/ipxe/binary/snponly.efi", to: broadcast, opts: map[uint8][]byte{60: []byte("HTTPClient"), 43: absent}},
		},
		{
			name: "reservation host without address: PXE client gets boot information only",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macNoIP, fw: fwBIOS},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, siaddr: serverIP, file: "undionly.kpxe",
				to: broadcast, opts: merge(noLease(), pxeOpts)},
		},
		{
			name: "reservation host without address: plain client is not answered",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macNoIP, fw: fwNone},
			want: expect{outcome: dhcp.OutcomeNotPXEClient},
		},
		{
			name: "architecture without an iPXE binary gets the lease but no boot file",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: firmware{"ia32", 6, "PXEClient:Arch:00006:UNDI:003016"}},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeUnsupportedArch, yiaddr: "10.0.0.5", to: broadcast},
		},
		{
			name: "architecture without an iPXE binary in proxy mode is not answered",
			mode: dhcp.ModeProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: firmware{"ia32", 6, "PXEClient:Arch:00006:UNDI:003016"}},
			want: expect{outcome: dhcp.OutcomeUnsupportedArch},
		},
		{
			name: "architecture from option 60 when option 93 is missing",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: firmware{"uefi-no93", -1, "PXEClient:Arch:00009:UNDI:003016"}},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.5", siaddr: serverIP,
				file: "ipxe.efi", to: broadcast},
		},
		{
			name: "option 175 marks a running iPXE",
			mode: dhcp.ModeReservation,
			in: packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS,
				extra: []dhcpv4.Option{dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(175), []byte{1, 1, 1})}},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.5", siaddr: serverIP,
				file: scriptM1, to: broadcast},
		},
		{
			name: "RFC 3004 user class list with iPXE",
			mode: dhcp.ModeReservation,
			in: packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS,
				extra: []dhcpv4.Option{dhcpv4.OptRFC3004UserClass([]string{"foo", "iPXE"})}},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.5", siaddr: serverIP,
				file: scriptM1, to: broadcast},
		},
		{
			name: "relay agent information and client identifier are echoed, client UUID too",
			mode: dhcp.ModeReservation,
			in: packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS, giaddr: relayIP, extra: []dhcpv4.Option{
				dhcpv4.OptGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 3, 'e', 't', '0'}),
				dhcpv4.OptClientIdentifier([]byte{1, 0x52, 0x54, 0, 0, 0, 1}),
				dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{0}, bytes.Repeat([]byte{0xab}, 16)...)),
			}},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, yiaddr: "10.0.0.5", siaddr: serverIP,
				file: "undionly.kpxe", to: relayIP + ":67", opts: map[uint8][]byte{
					82: {1, 3, 'e', 't', '0'},
					61: {1, 0x52, 0x54, 0, 0, 0, 1},
					97: append([]byte{0}, bytes.Repeat([]byte{0xab}, 16)...),
				}},
		},
		{
			name: "proxy: PXE client gets boot information, no address",
			mode: dhcp.ModeProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwUEFI},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, siaddr: serverIP, file: "ipxe.efi",
				to: broadcast, opts: merge(noLease(), pxeOpts)},
		},
		{
			name: "proxy: REQUEST on port 67 belongs to the other server",
			mode: dhcp.ModeProxy,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, fw: fwUEFI, requested: "192.168.1.50"},
			want: expect{outcome: dhcp.OutcomeIgnored},
		},
		{
			name: "proxy: REQUEST on port 4011 is acked back to its source",
			mode: dhcp.ModeProxy,
			port: dhcp.PXEPort,
			in:   packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, fw: fwUEFI, ciaddr: "192.168.1.50"},
			want: expect{reply: dhcpv4.MessageTypeAck, outcome: dhcp.OutcomeAcked, siaddr: serverIP, ciaddr: "192.168.1.50",
				file: "ipxe.efi", to: "192.168.1.50:68", opts: merge(noLease(), pxeOpts)},
		},
		{
			name: "proxy: DISCOVER on port 4011 is ignored",
			mode: dhcp.ModeProxy,
			port: dhcp.PXEPort,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwUEFI},
			want: expect{outcome: dhcp.OutcomeIgnored},
		},
		{
			name: "proxy: plain client is not answered",
			mode: dhcp.ModeProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwNone},
			want: expect{outcome: dhcp.OutcomeNotPXEClient},
		},
		{
			name: "proxy: allowPXE false is not answered",
			mode: dhcp.ModeProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macNoPXE, fw: fwBIOS},
			want: expect{outcome: dhcp.OutcomeNetbootNotAllowed},
		},
		{
			name: "proxy: inform from iPXE gets the script",
			mode: dhcp.ModeProxy,
			in:   packet{typ: dhcpv4.MessageTypeInform, mac: macM1, fw: fwBIOS, userClass: "iPXE", ciaddr: "192.168.1.50"},
			want: expect{reply: dhcpv4.MessageTypeAck, outcome: dhcp.OutcomeAcked, siaddr: serverIP, ciaddr: "192.168.1.50",
				file: scriptM1, to: "192.168.1.50:68", opts: noLease()},
		},
		{
			name: "unknown MAC in reservation mode",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macUnknown, fw: fwBIOS},
			want: expect{outcome: dhcp.OutcomeUnknownMAC},
		},
		{
			name: "unknown MAC in proxy mode",
			mode: dhcp.ModeProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macUnknown, fw: fwBIOS},
			want: expect{outcome: dhcp.OutcomeUnknownMAC},
		},
		{
			name: "unknown MAC in auto-proxy mode gets iPXE",
			mode: dhcp.ModeAutoProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macUnknown, fw: fwBIOS},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, siaddr: serverIP, file: "undionly.kpxe",
				to: broadcast, opts: merge(noLease(), pxeOpts)},
		},
		{
			name: "unknown MAC in auto-proxy mode, iPXE running, gets its script URL",
			mode: dhcp.ModeAutoProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macUnknown, fw: fwBIOS, userClass: "iPXE"},
			want: expect{reply: dhcpv4.MessageTypeOffer, outcome: dhcp.OutcomeOffered, siaddr: serverIP,
				file: httpBase + "/ipxe/script/52:54:00:ff:ff:ff/auto.ipxe", to: broadcast},
		},
		{
			name: "unknown plain client in auto-proxy mode is not answered",
			mode: dhcp.ModeAutoProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macUnknown},
			want: expect{outcome: dhcp.OutcomeNotPXEClient},
		},
		{
			name: "BOOTREPLY is ignored",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeOffer, mac: macM1, opReply: true},
			want: expect{outcome: dhcp.OutcomeIgnored},
		},
		{
			name: "BOOTP request without message type is ignored",
			mode: dhcp.ModeReservation,
			in:   packet{mac: macM1, noMsgType: true},
			want: expect{outcome: dhcp.OutcomeIgnored},
		},
		{
			name: "too many hops",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, giaddr: relayIP, hops: 17},
			want: expect{outcome: dhcp.OutcomeIgnored},
		},
		{
			name: "no hardware address",
			mode: dhcp.ModeReservation,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, noHardware: true},
			want: expect{outcome: dhcp.OutcomeMalformed},
		},
		{
			// Not Ethernet: no Hardware can have it, even one whose MAC is
			// its first six bytes.
			name: "16-byte hardware address is ignored",
			mode: dhcp.ModeAutoProxy,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS, longHardware: true},
			want: expect{outcome: dhcp.OutcomeIgnored},
		},
		{
			name: "off answers nothing",
			mode: dhcp.ModeOff,
			in:   packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS},
			want: expect{outcome: dhcp.OutcomeIgnored},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.mode, testBackend())
			port := tc.port
			if port == 0 {
				port = dhcp.ServerPort
			}
			req := tc.in.build(t)
			resp, to, d := s.Reply(context.Background(), req, tc.in.from(), port)
			check(t, resp, to, d, tc.want)
		})
	}
}

// TestRequestForAnotherServer: a network boot client next to another DHCP
// server REQUESTs that server's address; proxy-mode Anvil does not answer,
// but its decision names the address, so the machine's later requests
// from it (TFTP) are filed under the machine (internal/bootlog learns
// addresses from DHCP events).
func TestRequestForAnotherServer(t *testing.T) {
	for _, mode := range []dhcp.Mode{dhcp.ModeProxy, dhcp.ModeReservation} {
		t.Run(string(mode), func(t *testing.T) {
			s := newServer(t, mode, testBackend())
			in := packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, fw: fwUEFI, requested: "10.0.0.112", serverID: "10.0.0.2"}
			resp, _, d := s.Reply(context.Background(), in.build(t), in.from(), dhcp.ServerPort)
			if resp != nil || d.Outcome != dhcp.OutcomeIgnored {
				t.Fatalf("Reply = %v, %q; want no reply, %q", resp != nil, d.Outcome, dhcp.OutcomeIgnored)
			}
			if want := netip.MustParseAddr("10.0.0.112"); d.IP != want {
				t.Errorf("Decision.IP = %v; want %v (the address the machine takes from 10.0.0.2)", d.IP, want)
			}
			if msg := d.Message(); !strings.Contains(msg, "another server (10.0.0.2), address 10.0.0.112") {
				t.Errorf("Message() = %q; want it to name the other server and the address", msg)
			}
		})
	}
}

func TestReplyBackendError(t *testing.T) {
	b := testBackend()
	b.Err = errors.New("store unavailable")
	s := newServer(t, dhcp.ModeReservation, b)
	req := packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS}.build(t)
	resp, _, d := s.Reply(context.Background(), req, netip.MustParseAddrPort("0.0.0.0:68"), dhcp.ServerPort)
	if resp != nil || d.Outcome != dhcp.OutcomeBackendError || d.Reason != "store unavailable" {
		t.Errorf("Reply with failing backend = %v, %q, %q; want no reply, %q, %q", resp != nil, d.Outcome, d.Reason,
			dhcp.OutcomeBackendError, "store unavailable")
	}
}

// TestReplyMatrix runs every mode × firmware × user class × Hardware ×
// relayed-or-not × message, and checks each reply against the rules of
// docs/dhcp.md, stated again here in the simplest terms.
func TestReplyMatrix(t *testing.T) {
	type hostCase struct {
		name    string
		mac     macaddr.MAC
		known   bool
		allow   bool
		ip      string
		leaseOf map[uint8][]byte
	}
	hosts := []hostCase{
		{"allow", macM1, true, true, "10.0.0.5", m1Lease()},
		{"deny", macNoPXE, true, false, "10.0.0.6", map[uint8][]byte{1: ip4("255.255.255.0"), 51: u32(3600)}},
		{"unknown", macUnknown, false, false, "", nil},
	}
	msgs := []struct {
		name string
		typ  dhcpv4.MessageType
		port int
	}{
		{"discover", dhcpv4.MessageTypeDiscover, dhcp.ServerPort},
		{"request", dhcpv4.MessageTypeRequest, dhcp.ServerPort},
		{"request-4011", dhcpv4.MessageTypeRequest, dhcp.PXEPort},
	}
	for _, mode := range []dhcp.Mode{dhcp.ModeReservation, dhcp.ModeProxy, dhcp.ModeAutoProxy} {
		s := newServer(t, mode, testBackend())
		for _, fw := range []firmware{fwNone, fwBIOS, fwUEFI, fwARM64, fwHTTP, fwHTTPARM64} {
			for _, uc := range []string{"", "iPXE", "Tinkerbell"} {
				for _, h := range hosts {
					for _, relayed := range []bool{false, true} {
						for _, m := range msgs {
							name := fmt.Sprintf("%s/%s/uc=%s/%s/relayed=%v/%s", mode, fw.name, uc, h.name, relayed, m.name)
							t.Run(name, func(t *testing.T) {
								p := packet{typ: m.typ, mac: h.mac, fw: fw, userClass: uc}
								if relayed {
									p.giaddr = relayIP
								}
								if m.typ == dhcpv4.MessageTypeRequest {
									p.serverID = serverIP
									if m.port == dhcp.PXEPort {
										p.ciaddr = "10.0.0.200"
										p.serverID = ""
									} else if h.ip != "" {
										p.requested = h.ip
									} else {
										p.requested = "10.0.0.200"
									}
								}
								resp, to, d := s.Reply(context.Background(), p.build(t), p.from(), m.port)
								checkMatrix(t, mode, fw, uc, h.known, h.allow, h.ip, h.leaseOf, relayed, m.typ, m.port, resp, to, d)
							})
						}
					}
				}
			}
		}
	}
}

func checkMatrix(t *testing.T, mode dhcp.Mode, fw firmware, uc string, known, allow bool, ip string, leaseOpts map[uint8][]byte,
	relayed bool, typ dhcpv4.MessageType, port int, resp *dhcpv4.DHCPv4, to netip.AddrPort, d dhcp.Decision) {
	t.Helper()
	netboot := fw.vendorClass != "" || uc != ""
	pxePort := port == dhcp.PXEPort
	proxy := mode != dhcp.ModeReservation || pxePort
	// Who is answered.
	var wantOutcome string
	switch {
	case proxy && !netboot:
		wantOutcome = dhcp.OutcomeNotPXEClient
	case !known && mode != dhcp.ModeAutoProxy:
		wantOutcome = dhcp.OutcomeUnknownMAC
	case proxy && !allow && known:
		wantOutcome = dhcp.OutcomeNetbootNotAllowed
	case proxy && typ == dhcpv4.MessageTypeRequest && !pxePort:
		wantOutcome = dhcp.OutcomeIgnored
	case !proxy && netboot && !allow:
		wantOutcome = dhcp.OutcomeNetbootNotAllowed // answered, without boot file
	case typ == dhcpv4.MessageTypeDiscover:
		wantOutcome = dhcp.OutcomeOffered
	default:
		wantOutcome = dhcp.OutcomeAcked
	}
	if d.Outcome != wantOutcome {
		t.Fatalf("outcome = %q (%s); want %q", d.Outcome, d.Message(), wantOutcome)
	}
	answered := wantOutcome == dhcp.OutcomeOffered || wantOutcome == dhcp.OutcomeAcked ||
		(wantOutcome == dhcp.OutcomeNetbootNotAllowed && !proxy)
	if !answered {
		if resp != nil {
			t.Fatalf("reply %s; want none", resp.Summary())
		}
		return
	}
	if resp == nil {
		t.Fatalf("no reply (%s)", d.Message())
	}
	wire, err := dhcpv4.FromBytes(resp.ToBytes())
	if err != nil {
		t.Fatalf("reply does not parse back: %v", err)
	}
	// Address and lease: reservation mode only.
	wantYI := "0.0.0.0"
	if !proxy {
		wantYI = ip
	}
	if got := wire.YourIPAddr.String(); got != wantYI {
		t.Errorf("yiaddr = %s; want %s", got, wantYI)
	}
	for code, v := range leaseOpts {
		got, ok := wire.Options[code]
		if proxy && ok {
			t.Errorf("proxy reply has lease option %d", code)
		}
		if !proxy && !bytes.Equal(got, v) {
			t.Errorf("option %d = %x; want %x", code, got, v)
		}
	}
	// Boot file.
	bootable := netboot && (allow || !known)
	wantFile, wantSI, want60, want43 := "", "0.0.0.0", "", false
	if bootable {
		wantSI = serverIP
		switch {
		case uc != "":
			wantFile = httpBase + ipxe.ScriptPath(d.MAC)
		case fw == fwHTTP:
			wantFile = httpBase + "/ipxe/binary/ipxe.efi"
		case fw == fwHTTPARM64:
			wantFile = httpBase + "/ipxe/binary/ipxe-arm64.efi"
		case fw == fwBIOS:
			wantFile = "undionly.kpxe"
		case fw == fwUEFI:
			wantFile = "ipxe.efi"
		case fw == fwARM64:
			wantFile = "ipxe-arm64.efi"
		}
		switch fw {
		case fwHTTP, fwHTTPARM64:
			want60 = "HTTPClient"
		case fwBIOS, fwUEFI, fwARM64:
			want60, want43 = "PXEClient", true
		}
	}
	if wire.BootFileName != wantFile {
		t.Errorf("file = %q; want %q", wire.BootFileName, wantFile)
	}
	if got := wire.ServerIPAddr.String(); got != wantSI {
		t.Errorf("siaddr = %s; want %s", got, wantSI)
	}
	if got := string(wire.Options[60]); got != want60 {
		t.Errorf("option 60 = %q; want %q", got, want60)
	}
	if got, ok := wire.Options[43]; ok != want43 || (ok && !bytes.Equal(got, []byte{6, 1, 8, 255})) {
		t.Errorf("option 43 = %x (present %v); want present %v", got, ok, want43)
	}
	// Destination.
	var wantTo string
	switch {
	case pxePort:
		wantTo = "10.9.0.1:67"
		if !relayed {
			wantTo = "10.0.0.200:68"
		}
	case relayed:
		wantTo = relayIP + ":67"
	default:
		wantTo = broadcast
	}
	if to.String() != wantTo {
		t.Errorf("to = %s; want %s", to, wantTo)
	}
}

func TestNew(t *testing.T) {
	ok := dhcp.Config{ServerIP: netip.MustParseAddr(serverIP), HTTPBase: httpBase, Backend: testBackend()}
	tests := []struct {
		name    string
		edit    func(*dhcp.Config)
		wantErr bool
	}{
		{"valid", func(*dhcp.Config) {}, false},
		{"bad mode", func(c *dhcp.Config) { c.Mode = "relay" }, true},
		{"no server IP", func(c *dhcp.Config) { c.ServerIP = netip.Addr{} }, true},
		{"IPv6 server IP", func(c *dhcp.Config) { c.ServerIP = netip.MustParseAddr("fd00::1") }, true},
		{"no backend", func(c *dhcp.Config) { c.Backend = nil }, true},
		{"relative HTTP base", func(c *dhcp.Config) { c.HTTPBase = "/boot" }, true},
		{"off needs nothing", func(c *dhcp.Config) { *c = dhcp.Config{Mode: dhcp.ModeOff} }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			_, err := dhcp.New(cfg)
			if (err != nil) != tc.wantErr {
				t.Errorf("New(%s) error = %v; want error %v", tc.name, err, tc.wantErr)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    dhcp.Mode
		wantErr bool
	}{
		{"reservation", dhcp.ModeReservation, false},
		{"proxy", dhcp.ModeProxy, false},
		{"auto-proxy", dhcp.ModeAutoProxy, false},
		{"off", dhcp.ModeOff, false},
		{"", "", true},
		{"Proxy", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := dhcp.ParseMode(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("ParseMode(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestDecisionMessage(t *testing.T) {
	s := newServer(t, dhcp.ModeReservation, testBackend())
	tests := []struct {
		name string
		in   packet
		want string
	}{
		{"offer", packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwUEFI},
			"DISCOVER from 52:54:00:00:00:01 (uefi-x86_64, PXEClient) [default/m1]: OFFER 10.0.0.5, boot file ipxe.efi via TFTP 10.0.0.1"},
		{"unknown", packet{typ: dhcpv4.MessageTypeDiscover, mac: macUnknown},
			"DISCOVER from 52:54:00:ff:ff:ff: no answer: no Hardware has this MAC"},
		{"not allowed", packet{typ: dhcpv4.MessageTypeDiscover, mac: macNoPXE, fw: fwBIOS},
			"DISCOVER from 52:54:00:00:00:02 (bios, PXEClient) [default/nopxe]: OFFER 10.0.0.6, netboot is not allowed for default/nopxe: no boot file"},
		{"nak", packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, requested: "10.0.0.99"},
			"REQUEST from 52:54:00:00:00:01 [default/m1]: NAK 10.0.0.99, asked for 10.0.0.99, reserved address is 10.0.0.5"},
		{"release", packet{typ: dhcpv4.MessageTypeRelease, mac: macM1, ciaddr: "10.0.0.5"},
			"RELEASE from 52:54:00:00:00:01: logged, address 10.0.0.5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, d := s.Reply(context.Background(), tc.in.build(t), tc.in.from(), dhcp.ServerPort)
			if got := d.Message(); got != tc.want {
				t.Errorf("Message() = %q; want %q", got, tc.want)
			}
		})
	}
}
