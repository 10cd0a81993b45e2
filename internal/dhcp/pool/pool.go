// Package pool leases addresses to machines no Hardware knows, in
// reservation mode, so that they can boot for discovery (anvil serve
// --discovery-pool): it implements dhcp.UnknownBackend.
//
// A pool is a range of addresses in one subnet. A relayed request draws
// from a pool on the subnet of its relay (giaddr), a direct one from a
// pool on the server's own subnet: one pool per subnet or per relay.
// Leases are short (DefaultLeaseTime) and kept in memory only: once the
// machine's agent reports, its lease becomes its Hardware's reservation
// (internal/api, Discover) and the pool never hands that address out
// again (Config.Reserved). Across a restart the leases are forgotten; an
// address is chosen from a hash of the MAC, and a client that asks for
// the address it had (option 50, INIT-REBOOT) gets it when it is free, so
// a machine mid-discovery nearly always keeps its address.
//
// It owns the leases and nothing else: it imports only internal/dhcp (the
// Host it answers with) and the leaf packages dhcp itself uses.
package pool

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/macaddr"
)

// DefaultLeaseTime is the lease of a pool address. A discovery boot takes
// about a minute from DHCP to the agent's report, after which the address
// is the Hardware's reservation and its lease is the Hardware's; ten
// minutes cover a slow boot with room to spare, while addresses of
// machines that went away before reporting return to the pool soon.
const DefaultLeaseTime = 10 * time.Minute

// DefaultPrefixBits is the subnet of a range written without /BITS.
const DefaultPrefixBits = 24

// Range is one pool: the addresses Start to End (both included) of the
// subnet Prefix.
type Range struct {
	Start, End netip.Addr
	Prefix     netip.Prefix
}

// String writes r as ParseRange reads it.
func (r Range) String() string {
	return fmt.Sprintf("%s-%s/%d", r.Start, r.End, r.Prefix.Bits())
}

// size is the number of addresses of r.
func (r Range) size() uint32 { return u32(r.End) - u32(r.Start) + 1 }

