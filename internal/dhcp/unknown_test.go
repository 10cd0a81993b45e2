package dhcp_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/dhcp/pool"
)

// With a discovery pool, reservation mode answers a MAC no Hardware has
// with a pool address of its subnet (the relay's, or the server's) and
// boot information; a known MAC still gets its reservation, a Hardware's
// address is never leased, and the proxy modes give no pool address.
func TestReplyUnknownFromPool(t *testing.T) {
	r1, _ := pool.ParseRange("10.0.0.200-10.0.0.201")
	r2, _ := pool.ParseRange("10.7.0.10-10.7.0.10")
	newPools := func() *pool.Pools {
		p, err := pool.New(pool.Config{Ranges: []pool.Range{r1, r2}, ServerIP: netip.MustParseAddr(serverIP),
			Reserved: func(_ context.Context, ip netip.Addr) (bool, error) {
				return ip == netip.MustParseAddr("10.0.0.200"), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	newSrv := func(mode dhcp.Mode) *dhcp.Server {
		s, err := dhcp.New(dhcp.Config{Mode: mode, ServerIP: netip.MustParseAddr(serverIP), HTTPBase: httpBase,
			Backend: testBackend(), Unknown: newPools()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	unknown := mustMAC("52:54:00:00:00:77")
	s := newSrv(dhcp.ModeReservation)
	reply := func(p packet) (*dhcpv4.DHCPv4, dhcp.Decision) {
		resp, _, d := s.Reply(context.Background(), p.build(t), p.from(), dhcp.ServerPort)
		return resp, d
	}

	resp, d := reply(packet{typ: dhcpv4.MessageTypeDiscover, mac: unknown, fw: fwBIOS})
	if resp == nil || d.Outcome != dhcp.OutcomeOffered || resp.YourIPAddr.String() != "10.0.0.201" || d.BootFile == "" {
		t.Fatalf("DISCOVER of an unknown MAC = %v, %+v; want an OFFER of 10.0.0.201 (.200 is reserved) with a boot file", resp != nil, d)
	}
	if got := resp.Options.Get(dhcpv4.OptionIPAddressLeaseTime); len(got) != 4 || net.IP(resp.Options.Get(dhcpv4.OptionSubnetMask)).String() != "255.255.255.0" {
		t.Errorf("lease options %v, mask %v", got, resp.Options.Get(dhcpv4.OptionSubnetMask))
	}
	resp, d = reply(packet{typ: dhcpv4.MessageTypeRequest, mac: unknown, fw: fwBIOS, requested: "10.0.0.201", serverID: serverIP})
	if resp == nil || d.Outcome != dhcp.OutcomeAcked || resp.YourIPAddr.String() != "10.0.0.201" {
		t.Fatalf("REQUEST = %v, %+v; want an ACK of 10.0.0.201", resp != nil, d)
	}
	// A second unknown machine finds the direct pool full.
	if resp, d := reply(packet{typ: dhcpv4.MessageTypeDiscover, mac: mustMAC("52:54:00:00:00:78"), fw: fwBIOS}); resp != nil || d.Outcome != dhcp.OutcomeUnknownMAC {
		t.Errorf("DISCOVER with the pool full = %v, %q; want no answer, %q", resp != nil, d.Outcome, dhcp.OutcomeUnknownMAC)
	}
	// Relayed: the relay's pool, the relay as router.
	resp, d = reply(packet{typ: dhcpv4.MessageTypeDiscover, mac: mustMAC("52:54:00:00:00:79"), fw: fwBIOS, giaddr: "10.7.0.1"})
	if resp == nil || resp.YourIPAddr.String() != "10.7.0.10" || net.IP(resp.Options.Get(dhcpv4.OptionRouter)).String() != "10.7.0.1" {
		t.Errorf("relayed DISCOVER = %v, %+v; want 10.7.0.10 with router 10.7.0.1", resp != nil, d)
	}
	// A known MAC keeps its reservation.
	resp, _ = reply(packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwBIOS})
	if resp == nil || resp.YourIPAddr.String() == "10.0.0.201" || resp.YourIPAddr.String() == "0.0.0.0" {
		t.Errorf("a known MAC got %v; want its reservation", resp)
	}

	// Proxy modes never lease.
	s = newSrv(dhcp.ModeProxy)
	if resp, d := reply(packet{typ: dhcpv4.MessageTypeDiscover, mac: unknown, fw: fwBIOS}); resp != nil || d.Outcome != dhcp.OutcomeUnknownMAC {
		t.Errorf("proxy mode, unknown MAC = %v, %q; want no answer", resp != nil, d.Outcome)
	}
}
