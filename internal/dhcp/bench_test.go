package dhcp_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/dhcp"
)

// BenchmarkExchange is the server's CPU for one relayed DISCOVER and
// REQUEST as perfdhcp sends them, wire to wire (parse, decide, marshal),
// without the sockets.
func BenchmarkExchange(b *testing.B) {
	s := newServer(b, dhcp.ModeReservation, testBackend())
	disc := packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, giaddr: relayIP}.build(b).ToBytes()
	req := packet{typ: dhcpv4.MessageTypeRequest, mac: macM1, giaddr: relayIP, requested: "10.0.0.5", serverID: serverIP}.build(b).ToBytes()
	from := netip.MustParseAddrPort(relayIP + ":67")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, pkt := range [][]byte{disc, req} {
			p, err := dhcpv4.FromBytes(pkt)
			if err != nil {
				b.Fatal(err)
			}
			resp, _, _ := s.Reply(ctx, p, from, dhcp.ServerPort)
			if resp == nil {
				b.Fatal("no reply")
			}
			_ = resp.ToBytes()
		}
	}
}
