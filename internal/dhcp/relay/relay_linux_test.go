package relay_test

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/dhcp/dhcptest"
	"github.com/anvilproj/anvil/internal/dhcp/relay"
)

// TestRelayNetns is the deployment in miniature, in three network
// namespaces: a PXE client (nclient4) on segment 10.1.0.0/24, the relay
// between that segment (r0, 10.1.0.1) and the server's (r1, 10.2.0.1), and
// the real DHCP server at 10.2.0.2 on port 67. The client's broadcast DORA
// must end with the reserved address and a boot file, with the relay's
// address as giaddr.
func TestRelayNetns(t *testing.T) {
	cli := dhcptest.NewNetNS(t)
	rel := dhcptest.NewNetNS(t)
	srv := dhcptest.NewNetNS(t)
	dhcptest.Veth(t, cli, "c0", "", clientMAC.String(), rel, "r0", "10.1.0.1/24", "")
	dhcptest.Veth(t, rel, "r1", "10.2.0.1/24", "", srv, "s0", "10.2.0.2/24", "")
	srv.IP(t, "route", "add", "10.1.0.0/24", "via", "10.2.0.1")

	b := &dhcptest.Backend{}
	b.Set(clientMAC, &dhcp.Host{
		Name: "default/m1", IP: netip.MustParseAddr("10.1.0.50"), Netmask: net.CIDRMask(24, 32),
		Gateway: netip.MustParseAddr("10.1.0.1"), AllowPXE: true,
	})
	s, err := dhcp.New(dhcp.Config{
		ServerIP: netip.MustParseAddr("10.2.0.2"),
		HTTPBase: "http://10.2.0.2:7080",
		Backend:  b,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var srvConn net.PacketConn
	if err := srv.Do(func() (err error) {
		srvConn, err = dhcp.ListenInterface(netip.MustParseAddr("10.2.0.2"), dhcp.ServerPort)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srvConn.Close()
	srvDone := make(chan error, 1)
	go func() { srvDone <- s.Serve(ctx, srvConn) }()

	var r *relay.Relay
	if err := rel.Do(func() (err error) {
		r, err = relay.New(relay.Config{Interface: "r0", Servers: []netip.AddrPort{netip.MustParseAddrPort("10.2.0.2:67")}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	relDone := make(chan error, 1)
	go func() { relDone <- r.Run(ctx) }()

	var client *nclient4.Client
	if err := cli.Do(func() (err error) {
		client, err = nclient4.New("c0", nclient4.WithTimeout(2*time.Second), nclient4.WithRetry(3))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Request(ctx,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, binary.BigEndian.AppendUint16(nil, 0)))
	if err != nil {
		t.Fatalf("DORA through the relay: %v", err)
	}
	ack := lease.ACK
	if ack.YourIPAddr.String() != "10.1.0.50" || ack.GatewayIPAddr.String() != "10.1.0.1" || ack.BootFileName != "undionly.kpxe" ||
		ack.ServerIPAddr.String() != "10.2.0.2" {
		t.Errorf("ACK = %s; want 10.1.0.50 via giaddr 10.1.0.1, undionly.kpxe from 10.2.0.2", ack.Summary())
	}
	cancel()
	for name, c := range map[string]chan error{"server": srvDone, "relay": relDone} {
		if err := <-c; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
