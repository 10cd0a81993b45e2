// Package dhcptest has fakes for testing the DHCP server and its users: a
// Backend over a map.
package dhcptest

import (
	"context"
	"net"
	"sync"

	"github.com/anvilproj/anvil/internal/dhcp"
)

// Backend is a dhcp.Backend over a map from MAC to Host. The zero value
// knows no MAC. It is safe for concurrent use.
type Backend struct {
	mu    sync.RWMutex
	hosts map[[6]byte]*dhcp.Host
	// Err, if set, is returned by every Lookup (a failing store).
	Err error
}

// Set makes mac known as h (nil: unknown again).
func (b *Backend) Set(mac net.HardwareAddr, h *dhcp.Host) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hosts == nil {
		b.hosts = make(map[[6]byte]*dhcp.Host)
	}
	k := key(mac)
	if h == nil {
		delete(b.hosts, k)
		return
	}
	b.hosts[k] = h
}

// Lookup returns the Host set for mac, or an error wrapping
// dhcp.ErrUnknownHost.
func (b *Backend) Lookup(_ context.Context, mac net.HardwareAddr) (*dhcp.Host, error) {
	if b.Err != nil {
		return nil, b.Err
	}
	if len(mac) != 6 {
		return nil, dhcp.ErrUnknownHost
	}
	b.mu.RLock()
	h := b.hosts[key(mac)]
	b.mu.RUnlock()
	if h == nil {
		return nil, dhcp.ErrUnknownHost
	}
	return h, nil
}

func key(mac net.HardwareAddr) [6]byte {
	var k [6]byte
	copy(k[:], mac)
	return k
}
