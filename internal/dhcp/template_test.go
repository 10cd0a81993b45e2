package dhcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
)

// mapBackend is a Backend over a map whose Hosts a test replaces.
type mapBackend struct {
	mu    sync.Mutex
	hosts map[macaddr.MAC]*Host
}

func (b *mapBackend) Lookup(_ context.Context, mac macaddr.MAC) (*Host, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.hosts[mac]; h != nil {
		return h, nil
	}
	return nil, ErrUnknownHost
}

func (b *mapBackend) set(mac macaddr.MAC, h *Host) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hosts[mac] = h
}

var (
	tmplMAC    = macaddr.MustParse("52:54:00:00:00:01")
	tmplServer = netip.MustParseAddr("10.0.0.1")
)

func tmplHost() *Host {
	return &Host{Name: "default/m1", IP: netip.MustParseAddr("10.0.0.5"), Netmask: net.CIDRMask(24, 32),
		Gateway: netip.MustParseAddr("10.0.0.1"), DNS: []netip.Addr{netip.MustParseAddr("1.1.1.1")},
		Hostname: "m1", Domain: "lab.example", LeaseTime: 2 * time.Hour, AllowPXE: true,
		Routes: []Route{{Dest: netip.MustParsePrefix("192.168.0.0/16"), Router: netip.MustParseAddr("10.0.0.254")}}}
}

func tmplServerFor(t testing.TB, b Backend, events machinelog.Sink) *Server {
	t.Helper()
	s, err := New(Config{ServerIP: tmplServer, HTTPBase: "http://10.0.0.1:7080", Backend: b, Events: events, Logger: discardLogger})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tmplRequest builds a request of type typ from tmplMAC with the given
// modifiers, with transaction ID xid.
func tmplRequest(t testing.TB, typ dhcpv4.MessageType, xid byte, mods ...dhcpv4.Modifier) []byte {
	t.Helper()
	mods = append([]dhcpv4.Modifier{dhcpv4.WithMessageType(typ), dhcpv4.WithTransactionID(dhcpv4.TransactionID{xid, 2, 3, 4})}, mods...)
	p, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(tmplMAC.HardwareAddr())}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p.ToBytes()
}

// reference answers pkt the general way: dhcpv4.FromBytes, Reply, ToBytes.
func reference(t testing.TB, s *Server, pkt []byte, from netip.AddrPort) ([]byte, netip.AddrPort, Decision) {
	t.Helper()
	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		t.Fatal(err)
	}
	resp, to, d := s.Reply(context.Background(), req, from, ServerPort)
	if resp == nil {
		return nil, to, d
	}
	return resp.ToBytes(), to, d
}

