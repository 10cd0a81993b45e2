package pool

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/macaddr"
)

func mustRange(t *testing.T, s string) Range {
	t.Helper()
	r, err := ParseRange(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	server = netip.MustParseAddr("10.0.0.1")
	relay  = netip.MustParseAddr("10.1.0.1")
)

// testPools: 10.0.0.100-103 on the server's subnet, 10.1.0.50-51 behind
// the relay 10.1.0.1; reserved are the addresses of *reserved; the clock
// is *now.
func testPools(t *testing.T, reserved map[netip.Addr]bool, now *time.Time) *Pools {
	t.Helper()
	p, err := New(Config{
		Ranges:   []Range{mustRange(t, "10.0.0.100-10.0.0.103"), mustRange(t, "10.1.0.50-10.1.0.51/16")},
		ServerIP: server,
		Reserved: func(_ context.Context, ip netip.Addr) (bool, error) { return reserved[ip], nil },
		Clock:    clock.Func(func() time.Time { return *now }),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ask(t *testing.T, p *Pools, mac string, r dhcp.UnknownRequest) (*dhcp.Host, error) {
	t.Helper()
	r.MAC = macaddr.MustParse(mac)
	return p.LookupUnknown(context.Background(), r)
}

func TestLookupUnknown(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reserved := map[netip.Addr]bool{netip.MustParseAddr("10.0.0.101"): true}
	p := testPools(t, reserved, &now)

	h1, err := ask(t, p, "52:54:00:00:00:01", dhcp.UnknownRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.ranges[0].has(h1.IP) || h1.IP == netip.MustParseAddr("10.0.0.101") || h1.Gateway.IsValid() ||
		net.IP(h1.Netmask).String() != "255.255.255.0" || !h1.AllowPXE || h1.LeaseTime != DefaultLeaseTime {
		t.Fatalf("direct lease = %+v; want a free address of 10.0.0.100-103 (not the reserved .101), /24, no gateway, netboot, %s", h1, DefaultLeaseTime)
	}
	again, _ := ask(t, p, "52:54:00:00:00:01", dhcp.UnknownRequest{Requested: h1.IP})
	if again != h1 {
		t.Errorf("the same MAC again = %+v; want the same Host value %+v", again, h1)
	}
	if sub, gw, ok := p.Leased(macaddr.MustParse("52:54:00:00:00:01"), h1.IP); !ok || sub.String() != "10.0.0.0/24" || gw.IsValid() {
		t.Errorf("Leased = %v %v %v; want 10.0.0.0/24, no gateway", sub, gw, ok)
	}
	if _, _, ok := p.Leased(macaddr.MustParse("52:54:00:00:00:02"), h1.IP); ok {
		t.Error("Leased says another MAC holds the address")
	}

	// Relayed: the relay's subnet, the relay as gateway.
	hr, err := ask(t, p, "52:54:00:00:00:09", dhcp.UnknownRequest{Relay: relay})
	if err != nil || !p.ranges[1].has(hr.IP) || hr.Gateway != relay || net.IP(hr.Netmask).String() != "255.255.0.0" {
		t.Fatalf("relayed lease = %+v, %v; want 10.1.0.50-51/16 via 10.1.0.1", hr, err)
	}
	if _, err := ask(t, p, "52:54:00:00:00:09", dhcp.UnknownRequest{Relay: netip.MustParseAddr("10.9.0.1")}); !errors.Is(err, dhcp.ErrUnknownHost) ||
		!strings.Contains(err.Error(), "no discovery pool on the subnet of 10.9.0.1") {
		t.Errorf("a relay with no pool = %v; want ErrUnknownHost naming it", err)
	}

	// Fill the direct pool: 4 addresses, one reserved, one leased.
	var got []netip.Addr
	for _, mac := range []string{"52:54:00:00:00:02", "52:54:00:00:00:03"} {
		h, err := ask(t, p, mac, dhcp.UnknownRequest{})
		if err != nil {
			t.Fatalf("%s: %v", mac, err)
		}
		got = append(got, h.IP)
	}
	if got[0] == got[1] || got[0] == h1.IP || got[1] == h1.IP {
		t.Errorf("leases %v and %s: want distinct addresses", got, h1.IP)
	}
	if _, err := ask(t, p, "52:54:00:00:00:04", dhcp.UnknownRequest{}); !errors.Is(err, dhcp.ErrUnknownHost) || !strings.Contains(err.Error(), "every address") {
		t.Errorf("a full pool = %v; want ErrUnknownHost saying it is full", err)
	}
	// Asking for a taken address keeps one's own.
	if h, _ := ask(t, p, "52:54:00:00:00:02", dhcp.UnknownRequest{Requested: h1.IP}); h.IP != got[0] {
		t.Errorf("asking for another's address gave %s; want its own %s", h.IP, got[0])
	}

	// Leases run out: past the lease time a new machine gets an address.
	now = now.Add(DefaultLeaseTime + time.Second)
	if _, err := ask(t, p, "52:54:00:00:00:04", dhcp.UnknownRequest{}); err != nil {
		t.Errorf("after the leases expired: %v", err)
	}
}

// A server restart forgets the leases; a machine asking for the address
// it had gets it back, and one that starts over gets the same address
// from its MAC.
func TestRestart(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	before := testPools(t, nil, &now)
	a, _ := ask(t, before, "52:54:00:00:00:0a", dhcp.UnknownRequest{})
	b, _ := ask(t, before, "52:54:00:00:00:0b", dhcp.UnknownRequest{})

	after := testPools(t, nil, &now)
	if h, err := ask(t, after, "52:54:00:00:00:0b", dhcp.UnknownRequest{Requested: b.IP}); err != nil || h.IP != b.IP {
		t.Errorf("INIT-REBOOT after a restart = %v, %v; want %s back", h, err, b.IP)
	}
	if h, err := ask(t, after, "52:54:00:00:00:0a", dhcp.UnknownRequest{}); err != nil || h.IP != a.IP {
		t.Errorf("DISCOVER after a restart = %v, %v; want %s again", h, err, a.IP)
	}
}

func TestParseRange(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "10.0.0.100-10.0.0.199", want: "10.0.0.100-10.0.0.199/24"},
		{in: "10.1.0.10-10.1.3.250/22", want: "10.1.0.10-10.1.3.250/22"},
		{in: "10.0.0.100", err: "no '-'"},
		{in: "10.0.0.100-fd00::1", err: "not two IPv4"},
		{in: "10.0.0.100-10.0.1.5", err: "10.0.1.5 is not in 10.0.0.0/24"},
		{in: "10.0.0.200-10.0.0.100", err: "before the first"},
		{in: "10.0.0.0-10.0.0.10", err: "network or broadcast"},
		{in: "10.0.0.10-10.0.0.255", err: "network or broadcast"},
		{in: "10.0.0.10-10.0.0.20/33", err: "prefix length"},
	}
	for _, tc := range tests {
		r, err := ParseRange(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRange(%q) = %v, %v; want an error saying %q", tc.in, r, err, tc.err)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %s", tc.in, r, err, tc.want)
		}
	}
	if _, err := New(Config{Ranges: []Range{mustRange(t, "10.0.0.10-10.0.0.20"), mustRange(t, "10.0.0.20-10.0.0.30")},
		ServerIP: server, Reserved: func(context.Context, netip.Addr) (bool, error) { return false, nil }}); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlapping pools: %v; want an error", err)
	}
}

// FuzzParseRange: what parses writes back as itself, and lies in its
// subnet.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"10.0.0.100-10.0.0.199", "10.1.0.10-10.1.3.250/22", "1.2.3.4-1.2.3.4/30", "a-b/c", "-/", "10.0.0.1-10.0.0.2/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			return
		}
		back, err := ParseRange(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRange(%q) = %v; written back and parsed: %v, %v", s, r, back, err)
		}
		if !r.Prefix.Contains(r.Start) || !r.Prefix.Contains(r.End) || r.size() == 0 {
			t.Fatalf("ParseRange(%q) = %v: outside its subnet", s, r)
		}
	})
}
