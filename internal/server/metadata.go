package server

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/anvilproj/anvil/internal/metadata"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// storeFinder is the metadata service's Finder over the store's IP index.
type storeFinder struct{ st store.Indexer }

// HardwareByIP implements metadata.Finder: the one Hardware with an
// interface whose dhcp.ip.address is ip. Two Hardware claiming one address
// get neither answered (metadata.ErrAmbiguousIP), unlike DHCP's
// first-by-name rule: metadata must never hand one machine another's.
func (f storeFinder) HardwareByIP(ctx context.Context, ip netip.Addr) (*model.Hardware, error) {
	ip = ip.Unmap()
	objs, err := f.st.ByIndex(ctx, model.KindHardware, store.IndexIP, ip.String())
	if err != nil {
		return nil, fmt.Errorf("find hardware by IP %s: %w", ip, err)
	}
	var found []*model.Hardware
	for _, o := range objs {
		hw, ok := o.(*model.Hardware)
		if ok && hasIP(hw, ip) {
			found = append(found, hw)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s: %w", ip, metadata.ErrUnknownIP)
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, hw := range found {
		names[i] = hw.Key()
	}
	return nil, fmt.Errorf("%w (%s): %s", metadata.ErrAmbiguousIP, ip, strings.Join(names, ", "))
}

func hasIP(hw *model.Hardware, ip netip.Addr) bool {
	for _, ifc := range hw.Spec.Interfaces {
		if ifc.DHCP == nil || ifc.DHCP.IP == nil {
			continue
		}
		if a, err := netip.ParseAddr(strings.TrimSpace(ifc.DHCP.IP.Address)); err == nil && a.Unmap() == ip {
			return true
		}
	}
	return false
}
