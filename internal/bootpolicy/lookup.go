package bootpolicy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
)

// Lookup implements dhcp.Backend: what the interface with this MAC gets from
// DHCP. It returns an error wrapping dhcp.ErrUnknownHost when no Hardware has
// the MAC.
//
// Fields are read tolerantly, as Tinkerbell's are: a value that cannot be
// used (an address that is not IPv4, a hostname with characters a hostname
// cannot have, a route that does not parse) is left out and logged once per
// Hardware version, and the rest is answered. netboot.allowPXE unset means
// false, as in Tinkerbell: a machine netboots only when its Hardware says so.
//
// The returned Host is shared: callers must not modify it.
func (p *Policy) Lookup(ctx context.Context, mac macaddr.MAC) (*dhcp.Host, error) {
	if h, synced := p.hosts.get(mac); synced {
		if h == nil {
			return nil, fmt.Errorf("%w: %s", dhcp.ErrUnknownHost, mac)
		}
		return h, nil
	}
	hw, i, err := p.byMAC(ctx, mac)
	if err != nil {
		return nil, err
	}
	if hw == nil {
		return nil, fmt.Errorf("%w: %s", dhcp.ErrUnknownHost, mac)
	}
	return p.host(hw, i), nil
}

// host builds the DHCP view of interface i of hw.
func (p *Policy) host(hw *model.Hardware, i int) *dhcp.Host {
	iface := &hw.Spec.Interfaces[i]
	d := iface.DHCP
	f := fmt.Sprintf("spec.interfaces[%d]", i)
	h := &dhcp.Host{
		Name:        hw.Key(),
		DisableDHCP: model.BoolValue(iface.DisableDHCP, false),
		LeaseTime:   time.Duration(max(d.LeaseTime, 0)) * time.Second,
	}

	if ip := d.IP; ip != nil {
		h.IP = p.addr(hw, f+".dhcp.ip.address", ip.Address)
		if ip.Netmask != "" {
			if m, err := parseNetmask(ip.Netmask); err != nil {
				p.hwWarn(hw, f+".dhcp.ip.netmask", err.Error())
			} else {
				h.Netmask = m
			}
		}
		h.Gateway = p.addr(hw, f+".dhcp.ip.gateway", ip.Gateway)
	}
	for j, s := range d.NameServers {
		if a := p.addr(hw, fmt.Sprintf("%s.dhcp.name_servers[%d]", f, j), s); a.IsValid() {
			h.DNS = append(h.DNS, a)
		}
	}
	for j, s := range d.TimeServers {
		// Option 42 carries addresses only; a name such as pool.ntp.org
		// cannot be sent.
		if a := p.addr(hw, fmt.Sprintf("%s.dhcp.time_servers[%d]", f, j), s); a.IsValid() {
			h.NTP = append(h.NTP, a)
		}
	}

	host, hostField := d.Hostname, f+".dhcp.hostname"
	if host == "" && hw.Spec.Metadata != nil && hw.Spec.Metadata.Instance != nil {
		host, hostField = hw.Spec.Metadata.Instance.Hostname, "spec.metadata.instance.hostname"
	}
	if host != "" {
		if validHostname(host) {
			h.Hostname = host
		} else {
			p.hwWarn(hw, hostField, fmt.Sprintf("%q is not a hostname (letters, digits, '-', '_' and '.' only)", host))
		}
	}
	if dn := d.DomainName; dn != "" {
		if validHostname(dn) {
			h.Domain = dn
		} else {
			p.hwWarn(hw, f+".dhcp.domain_name", fmt.Sprintf("%q is not a domain name", dn))
		}
	}

	for j, r := range d.ClasslessStaticRoutes {
		field := fmt.Sprintf("%s.dhcp.classless_static_routes[%d]", f, j)
		dest, err := parseDestination(r.DestinationDescriptor)
		if err != nil {
			p.hwWarn(hw, field+".destination_descriptor", err.Error())
			continue
		}
		router, err := netip.ParseAddr(strings.TrimSpace(r.Router))
		if err != nil || !router.Unmap().Is4() {
			p.hwWarn(hw, field+".router", fmt.Sprintf("%q is not an IPv4 address", r.Router))
			continue
		}
		h.Routes = append(h.Routes, dhcp.Route{Dest: dest, Router: router.Unmap()})
	}

	if nb := iface.Netboot; nb != nil {
		h.AllowPXE = model.BoolValue(nb.AllowPXE, false)
		if nb.IPXE != nil && nb.IPXE.Binary != "" {
			if validFileName(nb.IPXE.Binary) {
				h.IPXEBinary = nb.IPXE.Binary
			} else {
				p.hwWarn(hw, f+".netboot.ipxe.binary", fmt.Sprintf("%q is not a plain file name", nb.IPXE.Binary))
			}
		}
	}
	switch {
	case d.TFTPServerName != "" && d.BootFileName != "":
		h.TFTPServer, h.BootFile = d.TFTPServerName, d.BootFileName
	case d.TFTPServerName != "" || d.BootFileName != "":
		p.hwWarn(hw, f+".dhcp", "tftp_server_name and boot_file_name go together; only one is set")
	}
	return h
}

// addr parses an IPv4 address of hw, warning about anything else. "" is
// the zero Addr, silently.
func (p *Policy) addr(hw *model.Hardware, field, s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || !a.Unmap().Is4() {
		p.hwWarn(hw, field, fmt.Sprintf("%q is not an IPv4 address", s))
		return netip.Addr{}
	}
	return a.Unmap()
}

// parseNetmask accepts a dotted mask ("255.255.255.0") or a prefix length
// ("24" or "/24"). The mask must be contiguous.
func parseNetmask(s string) (net.IPMask, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(strings.TrimPrefix(s, "/")); err == nil {
		if n < 0 || n > 32 {
			return nil, fmt.Errorf("netmask %q: prefix length out of range", s)
		}
		return net.CIDRMask(n, 32), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Unmap().Is4() {
		return nil, fmt.Errorf("netmask %q is not a dotted IPv4 mask", s)
	}
	b := a.Unmap().As4()
	m := net.IPMask(b[:])
	if _, bits := m.Size(); bits == 0 {
		return nil, fmt.Errorf("netmask %q is not contiguous", s)
	}
	return m, nil
}

// parseDestination reads a route's destination_descriptor tolerantly:
// "10.1.0.0/16", "10.1.0.0/255.255.0.0", or a bare address (a host route).
// Host bits are cleared.
func parseDestination(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		if !p.Addr().Unmap().Is4() {
			return netip.Prefix{}, fmt.Errorf("destination %q is not IPv4", s)
		}
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked(), nil
	}
	addr, mask, hasMask := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addr)
	if err != nil || !a.Unmap().Is4() {
		return netip.Prefix{}, fmt.Errorf("destination %q is not an IPv4 prefix like 10.1.0.0/16", s)
	}
	bits := 32
	if hasMask {
		m, err := parseNetmask(mask)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("destination %q: %w", s, err)
		}
		bits, _ = m.Size()
	}
	return netip.PrefixFrom(a.Unmap(), bits).Masked(), nil
}

// validHostname reports whether s can be sent as a host or domain name:
// dot-separated labels of 1–63 letters, digits, '-' or '_' (seen in the
// wild), not starting or ending with '-', 253 bytes at most. Anything else
// — spaces, quotes, line breaks — could reach a shell in the machine's DHCP
// client scripts.
func validHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !isAlnum(c) && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// validFileName reports whether s is a plain file name: letters, digits,
// '.', '-' and '_', not starting with '.'.
func validFileName(s string) bool {
	if s == "" || s[0] == '.' || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
