package dhcp

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// FuzzWire checks that Serve's packet path reads and writes packets exactly
// as dhcpv4.FromBytes and DHCPv4.ToBytes do: the same errors (or none), the
// same decoded packet, and the same bytes for the decoded packet and for
// the server's reply to it.
func FuzzWire(f *testing.F) {
	disc, err := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1},
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016")),
		dhcpv4.WithRelay(net.IP{10, 9, 0, 1}))
	if err != nil {
		f.Fatal(err)
	}
	// A relayed PXE DISCOVER.
	f.Add(disc.ToBytes())
	// The same with option 82 and a 300-byte option split in two (RFC 3396).
	disc.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 2, 'x', 'y'}))
	disc.UpdateOption(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(224), bytes.Repeat([]byte{7}, 300)))
	f.Add(disc.ToBytes())
	// A zero-length option, a long sname and file, an odd hlen.
	disc.UpdateOption(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(225), nil))
	disc.ServerHostName = string(bytes.Repeat([]byte{'s'}, 70))
	disc.BootFileName = "file\x00junk"
	b := disc.ToBytes()
	b[2] = 20
	f.Add(b)
	// Truncated: no end option, a cut option, a cut header.
	f.Add(b[:len(b)-70])
	f.Add(b[:241])
	f.Add(b[:100])

	b0 := backendFunc(func(macaddr.MAC) *Host {
		return &Host{Name: "h", IP: netip.MustParseAddr("10.0.0.5"), Netmask: net.CIDRMask(24, 32),
			Gateway: netip.MustParseAddr("10.0.0.1"), Hostname: "h", Domain: "d", LeaseTime: time.Hour, AllowPXE: true,
			Routes: []Route{{Dest: netip.MustParsePrefix("10.1.0.0/16"), Router: netip.MustParseAddr("10.0.0.2")}}}
	})
	s, err := New(Config{ServerIP: netip.MustParseAddr("10.0.0.1"), HTTPBase: "http://10.0.0.1:7080", Backend: b0})
	if err != nil {
		f.Fatal(err)
	}
	sc := newScratch()
	// st is s whose Backend returns one Host value for every MAC, as a
	// watch-fed Backend does, so that templates are kept and reused.
	host, _ := b0.Lookup(context.Background(), macaddr.MAC{})
	st, err := New(Config{ServerIP: netip.MustParseAddr("10.0.0.1"), HTTPBase: "http://10.0.0.1:7080",
		Backend: backendFunc(func(macaddr.MAC) *Host { return host }), Logger: discardLogger})
	if err != nil {
		f.Fatal(err)
	}
	sc2 := newScratch()
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantErr := dhcpv4.FromBytes(data)
		pkt := bytes.Clone(data)
		got, err := sc.parseInto(pkt)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("parseInto error = %v; FromBytes error = %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parseInto = %#v\nFromBytes = %#v", got, want)
		}
		if g, w := appendPacket(nil, got), want.ToBytes(); !bytes.Equal(g, w) {
			t.Fatalf("appendPacket(request) = %x\nToBytes = %x", g, w)
		}
		ctx := context.Background()
		from := netip.MustParseAddrPort("10.9.0.1:67")
		wantResp, wantTo, wantD := s.Reply(ctx, want, from, ServerPort)
		// Serve's packet path, twice: the second answer may come from
		// the template the first one left.
		for range 2 {
			out, to, d := st.process(ctx, sc2, pkt, from, ServerPort)
			if (out == nil) != (wantResp == nil) || to != wantTo {
				t.Fatalf("process = %x to %s; Reply = %v to %s (%s)", out, to, wantResp, wantTo, wantD.Message())
			}
			if out == nil {
				continue
			}
			if !bytes.Equal(out, wantResp.ToBytes()) || !reflect.DeepEqual(*d, wantD) {
				t.Fatalf("process = %x %+v\nReply = %x %+v", out, *d, wantResp.ToBytes(), wantD)
			}
		}
		resp, to, d := s.reply(ctx, got, from, ServerPort, sc)
		if (resp == nil) != (wantResp == nil) || to != wantTo || d.Outcome != wantD.Outcome || d.Message() != wantD.Message() {
			t.Fatalf("reply with scratch = %v %s %q; Reply = %v %s %q", resp != nil, to, d.Message(), wantResp != nil, wantTo, wantD.Message())
		}
		if resp == nil {
			return
		}
		if g, w := appendPacket(nil, resp), wantResp.ToBytes(); !bytes.Equal(g, w) {
			t.Fatalf("appendPacket(reply) = %x\nToBytes = %x", g, w)
		}
	})
}

type backendFunc func(macaddr.MAC) *Host

func (f backendFunc) Lookup(_ context.Context, mac macaddr.MAC) (*Host, error) {
	if h := f(mac); h != nil {
		return h, nil
	}
	return nil, ErrUnknownHost
}

// BenchmarkServePath is one relayed DISCOVER and REQUEST of a reserved
// client through Serve's packet path without the sockets (process: parse,
// decide or fill the template, encode, count, record the machine event),
// as anvil serve runs it (decision log at Warn, machine events on).
func BenchmarkServePath(b *testing.B) {
	pkts, s, sc := reservationExchange(b)
	from := netip.MustParseAddrPort("10.88.0.2:67")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, pkt := range pkts {
			out, _, d := s.process(ctx, sc, pkt, from, ServerPort)
			if out == nil {
				b.Fatal("no answer")
			}
			countReply(d.Reply)
		}
	}
}
