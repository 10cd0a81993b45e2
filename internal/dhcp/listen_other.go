//go:build !linux

package dhcp

import (
	"errors"
	"net"
	"net/netip"
)

var errNotLinux = errors.New("dhcp: binding to an interface is implemented for Linux only")

// ListenInterface needs SO_BINDTODEVICE, which is Linux's.
func ListenInterface(ip netip.Addr, port int) (net.PacketConn, error) { return nil, errNotLinux }

// ListenDevice needs SO_BINDTODEVICE, which is Linux's.
func ListenDevice(device string, port int) (net.PacketConn, error) { return nil, errNotLinux }

// ListenAddr is implemented for Linux only.
func ListenAddr(ip netip.Addr, port int) (net.PacketConn, error) { return nil, errNotLinux }

// InterfaceFor is implemented for Linux only.
func InterfaceFor(ip netip.Addr) (*net.Interface, error) { return nil, errNotLinux }

// InterfaceAddr is implemented for Linux only.
func InterfaceAddr(name string) (netip.Addr, error) { return netip.Addr{}, errNotLinux }
