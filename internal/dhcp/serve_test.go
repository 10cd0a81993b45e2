package dhcp_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/machinelog"
)

// TestServe runs Serve on a real UDP socket on loopback: a fake relay on
// another socket sends a relayed DISCOVER (giaddr 127.0.0.1) after a
// garbage datagram, and must get the OFFER at giaddr:RelayPort.
func TestServe(t *testing.T) {
	srvConn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srvConn.Close()
	relay, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()

	events := make(chan machinelog.Event, 16)
	s, err := dhcp.New(dhcp.Config{
		ServerIP:  netip.MustParseAddr(serverIP),
		HTTPBase:  httpBase,
		Backend:   testBackend(),
		Events:    machinelog.SinkFunc(func(e machinelog.Event) { events <- e }),
		RelayPort: relay.LocalAddr().(*net.UDPAddr).Port,
		Workers:   2,
	})
	if err != nil {
		t.Fatal(err)
	}
	malformedBefore := counterValue(t, "anvil_dhcp_packets_total", map[string]string{"type": "malformed", "outcome": "malformed"})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, srvConn) }()

	// One bad packet is skipped...
	if _, err := relay.WriteTo([]byte("not a DHCP packet"), srvConn.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	// ...and the next one answered.
	req := packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwUEFI, giaddr: "127.0.0.1"}.build(t)
	if _, err := relay.WriteTo(req.ToBytes(), srvConn.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	if err := relay.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, from, err := relay.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	resp, err := dhcpv4.FromBytes(buf[:n])
	if err != nil {
		t.Fatalf("reply from %s does not parse: %v", from, err)
	}
	if resp.MessageType() != dhcpv4.MessageTypeOffer || resp.TransactionID != req.TransactionID ||
		resp.YourIPAddr.String() != "10.0.0.5" || resp.BootFileName != "ipxe.efi" {
		t.Errorf("reply = %s; want OFFER of 10.0.0.5 with ipxe.efi, xid %s", resp.Summary(), req.TransactionID)
	}

	select {
	case e := <-events:
		want := "DISCOVER from 52:54:00:00:00:01 (uefi-x86_64, PXEClient) [default/m1]: OFFER 10.0.0.5, boot file ipxe.efi via TFTP 10.0.0.1"
		if e.Service != machinelog.ServiceDHCP || e.Outcome != dhcp.OutcomeOffered || e.MAC.String() != macM1.String() ||
			e.IP != netip.MustParseAddr("10.0.0.5") || e.Message != want || e.Time.IsZero() {
			t.Errorf("event = %+v; want dhcp offered 10.0.0.5 %q", e, want)
		}
	case <-time.After(5 * time.Second):
		t.Error("no machine event")
	}
	if got := counterValue(t, "anvil_dhcp_packets_total", map[string]string{"type": "malformed", "outcome": "malformed"}); got != malformedBefore+1 {
		t.Errorf("malformed packets counted = %v; want %v", got, malformedBefore+1)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel = %v; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

// TestServeListenerError: a failing socket ends Serve with its error.
func TestServeListenerError(t *testing.T) {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, dhcp.ModeReservation, testBackend())
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), conn) }()
	time.Sleep(50 * time.Millisecond)
	conn.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("Serve on a closed socket = %v; want a read error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its socket closed")
	}
}

func TestServeOff(t *testing.T) {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := newServer(t, dhcp.ModeOff, nil)
	if err := s.Serve(context.Background(), conn); err != nil {
		t.Errorf("Serve in mode off = %v; want nil at once", err)
	}
}

// counterValue reads a counter from the default registry; 0 if absent.
func counterValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
