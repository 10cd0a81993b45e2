package relay_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/dhcp/dhcptest"
	"github.com/anvilproj/anvil/internal/dhcp/relay"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/testtool"
)

// clientMAC is the client's MAC: as the Backend knows it, and (clientHW)
// as the packet library wants it.
var (
	clientMAC = macaddr.MustParse("52:54:00:00:00:01")
	clientHW  = clientMAC.HardwareAddr()
)

func listen(t *testing.T, addr string) net.PacketConn {
	t.Helper()
	c, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func port(c net.PacketConn) int { return c.LocalAddr().(*net.UDPAddr).Port }

func addrPort(c net.PacketConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

// read returns the next DHCP packet on c, or nil after wait.
func read(t *testing.T, c net.PacketConn, wait time.Duration) *dhcpv4.DHCPv4 {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	n, _, err := c.ReadFrom(buf)
	if err != nil {
		return nil
	}
	p, err := dhcpv4.FromBytes(buf[:n])
	if err != nil {
		t.Fatalf("received a packet that does not parse: %v", err)
	}
	return p
}

// notOurs returns how many replies the relay dropped because their giaddr
// is another relay's (anvil_relay_packets_total{to-client,not-ours}).
func notOurs(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "anvil_relay_packets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["direction"] == "to-client" && labels["outcome"] == "not-ours" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func send(t *testing.T, from net.PacketConn, p *dhcpv4.DHCPv4, to net.PacketConn) {
	t.Helper()
	if _, err := from.WriteTo(p.ToBytes(), to.LocalAddr()); err != nil {
		t.Fatal(err)
	}
}

// startRelay runs a relay on loopback sockets with giaddr 127.0.0.1,
// sending replies to clients on clientPort.
func startRelay(t *testing.T, servers []netip.AddrPort, clientPort int) (clientSide, serverSide net.PacketConn) {
	t.Helper()
	clientSide = listen(t, "127.0.0.1:0")
	serverSide = listen(t, "127.0.0.1:0")
	r, err := relay.New(relay.Config{
		Servers:    servers,
		GIAddr:     netip.MustParseAddr("127.0.0.1"),
		ClientPort: clientPort,
		ClientConn: clientSide,
		ServerConn: serverSide,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return clientSide, serverSide
}

// TestRelayForwarding checks the packet edits of RFC 1542 against a fake
// server: giaddr filled in (or kept), hops counted, hop limit, replies for
// another relay dropped, replies to a client with an address unicast.
func TestRelayForwarding(t *testing.T) {
	server := listen(t, "127.0.0.1:0")
	client := listen(t, "127.0.0.2:0")
	clientSide, serverSide := startRelay(t, []netip.AddrPort{addrPort(server)}, port(client))

	tests := []struct {
		name       string
		giaddr     string
		hops       uint8
		wantGI     string // "" : dropped
		wantHops   uint8
		wantSource netip.AddrPort
	}{
		{name: "from a client", wantGI: "127.0.0.1", wantHops: 1},
		{name: "from another relay keeps its giaddr", giaddr: "10.8.0.1", hops: 2, wantGI: "10.8.0.1", wantHops: 3},
		{name: "at the hop limit", giaddr: "10.8.0.1", hops: 16, wantGI: "10.8.0.1", wantHops: 17},
		{name: "past the hop limit", giaddr: "10.8.0.1", hops: 17},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := dhcpv4.NewDiscovery(clientHW, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")))
			if err != nil {
				t.Fatal(err)
			}
			if tc.giaddr != "" {
				req.GatewayIPAddr = net.ParseIP(tc.giaddr)
			}
			req.HopCount = tc.hops
			send(t, client, req, clientSide)
			got := read(t, server, time.Second)
			if tc.wantGI == "" {
				if got != nil {
					t.Fatalf("forwarded %s; want dropped", got.Summary())
				}
				return
			}
			if got == nil {
				t.Fatal("request not forwarded")
			}
			if got.GatewayIPAddr.String() != tc.wantGI || got.HopCount != tc.wantHops || got.TransactionID != req.TransactionID ||
				got.ClassIdentifier() != "PXEClient:Arch:00000:UNDI:002001" {
				t.Errorf("forwarded giaddr %s hops %d xid %s class %q; want giaddr %s hops %d xid %s, options untouched",
					got.GatewayIPAddr, got.HopCount, got.TransactionID, got.ClassIdentifier(), tc.wantGI, tc.wantHops, req.TransactionID)
			}
		})
	}

	t.Run("reply to a client with an address is unicast to ciaddr", func(t *testing.T) {
		ack, err := dhcpv4.New(dhcpv4.WithHwAddr(clientHW),
			dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithClientIP(net.ParseIP("127.0.0.2")),
			dhcpv4.WithGatewayIP(net.ParseIP("127.0.0.1")))
		if err != nil {
			t.Fatal(err)
		}
		ack.OpCode = dhcpv4.OpcodeBootReply
		send(t, server, ack, serverSide)
		got := read(t, client, 2*time.Second)
		if got == nil || got.TransactionID != ack.TransactionID {
			t.Fatalf("client got %v; want the ACK", got)
		}
	})
	t.Run("reply for another relay is dropped", func(t *testing.T) {
		ack, err := dhcpv4.New(dhcpv4.WithHwAddr(clientHW),
			dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithClientIP(net.ParseIP("127.0.0.2")),
			dhcpv4.WithGatewayIP(net.ParseIP("10.8.0.1")))
		if err != nil {
			t.Fatal(err)
		}
		ack.OpCode = dhcpv4.OpcodeBootReply
		want := notOurs(t) + 1
		send(t, server, ack, serverSide)
		// Counted once the relay has dealt with it: had it forwarded the
		// reply, the client would have it queued by now.
		deadline := time.Now().Add(10 * time.Second)
		for notOurs(t) < want {
			if time.Now().After(deadline) {
				t.Fatal("the relay did not count the reply as another relay's within 10 s")
			}
			time.Sleep(time.Millisecond)
		}
		if n, ok := testtool.Queued(t, client.(*net.UDPConn), make([]byte, 2048)); ok {
			t.Fatalf("client got %d bytes; want nothing", n)
		}
	})
	t.Run("garbage is dropped and the relay goes on", func(t *testing.T) {
		if _, err := client.WriteTo([]byte("garbage"), clientSide.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		req, err := dhcpv4.NewDiscovery(clientHW)
		if err != nil {
			t.Fatal(err)
		}
		send(t, client, req, clientSide)
		if got := read(t, server, 2*time.Second); got == nil || got.TransactionID != req.TransactionID {
			t.Fatalf("server got %v; want the DISCOVER after the garbage", got)
		}
	})
}

// TestRelayWithServer: a client with an address renews through the relay
// to the real server, which answers the relay, which unicasts to the client.
func TestRelayWithServer(t *testing.T) {
	srvConn := listen(t, "127.0.0.1:0")
	client := listen(t, "127.0.0.2:0")
	b := &dhcptest.Backend{}
	b.Set(clientMAC, &dhcp.Host{Name: "default/m1", IP: netip.MustParseAddr("127.0.0.2"), Netmask: net.CIDRMask(8, 32)})
	clientSide, serverSide := startRelay(t, []netip.AddrPort{addrPort(srvConn)}, port(client))
	s, err := dhcp.New(dhcp.Config{
		ServerIP:  netip.MustParseAddr("127.0.0.1"),
		HTTPBase:  "http://127.0.0.1:7080",
		Backend:   b,
		RelayPort: port(serverSide),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, srvConn) //nolint:errcheck // ends with ctx

	req, err := dhcpv4.New(dhcpv4.WithHwAddr(clientHW), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(net.ParseIP("127.0.0.2")))
	if err != nil {
		t.Fatal(err)
	}
	send(t, client, req, clientSide)
	got := read(t, client, 5*time.Second)
	if got == nil {
		t.Fatal("no ACK through the relay")
	}
	if got.MessageType() != dhcpv4.MessageTypeAck || got.YourIPAddr.String() != "127.0.0.2" || got.GatewayIPAddr.String() != "127.0.0.1" {
		t.Errorf("reply = %s; want ACK of 127.0.0.2 via giaddr 127.0.0.1", got.Summary())
	}
}

func TestParseServer(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"10.0.0.1", "10.0.0.1:67", false},
		{"10.0.0.1:1067", "10.0.0.1:1067", false},
		{"fd00::1", "", true},
		{"anvil.lab", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := relay.ParseServer(tc.in)
			if (err != nil) != tc.wantErr || (err == nil && got.String() != tc.want) {
				t.Errorf("ParseServer(%q) = %s, %v; want %s, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  relay.Config
	}{
		{"no servers", relay.Config{Interface: "lo"}},
		{"no interface nor giaddr", relay.Config{Servers: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:67")}}},
		{"no such interface", relay.Config{Interface: "nosuchif0", Servers: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:67")}}},
		{"IPv6 server", relay.Config{Interface: "lo", GIAddr: netip.MustParseAddr("127.0.0.1"),
			Servers: []netip.AddrPort{netip.MustParseAddrPort("[fd00::1]:67")}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := relay.New(tc.cfg); err == nil {
				t.Errorf("New(%s) = nil error; want one", tc.name)
			}
		})
	}
}