// TestTemplateMatchesReply sends requests of many shapes through Serve's
// packet path, each first in one form (which builds the template) and then
// in others that share its template but differ in every patched field, and
// checks each answer, destination and decision against Reply's.
func TestTemplateMatchesReply(t *testing.T) {
	arch := func(a uint16) dhcpv4.Modifier {
		return dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, binary.BigEndian.AppendUint16(nil, a))
	}
	vc := func(s string) dhcpv4.Modifier { return dhcpv4.WithOption(dhcpv4.OptClassIdentifier(s)) }
	uuid := dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{0}, bytes.Repeat([]byte{0xab}, 16)...))
	clientID := dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, []byte{1, 0x52, 0x54, 0, 0, 0, 1})
	relayInfo := dhcpv4.WithGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 3, 'p', 'o', 'r'})
	longClientID := dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, bytes.Repeat([]byte{7}, 200))
	requested := dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IP{10, 0, 0, 5}))
	sid := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP{10, 0, 0, 1}))
	pxe := []dhcpv4.Modifier{arch(7), vc("PXEClient:Arch:00007:UNDI:003016"), uuid}
	shapes := []struct {
		name string
		typ  dhcpv4.MessageType
		mods []dhcpv4.Modifier
	}{
		{"plain discover", dhcpv4.MessageTypeDiscover, nil},
		{"pxe discover", dhcpv4.MessageTypeDiscover, pxe},
		{"bios discover with client id", dhcpv4.MessageTypeDiscover, []dhcpv4.Modifier{arch(0), vc("PXEClient:Arch:00000:UNDI:002001"), clientID}},
		{"http boot discover", dhcpv4.MessageTypeDiscover, []dhcpv4.Modifier{arch(16), vc("HTTPClient:Arch:00016:UNDI:003001")}},
		{"ipxe discover", dhcpv4.MessageTypeDiscover, []dhcpv4.Modifier{dhcpv4.WithUserClass("iPXE", false), uuid}},
		{"unsupported arch", dhcpv4.MessageTypeDiscover, []dhcpv4.Modifier{arch(6), vc("PXEClient:Arch:00006:UNDI:003016")}},
		{"uuid without netboot", dhcpv4.MessageTypeDiscover, []dhcpv4.Modifier{uuid, relayInfo}},
		{"selecting request", dhcpv4.MessageTypeRequest, append([]dhcpv4.Modifier{requested, sid}, pxe...)},
		{"init-reboot request", dhcpv4.MessageTypeRequest, []dhcpv4.Modifier{requested, clientID, relayInfo}},
		{"long client id", dhcpv4.MessageTypeRequest, []dhcpv4.Modifier{requested, longClientID}},
		{"renewing request", dhcpv4.MessageTypeRequest, []dhcpv4.Modifier{dhcpv4.WithClientIP(net.IP{10, 0, 0, 5})}},
	}
	// Variants of the patched fields; the first builds the template.
	variants := []struct {
		name string
		mods []dhcpv4.Modifier
		from string
	}{
		{"relayed", []dhcpv4.Modifier{dhcpv4.WithRelay(net.IP{10, 9, 0, 1})}, "10.9.0.1:67"},
		{"other relay, broadcast flag", []dhcpv4.Modifier{dhcpv4.WithRelay(net.IP{10, 9, 0, 2}), dhcpv4.WithBroadcast(true)}, "10.9.0.2:67"},
		{"direct", nil, "0.0.0.0:68"},
		{"direct, htype 6", []dhcpv4.Modifier{dhcpv4.WithHWType(6)}, "0.0.0.0:68"},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			s := tmplServerFor(t, &mapBackend{hosts: map[macaddr.MAC]*Host{tmplMAC: tmplHost()}}, nil)
			sc := newScratch()
			for i, v := range variants {
				mods := append(append([]dhcpv4.Modifier{}, sh.mods...), v.mods...)
				pkt := tmplRequest(t, sh.typ, byte(i), mods...)
				from := netip.MustParseAddrPort(v.from)
				want, wantTo, wantD := reference(t, s, pkt, from)
				got, to, d := s.process(context.Background(), sc, pkt, from, ServerPort)
				if want == nil {
					t.Fatalf("%s: no reference answer: %s", v.name, wantD.Message())
				}
				if !bytes.Equal(got, want) || to != wantTo || d == nil || !reflect.DeepEqual(*d, wantD) {
					t.Fatalf("%s: answer\n%x to %s %+v\nwant\n%x to %s %+v", v.name, got, to, d, want, wantTo, wantD)
				}
			}
			if s.templates.get(tmplMAC, s.templatesHost(tmplMAC), s.templateKeyOf(t, tmplRequest(t, sh.typ, 0, sh.mods...))) == nil {
				t.Errorf("no template was kept for this shape")
			}
		})
	}
}

// templatesHost is the Host the templates of mac belong to.
func (s *Server) templatesHost(mac macaddr.MAC) *Host {
	s.templates.mu.RLock()
	defer s.templates.mu.RUnlock()
	if e := s.templates.byMAC[mac]; e != nil {
		return e.host
	}
	return nil
}

func (s *Server) templateKeyOf(t testing.TB, pkt []byte) templateKey {
	t.Helper()
	_, key, ok := s.templated(context.Background(), newScratch(), pkt)
	if !ok {
		t.Fatal("not a templated request")
	}
	return key
}

// TestTemplateFollowsHardware checks that an answer from a template follows
// the Host the Backend returns now: a changed Hardware (a new Host) is
// answered from its new values on its next packet, and a Hardware that
// disables DHCP or disappears gets no answer.
func TestTemplateFollowsHardware(t *testing.T) {
	b := &mapBackend{hosts: map[macaddr.MAC]*Host{tmplMAC: tmplHost()}}
	s := tmplServerFor(t, b, nil)
	sc := newScratch()
	from := netip.MustParseAddrPort("10.9.0.1:67")
	disc := func(xid byte) ([]byte, *Decision) {
		pkt := tmplRequest(t, dhcpv4.MessageTypeDiscover, xid, dhcpv4.WithRelay(net.IP{10, 9, 0, 1}))
		out, _, d := s.process(context.Background(), sc, pkt, from, ServerPort)
		if out == nil {
			return nil, nil
		}
		resp, err := dhcpv4.FromBytes(out)
		if err != nil {
			t.Fatal(err)
		}
		if resp.TransactionID[0] != xid {
			t.Fatalf("xid %x, want %x first", resp.TransactionID, xid)
		}
		return []byte(resp.YourIPAddr.To4()), d
	}
	disc(1)
	if ip, _ := disc(2); !bytes.Equal(ip, []byte{10, 0, 0, 5}) {
		t.Fatalf("offered %v, want 10.0.0.5", net.IP(ip))
	}
	if s.templatesHost(tmplMAC) == nil {
		t.Fatal("no template after two DISCOVERs")
	}

	h := tmplHost()
	h.IP = netip.MustParseAddr("10.0.0.77")
	h.Hostname = "renamed"
	b.set(tmplMAC, h)
	ip, d := disc(3)
	if !bytes.Equal(ip, []byte{10, 0, 0, 77}) || d.IP != h.IP {
		t.Fatalf("after the Hardware changed: offered %v (decision %s), want 10.0.0.77", net.IP(ip), d.Message())
	}
	if out := sc.out; !bytes.Contains(out, []byte("renamed")) {
		t.Errorf("after the Hardware changed, the OFFER does not carry the new host name")
	}
	if ip, _ := disc(4); !bytes.Equal(ip, []byte{10, 0, 0, 77}) {
		t.Fatalf("second packet after the change: offered %v, want 10.0.0.77", net.IP(ip))
	}

	off := tmplHost()
	off.DisableDHCP = true
	b.set(tmplMAC, off)
	if ip, d := disc(5); ip != nil {
		t.Fatalf("DHCP disabled: answered %v", net.IP(ip))
	} else if d != nil {
		t.Fatalf("DHCP disabled: decision %s", d.Message())
	}

	b.set(tmplMAC, nil)
	if ip, _ := disc(6); ip != nil {
		t.Fatalf("Hardware deleted: answered %v", net.IP(ip))
	}
}

