package dhcp_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/dhcp"
)

// lockedBuffer is a log destination safe for Serve's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// TestMalformedLogLimit: a flood of malformed packets is one log line a
// second, the next line says how many were only counted, and every packet
// is counted in the metrics.
func TestMalformedLogLimit(t *testing.T) {
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
	var logs lockedBuffer
	var mu sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s, err := dhcp.New(dhcp.Config{
		ServerIP:  netip.MustParseAddr(serverIP),
		HTTPBase:  httpBase,
		Backend:   testBackend(),
		Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
		RelayPort: relay.LocalAddr().(*net.UDPAddr).Port,
		Workers:   1, // one goroutine: packets are handled in the order sent
		Clock: clock.Func(func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, srvConn) }()
	defer func() {
		cancel()
		<-done
	}()
	malformed := map[string]string{"type": "malformed", "outcome": "malformed"}
	before := counterValue(t, "anvil_dhcp_packets_total", malformed)

	// burst sends n malformed packets then a DISCOVER, and waits for the
	// OFFER: by then the malformed ones have been handled.
	burst := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := relay.WriteTo([]byte("not a DHCP packet "+strings.Repeat("x", i)), srvConn.LocalAddr()); err != nil {
				t.Fatal(err)
			}
		}
		req := packet{typ: dhcpv4.MessageTypeDiscover, mac: macM1, fw: fwUEFI, giaddr: "127.0.0.1"}.build(t)
		if _, err := relay.WriteTo(req.ToBytes(), srvConn.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1500)
		if err := relay.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := relay.ReadFrom(buf); err != nil {
			t.Fatalf("no reply after the malformed packets: %v", err)
		}
	}

	const flood = 50
	burst(flood)
	if got := logs.lines("malformed packet"); len(got) != 1 || !strings.Contains(got[0], "skipped=0") {
		t.Fatalf("%d malformed packets within a second logged %d lines; want 1 (skipped=0):\n%s", flood, len(got), strings.Join(got, "\n"))
	}
	if got := counterValue(t, "anvil_dhcp_packets_total", malformed) - before; got != flood {
		t.Errorf("malformed packets counted = %v; want every one of %d", got, flood)
	}

	// A second later the next one is logged, with the number held back.
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	burst(1)
	got := logs.lines("malformed packet")
	if len(got) != 2 || !strings.Contains(got[1], "skipped=49") {
		t.Fatalf("after a second: malformed-packet lines\n%s\nwant a second one with skipped=49", strings.Join(got, "\n"))
	}
	if got := counterValue(t, "anvil_dhcp_packets_total", malformed) - before; got != flood+1 {
		t.Errorf("malformed packets counted = %v; want %d", got, flood+1)
	}
}
