// Package dhcptest has fakes for testing the DHCP server and its users: a
// Backend over a map.
package dhcptest

import (
	"context"
	"sync"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/macaddr"
)

// Backend is a dhcp.Backend over a map from MAC to Host. The zero value
// knows no MAC. It is safe for concurrent use.
type Backend struct {
	mu    sync.RWMutex
	hosts map[macaddr.MAC]*dhcp.Host
	// Err, if set, is returned by every Lookup (a failing store).
	Err error
}

// Set makes mac known as h (nil: unknown again).
func (b *Backend) Set(mac macaddr.MAC, h *dhcp.Host) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hosts == nil {
		b.hosts = make(map[macaddr.MAC]*dhcp.Host)
	}
	if h == nil {
		delete(b.hosts, mac)
		return
	}
	b.hosts[mac] = h
}

// Lookup returns the Host set for mac, or an error wrapping
// dhcp.ErrUnknownHost.
func (b *Backend) Lookup(_ context.Context, mac macaddr.MAC) (*dhcp.Host, error) {
	if b.Err != nil {
		return nil, b.Err
	}
	b.mu.RLock()
	h := b.hosts[mac]
	b.mu.RUnlock()
	if h == nil {
		return nil, dhcp.ErrUnknownHost
	}
	return h, nil
}
