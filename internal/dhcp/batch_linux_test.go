package dhcp

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// TestServeBatches checks which read path Serve takes on Linux: recvmmsg
// when the kernel has it, and one datagram at a time when recvmmsg fails
// with ENOSYS; both answer.
func TestServeBatches(t *testing.T) {
	real := recvmmsg
	t.Cleanup(func() { recvmmsg = real })
	for _, tc := range []struct {
		name   string
		enosys bool
	}{{"recvmmsg", false}, {"no recvmmsg", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			recvmmsg = func(fd uintptr, hdrs []unix.Mmsghdr) (int, error) {
				calls.Add(1)
				if tc.enosys {
					return 0, unix.ENOSYS
				}
				return real(fd, hdrs)
			}
			offerOverLoopback(t)
			if calls.Load() == 0 {
				t.Fatal("recvmmsg never called: Serve did not take the batch path")
			}
		})
	}
}

// offerOverLoopback runs Serve on a loopback socket and checks that a
// relayed DISCOVER gets its OFFER; Serve has returned when it returns.
func offerOverLoopback(t *testing.T) {
	t.Helper()
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
	host := &Host{Name: "h", IP: netip.MustParseAddr("10.0.0.5"), Netmask: net.CIDRMask(24, 32)}
	s, err := New(Config{ServerIP: netip.MustParseAddr("10.0.0.1"), HTTPBase: "http://10.0.0.1:7080",
		Backend: backendFunc(func(macaddr.MAC) *Host { return host }), Logger: discardLogger,
		RelayPort: relay.LocalAddr().(*net.UDPAddr).Port})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, srvConn) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	disc, err := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1}, dhcpv4.WithRelay(net.IP{127, 0, 0, 1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.WriteTo(disc.ToBytes(), srvConn.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if err := relay.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, _, err := relay.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp, err := dhcpv4.FromBytes(buf[:n])
	if err != nil || resp.MessageType() != dhcpv4.MessageTypeOffer || resp.TransactionID != disc.TransactionID {
		t.Fatalf("answer %v (%v), want the OFFER to xid %s", resp, err, disc.TransactionID)
	}
}