// ParseRange reads "START-END" or "START-END/BITS" (IPv4; the subnet is
// START/BITS, DefaultPrefixBits when not given). START and END must be
// in that subnet, START not after END, and neither the subnet's network
// nor its broadcast address.
func ParseRange(s string) (Range, error) {
	bad := func(why string) (Range, error) {
		return Range{}, fmt.Errorf("discovery pool %q: %s (want START-END or START-END/BITS, e.g. 10.0.0.100-10.0.0.199/24)", s, why)
	}
	rest, bitsStr, hasBits := strings.Cut(s, "/")
	a, b, ok := strings.Cut(rest, "-")
	if !ok {
		return bad("no '-' between the first and last address")
	}
	start, err1 := netip.ParseAddr(strings.TrimSpace(a))
	end, err2 := netip.ParseAddr(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || !start.Is4() || !end.Is4() {
		return bad("not two IPv4 addresses")
	}
	bits := DefaultPrefixBits
	if hasBits {
		n, err := strconv.Atoi(bitsStr)
		if err != nil || n < 8 || n > 30 {
			return bad("the prefix length must be from 8 to 30")
		}
		bits = n
	}
	prefix := netip.PrefixFrom(start, bits).Masked()
	switch {
	case !prefix.Contains(end):
		return bad(fmt.Sprintf("%s is not in %s", end, prefix))
	case end.Less(start):
		return bad("the last address is before the first")
	case start == prefix.Addr() || end == broadcast(prefix):
		return bad(fmt.Sprintf("the range holds the network or broadcast address of %s", prefix))
	}
	return Range{Start: start, End: end, Prefix: prefix}, nil
}

func broadcast(p netip.Prefix) netip.Addr {
	return addrOf(u32(p.Addr()) | (1<<(32-p.Bits()) - 1))
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addrOf(n uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// Config configures Pools.
type Config struct {
	// Ranges are the pools. Required; no two may overlap.
	Ranges []Range
	// ServerIP is the server's address: a request that was not relayed
	// draws from a pool whose subnet holds it. Required.
	ServerIP netip.Addr
	// Reserved reports whether a Hardware reserves ip: such an address is
	// never leased. Required. It is asked under the pools' lock, for free
	// addresses only: it must be fast (an index lookup).
	Reserved func(ctx context.Context, ip netip.Addr) (bool, error)
	// LeaseTime: if 0, DefaultLeaseTime.
	LeaseTime time.Duration
	// Clock: if nil, clock.Real.
	Clock clock.Clock
}

// Pools leases the addresses of its ranges. It is safe for concurrent use.
type Pools struct {
	cfg    Config
	ranges []*rangeState
	now    func() time.Time

	mu    sync.Mutex
	byMAC map[macaddr.MAC]*lease
}

type rangeState struct {
	Range
	name string // the Host's name: "discovery pool 10.0.0.100-10.0.0.199/24"
	byIP map[netip.Addr]*lease
}

type lease struct {
	mac     macaddr.MAC
	ip      netip.Addr
	gateway netip.Addr
	expires time.Time
	rng     *rangeState
	host    *dhcp.Host // the same value for as long as the lease is the same
}

var _ dhcp.UnknownBackend = (*Pools)(nil)

// New checks cfg and returns its Pools.
func New(cfg Config) (*Pools, error) {
	if len(cfg.Ranges) == 0 {
		return nil, errors.New("discovery pool: no ranges")
	}
	if !cfg.ServerIP.Is4() {
		return nil, fmt.Errorf("discovery pool: server IP %v: want an IPv4 address", cfg.ServerIP)
	}
	if cfg.Reserved == nil {
		return nil, errors.New("discovery pool: no Reserved function (the pool must not lease a Hardware's address)")
	}
	if cfg.LeaseTime <= 0 {
		cfg.LeaseTime = DefaultLeaseTime
	}
	p := &Pools{cfg: cfg, now: clock.Or(cfg.Clock).Now, byMAC: map[macaddr.MAC]*lease{}}
	for i, r := range cfg.Ranges {
		for _, o := range cfg.Ranges[:i] {
			if !(r.End.Less(o.Start) || o.End.Less(r.Start)) {
				return nil, fmt.Errorf("discovery pools %s and %s overlap", o, r)
			}
		}
		p.ranges = append(p.ranges, &rangeState{Range: r, name: "discovery pool " + r.String(), byIP: map[netip.Addr]*lease{}})
	}
	return p, nil
}

// LookupUnknown leases an address to r.MAC from a pool of its subnet (the
// relay's, else the server's): the one it holds, else the one it asks
// for when free, else the first free one from a place its MAC decides.
// Each answer renews the lease. An error wraps dhcp.ErrUnknownHost when
// no pool serves the subnet or every address is taken.
func (p *Pools) LookupUnknown(ctx context.Context, r dhcp.UnknownRequest) (*dhcp.Host, error) {
	subnet := r.Relay
	if !subnet.IsValid() {
		subnet = p.cfg.ServerIP
	}
	var mine []*rangeState
	for _, rs := range p.ranges {
		if rs.Prefix.Contains(subnet) {
			mine = append(mine, rs)
		}
	}
	if len(mine) == 0 {
		return nil, fmt.Errorf("%w: no discovery pool on the subnet of %s", dhcp.ErrUnknownHost, subnet)
	}
	gateway := r.Relay // a relay is its subnet's router; a direct client needs none to reach us

	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if l := p.byMAC[r.MAC]; l != nil && contains(mine, l.rng) && l.gateway == gateway &&
		(!r.Requested.IsValid() || r.Requested == l.ip) {
		l.expires = now.Add(p.cfg.LeaseTime)
		return l.host, nil
	}
	// Where to look: the address asked for first, then from the MAC's
	// place onwards through each pool.
	if r.Requested.IsValid() {
		for _, rs := range mine {
			if rs.has(r.Requested) {
				ok, err := p.free(ctx, rs, r.Requested, r.MAC, now)
				if err != nil {
					return nil, err
				}
				if ok {
					return p.grant(rs, r.Requested, r.MAC, gateway, now), nil
				}
			}
		}
	}
	if l := p.byMAC[r.MAC]; l != nil && contains(mine, l.rng) && l.gateway == gateway {
		// It asked for another address, which is not free: it keeps its
		// own (the server NAKs the request; it starts over).
		l.expires = now.Add(p.cfg.LeaseTime)
		return l.host, nil
	}
	h := fnv.New32a()
	b := r.MAC.Bytes()
	h.Write(b[:])
	for _, rs := range mine {
		n := rs.size()
		start := h.Sum32() % n
		for i := uint32(0); i < n; i++ {
			ip := addrOf(u32(rs.Start) + (start+i)%n)
			ok, err := p.free(ctx, rs, ip, r.MAC, now)
			if err != nil {
				return nil, err
			}
			if ok {
				return p.grant(rs, ip, r.MAC, gateway, now), nil
			}
		}
	}
	return nil, fmt.Errorf("%w: every address of the discovery pools of %s is leased or reserved", dhcp.ErrUnknownHost, subnet)
}

// Leased reports whether ip is the address the pools lease to mac, and
// if so its subnet and gateway (invalid when none): what the Hardware of
// a discovered machine reserves.
func (p *Pools) Leased(mac macaddr.MAC, ip netip.Addr) (subnet netip.Prefix, gateway netip.Addr, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.byMAC[mac]
	if l == nil || l.ip != ip {
		return netip.Prefix{}, netip.Addr{}, false
	}
	return l.rng.Prefix, l.gateway, true
}

func contains(rs []*rangeState, r *rangeState) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

func (rs *rangeState) has(ip netip.Addr) bool {
	return ip.Is4() && !ip.Less(rs.Start) && !rs.End.Less(ip)
}

// free reports whether ip may be leased to mac: no live lease of another
// MAC holds it (an expired one is dropped) and no Hardware reserves it.
func (p *Pools) free(ctx context.Context, rs *rangeState, ip netip.Addr, mac macaddr.MAC, now time.Time) (bool, error) {
	if l := rs.byIP[ip]; l != nil && l.mac != mac {
		if now.Before(l.expires) {
			return false, nil
		}
		p.drop(l)
	}
	reserved, err := p.cfg.Reserved(ctx, ip)
	if err != nil {
		return false, fmt.Errorf("discovery pool: is %s reserved: %w", ip, err)
	}
	return !reserved, nil
}

// grant leases ip of rs to mac, dropping mac's other lease.
func (p *Pools) grant(rs *rangeState, ip netip.Addr, mac macaddr.MAC, gateway netip.Addr, now time.Time) *dhcp.Host {
	if old := p.byMAC[mac]; old != nil {
		p.drop(old)
	}
	l := &lease{mac: mac, ip: ip, gateway: gateway, expires: now.Add(p.cfg.LeaseTime), rng: rs}
	l.host = &dhcp.Host{
		Name:      rs.name,
		IP:        ip,
		Netmask:   net.CIDRMask(rs.Prefix.Bits(), 32),
		Gateway:   gateway,
		LeaseTime: p.cfg.LeaseTime,
		AllowPXE:  true,
	}
	rs.byIP[ip] = l
	p.byMAC[mac] = l
	return l.host
}

func (p *Pools) drop(l *lease) {
	delete(l.rng.byIP, l.ip)
	if p.byMAC[l.mac] == l {
		delete(p.byMAC, l.mac)
	}
}
