package server

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"
)

// resolvePublicIP returns the address machines reach this server at: the
// configured one, else the bind address, else (bind 0.0.0.0) the first IPv4
// address of the interface that holds the default route.
func resolvePublicIP(public, bind string) (netip.Addr, error) {
	if public != "" {
		a, err := netip.ParseAddr(public)
		if err != nil || !a.Is4() {
			return netip.Addr{}, fmt.Errorf("--public-ip %q is not an IPv4 address", public)
		}
		return a, nil
	}
	b, err := netip.ParseAddr(bind)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("--bind %q is not an IP address", bind)
	}
	if !b.IsUnspecified() {
		if !b.Is4() {
			return netip.Addr{}, fmt.Errorf("--bind %s: the boot services need an IPv4 address", b)
		}
		return b, nil
	}
	iface, err := defaultRouteInterface("/proc/net/route")
	if err != nil {
		return netip.Addr{}, fmt.Errorf("cannot guess the address machines reach this server at (%v): set --public-ip or --bind", err)
	}
	a, err := firstIPv4(iface)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%v: set --public-ip or --bind", err)
	}
	return a, nil
}

// defaultRouteInterface returns the interface of the IPv4 default route,
// read from a /proc/net/route table.
func defaultRouteInterface(table string) (string, error) {
	f, err := os.Open(table)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// Iface Destination Gateway Flags ... Mask: a default route has
		// destination and mask 0.
		if len(fields) >= 8 && fields[1] == "00000000" && fields[7] == "00000000" {
			return fields[0], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no IPv4 default route")
}

func firstIPv4(name string) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, err
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() {
				return ip.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("interface %s has no IPv4 address", name)
}

// overlayFS serves upper's files, and lower's where upper has none. upper
// may be nil.
type overlayFS struct {
	upper, lower fs.FS
}

func (o overlayFS) Open(name string) (fs.File, error) {
	if o.upper != nil {
		f, err := o.upper.Open(name)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return o.lower.Open(name)
}

// openDirFS returns dir as an fs.FS confined to it (symlinks that leave
// it fail), or nil if dir is empty.
func openDirFS(dir string) (fs.FS, error) {
	if dir == "" {
		return nil, nil
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return r.FS(), nil
}
