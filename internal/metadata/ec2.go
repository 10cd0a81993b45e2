package metadata

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/anvilproj/anvil/internal/model"
)

// IP families of spec.metadata.instance.ips[].family.
const (
	familyIPv4 = 4
	familyIPv6 = 6
)

// Route labels of the EC2-style items: the item's path after the version,
// with {n} for a key index. Requests for items that do not exist share
// routeOther, so the number of metric series stays fixed.
const (
	routePrefix = "/{version}/"
	routeOther  = routePrefix + "other"
	// keysDir is the directory of public keys.
	keysDir = "meta-data/public-keys"
	// keyLeaf is the one item under a key's directory.
	keyLeaf = "openssh-key"
)

// view is what the items are read from: the caller's Hardware and the
// index of the interface the call came from (-1 if none, e.g. behind a
// trusted proxy that forwarded another address of the same Hardware).
type view struct {
	hw    *model.Hardware
	iface int
}

func (v view) instance() *model.MetadataInstance {
	if m := v.hw.Spec.Metadata; m != nil && m.Instance != nil {
		return m.Instance
	}
	return &model.MetadataInstance{}
}

func (v view) os() *model.MetadataOperatingSystem {
	if o := v.instance().OperatingSystem; o != nil {
		return o
	}
	return &model.MetadataOperatingSystem{}
}

func (v view) facility() *model.MetadataFacility {
	if m := v.hw.Spec.Metadata; m != nil && m.Facility != nil {
		return m.Facility
	}
	return &model.MetadataFacility{}
}

// dhcp is the DHCP block of the interface the call came from, or nil.
func (v view) dhcp() *model.DHCP {
	if v.iface < 0 {
		return nil
	}
	return v.hw.Spec.Interfaces[v.iface].DHCP
}

// hostname is metadata.instance.hostname, else (an Anvil addition) the
// calling interface's dhcp.hostname, the name DHCP gave the machine.
func (v view) hostname() string {
	if h := v.instance().Hostname; h != "" {
		return h
	}
	if d := v.dhcp(); d != nil {
		return d.Hostname
	}
	return ""
}

// address returns the first instance address of family fam whose public
// flag is public. A family left at 0 is read from the address.
func (v view) address(fam int64, public bool) string {
	for _, ip := range v.instance().IPs {
		f := ip.Family
		if f == 0 {
			if a, err := netip.ParseAddr(ip.Address); err == nil {
				f = familyIPv6
				if a.Unmap().Is4() {
					f = familyIPv4
				}
			}
		}
		if f == fam && model.BoolValue(ip.Public, false) == public && ip.Address != "" {
			return ip.Address
		}
	}
	return ""
}

// localIPv4 is the first private IPv4 instance address, else (an Anvil
// addition) the calling interface's dhcp.ip.address: the address the
// machine has.
func (v view) localIPv4() string {
	if a := v.address(familyIPv4, false); a != "" {
		return a
	}
	if d := v.dhcp(); d != nil && d.IP != nil {
		if a, err := netip.ParseAddr(d.IP.Address); err == nil && a.Unmap().Is4() {
			return a.Unmap().String()
		}
	}
	return ""
}

// userData is spec.userData, else metadata.instance.userdata.
func (v view) userData() string {
	if u := v.hw.Spec.UserData; u != nil {
		return *u
	}
	return v.instance().Userdata
}

// itemDef is one EC2-style item: a value read from the view, or a listing.
// arg is the key index of the {n} items.
type itemDef struct {
	route string
	value func(v view, arg int) (string, error)
}

