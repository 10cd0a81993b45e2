package metadata

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// HeaderForwardedFor is the header a proxy appends the address it received
// a request from to. Only trusted proxies' headers are read.
const HeaderForwardedFor = "X-Forwarded-For"

// maxForwardedHops bounds how many addresses of X-Forwarded-For are read: a
// longer chain is refused rather than walked.
const maxForwardedHops = 32

// ParseTrustedProxies parses the --trusted-proxies list: CIDR prefixes
// ("10.0.0.0/24") or single addresses ("10.0.0.5", the same as /32 or
// /128). Empty entries are skipped; host bits of a prefix are cleared.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			if p.Addr().Is4In6() && p.Bits() >= ipv4MappedBits {
				// Peers are compared unmapped: ::ffff:10.0.0.0/120 is 10.0.0.0/24.
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-ipv4MappedBits)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q is neither an IP address nor a CIDR prefix like 10.0.0.0/24", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ipv4MappedBits is the length of the ::ffff:0:0/96 prefix of IPv4-mapped
// IPv6 addresses (RFC 4291 section 2.5.5.2).
const ipv4MappedBits = 96

// errForwardedFor marks a malformed X-Forwarded-For from a trusted proxy.
var errForwardedFor = errors.New("bad " + HeaderForwardedFor)

// clientAddr returns the address a request is answered for: the TCP peer,
// or — when the peer is a trusted proxy — the right-most address of
// X-Forwarded-For that is not itself a trusted proxy (each proxy appends
// the address it heard from, so everything left of the first untrusted
// hop, counting from the right, may be forged by the client). If every
// forwarded address is trusted, the left-most is the client. A trusted
// peer that sends no X-Forwarded-For is the client itself. An error
// (wrapping errForwardedFor) says why a trusted proxy's header cannot be
// used; the request must then be refused, never answered for the proxy.
func clientAddr(peer netip.Addr, header http.Header, trusted []netip.Prefix) (netip.Addr, error) {
	peer = peer.Unmap()
	if !isTrusted(peer, trusted) {
		return peer, nil
	}
	values := header.Values(HeaderForwardedFor)
	if len(values) == 0 {
		return peer, nil
	}
	hops, err := parseForwardedFor(values)
	if err != nil {
		return netip.Addr{}, err
	}
	for i := len(hops) - 1; i >= 0; i-- {
		if !isTrusted(hops[i], trusted) {
			return hops[i], nil
		}
	}
	return hops[0], nil
}

// parseForwardedFor reads the addresses of X-Forwarded-For header values,
// left to right (several headers are one list, in order). An element may
// carry a port ("10.0.0.5:4711", "[2001:db8::1]:4711") or brackets; an
// empty element, a name, "unknown" or an obfuscated identifier is an error.
func parseForwardedFor(values []string) ([]netip.Addr, error) {
	var hops []netip.Addr
	for _, v := range values {
		for _, el := range strings.Split(v, ",") {
			el = strings.TrimSpace(el)
			a, err := parseHop(el)
			if err != nil {
				return nil, err
			}
			if len(hops) == maxForwardedHops {
				return nil, fmt.Errorf("%w: more than %d addresses", errForwardedFor, maxForwardedHops)
			}
			hops = append(hops, a)
		}
	}
	if len(hops) == 0 {
		return nil, fmt.Errorf("%w: no address in it", errForwardedFor)
	}
	return hops, nil
}

func parseHop(el string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(el); err == nil && a.Zone() == "" {
		return a.Unmap(), nil
	}
	if ap, err := netip.ParseAddrPort(el); err == nil && ap.Addr().Zone() == "" {
		return ap.Addr().Unmap(), nil
	}
	if strings.HasPrefix(el, "[") && strings.HasSuffix(el, "]") {
		if a, err := netip.ParseAddr(el[1 : len(el)-1]); err == nil && a.Is6() && a.Zone() == "" {
			return a.Unmap(), nil
		}
	}
	if len(el) > 64 {
		el = el[:64] + "…"
	}
	return netip.Addr{}, fmt.Errorf("%w: %q is not an IP address", errForwardedFor, el)
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
