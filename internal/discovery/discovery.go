// Package discovery owns what Anvil makes of a machine it does not know
// (anvil serve --discovery): the machine's discovery ID (ID: its SMBIOS
// system UUID, else its MAC), the name of its Hardware (Name:
// discovery-<id>), and the Hardware itself, built from the inventory its
// agent reported (Hardware). Everything here is pure: the API service
// (internal/api, discover.go) decides when to write, and refuses
// collisions; the DHCP lease pool for unknown machines is
// internal/dhcp/pool.
//
// It must not touch the store, the network or the workflow engine.
package discovery

import (
	"regexp"
	"strings"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
)

// NamePrefix starts the name of every discovered Hardware (Tinkerbell's
// auto-discovery names its Hardware the same way).
const NamePrefix = "discovery-"

// LabelTinkerbell is the label Tinkerbell's auto-discovery puts on the
// Hardware it creates. Discovered Hardware carries it beside
// model.LabelDiscovered (the label Anvil's enrolment watches), so that
// tools written for Tinkerbell find them too.
const LabelTinkerbell = "tinkerbell.org/auto-discovered"

// Caps on what one inventory puts into a Hardware's spec: a real machine
// has a handful of NICs and disks; an inventory that claims thousands is
// cut to these (status.attributes keeps what the inventory said, within
// the server's size cap).
const (
	MaxInterfaces = 32
	MaxDisks      = 64
)

// bogusUUIDs are SMBIOS system UUIDs that firmware ships unset or shared
// by every board of a model: they identify no machine. (The last is the
// placeholder of a widespread AMI firmware build.)
var bogusUUIDs = map[string]bool{
	"00000000-0000-0000-0000-000000000000": true,
	"ffffffff-ffff-ffff-ffff-ffffffffffff": true,
	"03000200-0400-0500-0006-000700080009": true,
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// UsableUUID returns the system UUID of attrs, lower case, when it
// identifies a machine: well formed and not a known placeholder. Else "".
func UsableUUID(attrs *model.Attributes) string {
	if attrs == nil || attrs.Anvil == nil {
		return ""
	}
	u := strings.ToLower(strings.TrimSpace(attrs.Anvil.UUID))
	if !uuidRE.MatchString(u) || bogusUUIDs[u] {
		return ""
	}
	return u
}

// ID is the machine's discovery ID: its usable SMBIOS system UUID (lower
// case), else mac in lower-case hex without separators. Both are valid in
// a Kubernetes name (lower-case letters, digits and '-').
func ID(attrs *model.Attributes, mac macaddr.MAC) string {
	if u := UsableUUID(attrs); u != "" {
		return u
	}
	return strings.ReplaceAll(mac.String(), ":", "")
}

// Name is the name of the Hardware of the machine with discovery ID id.
func Name(id string) string { return NamePrefix + id }

// Machine is what a discovery call says about one machine.
type Machine struct {
	// Namespace is where its Hardware goes (anvil serve
	// --discovery-namespace).
	Namespace string
	// BootMAC is the MAC it booted from: the Hardware's first interface,
	// the only one allowed to netboot, and its agent ID.
	BootMAC macaddr.MAC
	// IP, when set, is the address the machine got from Anvil's discovery
	// pool (reservation mode): it becomes the boot interface's
	// reservation. Nil when the network's DHCP server gave the address
	// (proxy modes): the Hardware then reserves none.
	IP *model.IP
	// Attributes is the inventory its agent reported; never nil.
	Attributes *model.Attributes
}

// Hardware builds the Hardware of m: named Name(ID(...)) in m.Namespace,
// labelled discovered (model.LabelDiscovered and LabelTinkerbell), its
// interfaces the boot MAC first (with m.IP, netboot allowed) and then the
// other NICs of the inventory (their MACs only, no netboot), its disks
// those of the inventory an OS can go on (disks), and
// status.attributes the inventory. Lists are capped at MaxInterfaces and
// MaxDisks; invalid MACs and disk names that are not plain device names
// are left out.
func (m Machine) Hardware() *model.Hardware {
	name := Name(ID(m.Attributes, m.BootMAC))
	hw := &model.Hardware{
		TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindHardware},
		ObjectMeta: model.ObjectMeta{
			Name:      name,
			Namespace: m.Namespace,
			Labels:    map[string]string{model.LabelDiscovered: "true", LabelTinkerbell: "true"},
		},
	}
	yes := true
	boot := model.Interface{
		DHCP:    &model.DHCP{MAC: m.BootMAC.String(), Hostname: name},
		Netboot: &model.Netboot{AllowPXE: &yes, AllowWorkflow: &yes},
	}
	if m.IP != nil {
		ip := *m.IP
		boot.DHCP.IP = &ip
	}
	if a := m.Attributes.Anvil; a != nil && a.Firmware != "" {
		uefi := a.Firmware == "uefi"
		boot.DHCP.UEFI = &uefi
	}
	hw.Spec.Interfaces = append(hw.Spec.Interfaces, boot)
	seen := map[macaddr.MAC]bool{m.BootMAC: true}
	for _, n := range m.Attributes.NetworkInterfaces {
		if len(hw.Spec.Interfaces) >= MaxInterfaces {
			break
		}
		mac, err := macaddr.Parse(n.MAC)
		if err != nil || seen[mac] || mac.Bytes() == [macaddr.Len]byte{} {
			continue
		}
		seen[mac] = true
		hw.Spec.Interfaces = append(hw.Spec.Interfaces, model.Interface{DHCP: &model.DHCP{MAC: mac.String()}})
	}
	hw.Spec.Disks = disks(m.Attributes)
	hw.Status.Attributes = m.Attributes
	return hw
}

// disks are the disks of attrs an OS can be installed on, as spec.disks:
// those with a size and a plain device name, not optical or floppy
// drives (a VM's empty CD-ROM has a size too), fixed disks before
// removable ones (a template's {{ index .Hardware.Disks 0 }} is the
// first), at most MaxDisks.
func disks(attrs *model.Attributes) []model.Disk {
	removable := map[string]bool{}
	if attrs.Anvil != nil {
		for _, d := range attrs.Anvil.BlockDevices {
			removable[d.Name] = d.Removable
		}
	}
	var fixed, other []model.Disk
	for _, d := range attrs.BlockDevices {
		if d.Size == "" || d.Size == "0" || !deviceName(d.Name) || d.DriveType == "ODD" || d.DriveType == "FDD" {
			continue
		}
		disk := model.Disk{Device: "/dev/" + d.Name}
		if removable[d.Name] {
			other = append(other, disk)
		} else {
			fixed = append(fixed, disk)
		}
	}
	out := append(fixed, other...)
	return out[:min(len(out), MaxDisks)]
}

// deviceName reports whether s is a plain block device name ("sda",
// "nvme0n1", "vda"): what /dev/<s> may be made of, without a path.
func deviceName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
