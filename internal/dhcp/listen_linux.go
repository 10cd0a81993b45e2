package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenInterface returns a UDP socket for a DHCP server (or relay agent)
// on the interface that owns ip: bound to 0.0.0.0:port so it receives the
// clients' broadcasts, and to that interface (SO_BINDTODEVICE) so it hears
// that network only and its broadcasts leave through it; with SO_BROADCAST
// and SO_REUSEADDR (a relay's giaddr socket, or a boot server's, may share
// the port). If ip is unspecified (0.0.0.0), the socket is bound to every
// interface. It needs root (or CAP_NET_BIND_SERVICE and CAP_NET_RAW). The
// caller closes the socket.
func ListenInterface(ip netip.Addr, port int) (net.PacketConn, error) {
	ip = ip.Unmap()
	if !ip.Is4() {
		return nil, fmt.Errorf("dhcp: listen on %s: want an IPv4 address", ip)
	}
	device := ""
	if !ip.IsUnspecified() {
		ifi, err := InterfaceFor(ip)
		if err != nil {
			return nil, err
		}
		device = ifi.Name
	}
	return listen(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)), device)
}

// ListenDevice is ListenInterface for an interface given by name.
func ListenDevice(device string, port int) (net.PacketConn, error) {
	if _, err := net.InterfaceByName(device); err != nil {
		return nil, fmt.Errorf("dhcp: interface %q: %w", device, err)
	}
	return listen(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)), device)
}

// ListenAddr returns a UDP socket bound to ip:port only, with SO_REUSEADDR
// and SO_BROADCAST: enough for the PXE boot server port (4011), where
// clients that already have an address send unicast, and for a relay
// agent's giaddr socket. The caller closes the socket.
func ListenAddr(ip netip.Addr, port int) (net.PacketConn, error) {
	ip = ip.Unmap()
	if !ip.Is4() {
		return nil, fmt.Errorf("dhcp: listen on %s: want an IPv4 address", ip)
	}
	return listen(netip.AddrPortFrom(ip, uint16(port)), "")
}

// InterfaceFor returns the interface that has ip among its addresses.
func InterfaceFor(ip netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("dhcp: list interfaces: %w", err)
	}
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
					return &ifs[i], nil
				}
			}
		}
	}
	return nil, fmt.Errorf("dhcp: address %s is not on any interface of this machine", ip)
}

// InterfaceAddr returns the first IPv4 address of the interface named name.
func InterfaceAddr(name string) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dhcp: interface %q: %w", name, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dhcp: addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap().Is4() {
				return x.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("dhcp: interface %s has no IPv4 address", name)
}

// receiveBuffer is the socket receive buffer asked for: about 4,000 queued
// DHCP packets (each costs ~1 KiB of buffer accounting).
const receiveBuffer = 4 << 20

func listen(at netip.AddrPort, device string) (net.PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			for _, o := range []int{unix.SO_REUSEADDR, unix.SO_BROADCAST} {
				if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o, 1); serr != nil {
					return
				}
			}
			// A deep receive queue absorbs bursts (a rack powering on, a
			// scheduling hiccup) instead of dropping them. Root may exceed
			// net.core.rmem_max; otherwise the kernel caps the request.
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBuffer) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, receiveBuffer)
			}
			if device != "" {
				if serr = unix.BindToDevice(int(fd), device); serr != nil {
					serr = fmt.Errorf("SO_BINDTODEVICE %s: %w", device, serr)
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := lc.ListenPacket(context.Background(), "udp4", at.String())
	if err != nil {
		where := at.String()
		if device != "" {
			where += " on " + device
		}
		switch {
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("dhcp: listen on %s: %w (binding port %d and an interface needs root, or CAP_NET_BIND_SERVICE and CAP_NET_RAW)", where, err, at.Port())
		case errors.Is(err, unix.EADDRINUSE):
			return nil, fmt.Errorf("dhcp: listen on %s: %w (is another DHCP server, e.g. dnsmasq, running?)", where, err)
		}
		return nil, fmt.Errorf("dhcp: listen on %s: %w", where, err)
	}
	return c, nil
}