// leaves are the items with a value of their own, by path. The listings
// are derived from them (see listings).
var leaves = map[string]func(view) string{
	"user-data":                          func(v view) string { return v.userData() },
	"vendor-data":                        func(v view) string { return deref(v.hw.Spec.VendorData) },
	"meta-data/instance-id":              func(v view) string { return v.instance().ID },
	"meta-data/hostname":                 func(v view) string { return v.hostname() },
	"meta-data/local-hostname":           func(v view) string { return v.hostname() },
	"meta-data/iqn":                      func(view) string { return "" }, // Equinix's; a Hardware has no such field
	"meta-data/plan":                     func(v view) string { return v.facility().PlanSlug },
	"meta-data/facility":                 func(v view) string { return v.facility().FacilityCode },
	"meta-data/tags":                     func(v view) string { return strings.Join(v.instance().Tags, "\n") },
	"meta-data/public-ipv4":              func(v view) string { return v.address(familyIPv4, true) },
	"meta-data/public-ipv6":              func(v view) string { return v.address(familyIPv6, true) },
	"meta-data/local-ipv4":               func(v view) string { return v.localIPv4() },
	keysDir:                              func(v view) string { return strings.Join(v.instance().SSHKeys, "\n") },
	"meta-data/operating-system/slug":    func(v view) string { return v.os().Slug },
	"meta-data/operating-system/distro":  func(v view) string { return v.os().Distro },
	"meta-data/operating-system/version": func(v view) string { return v.os().Version },
	"meta-data/operating-system/image_tag": func(v view) string {
		return v.os().ImageTag
	},
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// items are every fixed item and listing, by path ("" is the root).
var items = buildItems()

// buildItems adds to the leaves a listing for every directory above them:
// its children, sorted, a directory's name ending in "/", one per line.
// public-keys is a leaf, as in Hegel (the keys, one per line); its
// per-key items are answered by lookupItem.
func buildItems() map[string]*itemDef {
	children := map[string][]string{}
	for p := range leaves {
		for {
			dir, name := "", p
			if i := strings.LastIndexByte(p, '/'); i >= 0 {
				dir, name = p[:i], p[i+1:]
			}
			if _, isLeaf := leaves[p]; !isLeaf {
				name += "/"
			}
			if !slices.Contains(children[dir], name) {
				children[dir] = append(children[dir], name)
			}
			if dir == "" {
				break
			}
			p = dir
		}
	}
	out := map[string]*itemDef{}
	for p, fn := range leaves {
		out[p] = &itemDef{route: routePrefix + p, value: func(v view, _ int) (string, error) { return fn(v), nil }}
	}
	for dir, names := range children {
		slices.Sort(names)
		body := strings.Join(names, "\n")
		out[dir] = &itemDef{route: routePrefix + dir, value: func(view, int) (string, error) { return body, nil }}
	}
	return out
}

// Per-key items, EC2's layout: public-keys/N lists openssh-key, and
// public-keys/N/openssh-key is the Nth key.
var (
	keyListing = &itemDef{route: routePrefix + keysDir + "/{n}", value: func(v view, n int) (string, error) {
		if _, err := key(v, n); err != nil {
			return "", err
		}
		return keyLeaf, nil
	}}
	keyItem = &itemDef{route: routePrefix + keysDir + "/{n}/" + keyLeaf, value: key}
)

func key(v view, n int) (string, error) {
	keys := v.instance().SSHKeys
	if n >= len(keys) {
		return "", fmt.Errorf("no public key %d: the Hardware has %d (spec.metadata.instance.ssh_keys)", n, len(keys))
	}
	return keys[n], nil
}

// lookupItem returns the item at path (no leading or trailing slash) and
// its key index, or nil.
func lookupItem(path string) (*itemDef, int) {
	if it := items[path]; it != nil {
		return it, 0
	}
	rest, ok := strings.CutPrefix(path, keysDir+"/")
	if !ok {
		return nil, 0
	}
	num, leaf, hasLeaf := strings.Cut(rest, "/")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || strconv.Itoa(n) != num {
		return nil, 0
	}
	switch {
	case !hasLeaf:
		return keyListing, n
	case leaf == keyLeaf:
		return keyItem, n
	}
	return nil, 0
}

// ifaceOf returns the index of hw's interface whose dhcp.ip.address is ip,
// or -1.
func ifaceOf(hw *model.Hardware, ip netip.Addr) int {
	for i, ifc := range hw.Spec.Interfaces {
		if ifc.DHCP == nil || ifc.DHCP.IP == nil {
			continue
		}
		if a, err := netip.ParseAddr(strings.TrimSpace(ifc.DHCP.IP.Address)); err == nil && a.Unmap() == ip {
			return i
		}
	}
	return -1
}