// TestReservationPathAllocs: once the templates exist, a DISCOVER -> OFFER
// and a REQUEST -> ACK of a reserved client allocate nothing, with machine
// events on and the decision log below Info (as anvil serve runs with
// --log-level warn).
func TestReservationPathAllocs(t *testing.T) {
	pkts, s, sc := reservationExchange(t)
	from := netip.MustParseAddrPort("10.88.0.2:67")
	ctx := context.Background()
	exchange := func() {
		for _, pkt := range pkts {
			if out, _, _ := s.process(ctx, sc, pkt, from, ServerPort); out == nil {
				t.Fatal("no answer")
			}
		}
	}
	exchange() // builds the templates
	if n := testing.AllocsPerRun(100, exchange); n != 0 {
		t.Errorf("%v allocations per DISCOVER+REQUEST, want 0", n)
	}
}

// reservationExchange is a relayed DISCOVER and REQUEST as perfdhcp sends
// them, and a server whose Backend knows the client, that records machine
// events into a channel drained by nobody (Record must not block).
func reservationExchange(t testing.TB) ([][]byte, *Server, *scratch) {
	mac := net.HardwareAddr{0x00, 0x0c, 0x01, 0, 0, 1}
	host := &Host{Name: "default/m1", IP: netip.MustParseAddr("10.88.1.1"), Netmask: net.CIDRMask(16, 32),
		Gateway: netip.MustParseAddr("10.88.0.1"), Hostname: "m1", LeaseTime: time.Hour, AllowPXE: true}
	events := machinelog.SinkFunc(func(machinelog.Event) {})
	s, err := New(Config{ServerIP: netip.MustParseAddr("10.88.0.1"), HTTPBase: "http://10.88.0.1:7080",
		Backend: backendFunc(func(macaddr.MAC) *Host { return host }), Events: events,
		Logger: discardLogger})
	if err != nil {
		t.Fatal(err)
	}
	disc, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithRelay(net.IP{10, 88, 0, 2}))
	if err != nil {
		t.Fatal(err)
	}
	req, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithRelay(net.IP{10, 88, 0, 2}), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IP{10, 88, 1, 1})), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP{10, 88, 0, 1})))
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{disc.ToBytes(), req.ToBytes()}, s, newScratch()
}

// discardLogger is a decision log below Info, as anvil serve --log-level
// warn has it.
var discardLogger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))

// TestOneLookupPerPacket: the template path and the general path share
// one Backend Lookup per packet, for a known MAC without a template yet,
// one with a template, and an unknown one.
func TestOneLookupPerPacket(t *testing.T) {
	var lookups int
	host := tmplHost()
	b := backendFunc(func(mac macaddr.MAC) *Host {
		lookups++
		if mac == tmplMAC {
			return host
		}
		return nil
	})
	s := tmplServerFor(t, b, nil)
	sc := newScratch()
	from := netip.MustParseAddrPort("10.9.0.1:67")
	unknown, err := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0xee, 0xee}, dhcpv4.WithRelay(net.IP{10, 9, 0, 1}))
	if err != nil {
		t.Fatal(err)
	}
	for i, pkt := range [][]byte{
		tmplRequest(t, dhcpv4.MessageTypeDiscover, 1, dhcpv4.WithRelay(net.IP{10, 9, 0, 1})), // builds the template
		tmplRequest(t, dhcpv4.MessageTypeDiscover, 2, dhcpv4.WithRelay(net.IP{10, 9, 0, 1})), // from it
		unknown.ToBytes(),
	} {
		lookups = 0
		out, _, _ := s.process(context.Background(), sc, pkt, from, ServerPort)
		if (out == nil) != (i == 2) {
			t.Fatalf("packet %d: answered %v", i, out != nil)
		}
		if lookups != 1 {
			t.Errorf("packet %d: %d Backend lookups, want 1", i, lookups)
		}
	}
}
