package dhcp_test

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/dhcp/dhcptest"
)

func TestListenInterfaceNotOurs(t *testing.T) {
	_, err := dhcp.ListenInterface(netip.MustParseAddr("192.0.2.123"), 0)
	if err == nil || !strings.Contains(err.Error(), "not on any interface") {
		t.Errorf("ListenInterface(192.0.2.123) = %v; want an error saying the address is not on any interface", err)
	}
}

// TestListenInterface binds to loopback's interface by its address and
// receives on the wildcard address.
func TestListenInterface(t *testing.T) {
	dhcptest.NeedRoot(t)
	conn, err := dhcp.ListenInterface(netip.MustParseAddr("127.0.0.1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.LocalAddr().(*net.UDPAddr).IP; !got.IsUnspecified() {
		t.Errorf("bound to %s; want 0.0.0.0 (to receive broadcasts)", got)
	}
	port := conn.LocalAddr().(*net.UDPAddr).Port
	c, err := net.Dial("udp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, _, err := conn.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Errorf("ReadFrom = %q, %v; want hello", buf[:n], err)
	}
}

// TestServeNetns runs the real server on port 67 in one network namespace
// and insomniacslk's nclient4 in another, joined by a veth pair: a full
// DORA by broadcast on the local segment, as a PXE ROM does it.
func TestServeNetns(t *testing.T) {
	srvNS := dhcptest.NewNetNS(t)
	cliNS := dhcptest.NewNetNS(t)
	const clientMAC = "52:54:00:00:00:01" // macM1: 10.0.0.5
	dhcptest.Veth(t, srvNS, "s0", "10.0.0.1/24", "", cliNS, "c0", "", clientMAC)

	var conn net.PacketConn
	if err := srvNS.Do(func() (err error) {
		conn, err = dhcp.ListenInterface(netip.MustParseAddr(serverIP), dhcp.ServerPort)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := newServer(t, dhcp.ModeReservation, testBackend())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()

	var client *nclient4.Client
	if err := cliNS.Do(func() (err error) {
		client, err = nclient4.New("c0", nclient4.WithTimeout(2*time.Second), nclient4.WithRetry(3))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Request(ctx,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016")),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, binary.BigEndian.AppendUint16(nil, 7)))
	if err != nil {
		t.Fatalf("DORA: %v", err)
	}
	if got := lease.ACK.YourIPAddr.String(); got != "10.0.0.5" {
		t.Errorf("ACK yiaddr = %s; want 10.0.0.5", got)
	}
	if got := lease.Offer.BootFileName; got != "ipxe.efi" {
		t.Errorf("OFFER file = %q; want ipxe.efi", got)
	}
	if got := lease.ACK.ServerIPAddr.String(); got != serverIP {
		t.Errorf("ACK siaddr = %s; want %s", got, serverIP)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve = %v", err)
	}
}
