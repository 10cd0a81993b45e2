// Package clientip finds the address of the client behind an HTTP request:
// the TCP peer, or — only when the peer is one of the configured trusted
// proxies (`anvil serve --trusted-proxies`) — the right-most address of
// X-Forwarded-For that is not itself a trusted proxy. It is the one
// implementation of that rule in anvil: the metadata service identifies
// machines with it, the boot path's per-client limits count by it, and the
// HTTP boot routes record it.
//
// Resolver.Handler works the answer out once per request and puts it in the
// request's context, where FromContext reads it (for audit logs and checks
// of who called). The package imports no other anvil package.
package clientip

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// HeaderForwardedFor is the header a proxy appends the address it received
// a request from to (the de facto standard; RFC 7239's Forwarded header is
// not read). Only trusted proxies' headers are believed.
const HeaderForwardedFor = "X-Forwarded-For"

// maxForwardedHops bounds how many addresses of X-Forwarded-For are read
// from the right: a longer chain of trusted proxies is refused rather than
// walked.
const maxForwardedHops = 32

// ipv4MappedBits is the length of the ::ffff:0:0/96 prefix of IPv4-mapped
// IPv6 addresses (RFC 4291 section 2.5.5.2).
const ipv4MappedBits = 96

// errForwardedFor marks an X-Forwarded-For from a trusted proxy that cannot
// be used (Client.Err wraps it).
var errForwardedFor = errors.New("bad " + HeaderForwardedFor)

// errNoPeer marks a request whose RemoteAddr is not an IP address and port
// (a Unix socket, a test that did not set it).
var errNoPeer = errors.New("cannot read the caller's address")

// ParseTrustedProxies parses the --trusted-proxies list: CIDR prefixes
// ("10.0.0.0/24") or single addresses ("10.0.0.5", the same as /32 or
// /128). Empty entries are skipped; host bits of a prefix are cleared;
// IPv4-mapped IPv6 prefixes become IPv4 ones (peers are compared unmapped).
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			if p.Addr().Is4In6() && p.Bits() >= ipv4MappedBits {
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

// Client is what a Resolver found out about a request's caller.
type Client struct {
	// Addr is the client's address: Peer, or the address a trusted proxy
	// forwarded for. Invalid when Err is set.
	Addr netip.Addr
	// Peer is the TCP peer (unmapped). Invalid when RemoteAddr is not an
	// IP address and port.
	Peer netip.Addr
	// Err says why there is no Addr: RemoteAddr is unreadable, or a
	// trusted proxy sent an X-Forwarded-For that cannot be used. A
	// service that answers per machine must then refuse the request,
	// never answer it for Peer (the proxy).
	Err error
}

// Key is the address to count the request against: Addr, or Peer when
// there is no Addr (the zero Addr when there is neither).
func (c Client) Key() netip.Addr {
	if c.Addr.IsValid() {
		return c.Addr
	}
	return c.Peer
}

// Resolver finds the client of requests. The zero value trusts no proxy:
// the TCP peer is always the client. It is safe for concurrent use.
type Resolver struct {
	// Trusted are the proxies whose X-Forwarded-For is believed (see
	// ParseTrustedProxies). It must not be changed after first use.
	Trusted []netip.Prefix
}

// Resolve returns the client of a request from peer with header h: the peer
// (unmapped) unless it is trusted; from a trusted peer, the right-most
// address of X-Forwarded-For that is not itself trusted (each proxy appends
// the address it heard from, so everything left of that one may have been
// written by the client and is never read). If every forwarded address is
// trusted, the left-most is the client; a trusted peer that sends no
// X-Forwarded-For is the client itself. Several X-Forwarded-For headers
// are one list, in order. An element may carry a port ("10.0.0.5:4711",
// "[2001:db8::1]:4711"); an empty element, a name, "unknown", an address
// with a zone, or more than 32 trusted hops is an error, but only where it
// is read: at or right of the answer.
func (r Resolver) Resolve(peer netip.Addr, h http.Header) (netip.Addr, error) {
	peer = peer.Unmap()
	if !r.trusted(peer) {
		return peer, nil
	}
	values := h.Values(HeaderForwardedFor)
	if len(values) == 0 {
		return peer, nil
	}
	var last netip.Addr // the left-most read so far
	hops := 0
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for {
			el := v
			j := strings.LastIndexByte(v, ',')
			if j >= 0 {
				el, v = v[j+1:], v[:j]
			}
			if hops == maxForwardedHops {
				return netip.Addr{}, fmt.Errorf("%w: more than %d trusted addresses", errForwardedFor, maxForwardedHops)
			}
			hops++
			a, err := parseHop(strings.TrimSpace(el))
			if err != nil {
				return netip.Addr{}, err
			}
			if !r.trusted(a) {
				return a, nil
			}
			last = a
			if j < 0 {
				break
			}
		}
	}
	return last, nil
}

// Of returns the client of req: the one Handler put in its context, else
// the one Resolve finds now.
func (r Resolver) Of(req *http.Request) Client {
	if c, ok := FromContext(req.Context()); ok {
		return c
	}
	peer, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		return Client{Err: fmt.Errorf("%w %q", errNoPeer, req.RemoteAddr)}
	}
	c := Client{Peer: peer.Addr().Unmap()}
	a, err := r.Resolve(c.Peer, req.Header)
	if err != nil {
		c.Err = fmt.Errorf("from trusted proxy %s: %w", c.Peer, err)
		return c
	}
	c.Addr = a
	return c
}

// Handler returns a handler that puts the client of each request (Of) in
// its context, then calls next.
func (r Resolver) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, ok := FromContext(req.Context()); !ok {
			req = req.WithContext(NewContext(req.Context(), r.Of(req)))
		}
		next.ServeHTTP(w, req)
	})
}

func (r Resolver) trusted(a netip.Addr) bool {
	for _, p := range r.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop reads one element of X-Forwarded-For.
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

type contextKey struct{}

// NewContext returns ctx carrying c.
func NewContext(ctx context.Context, c Client) context.Context {
	return context.WithValue(ctx, contextKey{}, c)
}

// FromContext returns the Client a Handler (or NewContext) put in ctx, and
// whether there is one.
func FromContext(ctx context.Context) (Client, bool) {
	c, ok := ctx.Value(contextKey{}).(Client)
	return c, ok
}
