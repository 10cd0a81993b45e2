package model

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/oci"
)

// Hardware describes one machine: its interfaces (what DHCP hands out and
// whether it may netboot), its disks and the metadata the machine reads about
// itself. Field names and JSON tags follow tinkerbell.org/v1alpha1 Hardware.
type Hardware struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       HardwareSpec   `json:"spec,omitempty"`
	Status     HardwareStatus `json:"status,omitempty"`
}

// HardwareSpec is Tinkerbell's Hardware spec.
type HardwareSpec struct {
	BMCRef      *LocalObjectReference `json:"bmcRef,omitempty"`
	Interfaces  []Interface           `json:"interfaces,omitempty"`
	Metadata    *HardwareMetadata     `json:"metadata,omitempty"`
	TinkVersion int64                 `json:"tinkVersion,omitempty"`
	Disks       []Disk                `json:"disks,omitempty"`
	Resources   map[string]string     `json:"resources,omitempty"`
	UserData    *string               `json:"userData,omitempty"`
	VendorData  *string               `json:"vendorData,omitempty"`
	// AgentID is the ID the machine's agent reports as. If empty, the first
	// interface's MAC is used (see Hardware.AgentIDs).
	AgentID string `json:"agentID,omitempty"`
	// BootProfileRef names the BootProfile (same namespace) the machine
	// boots when it has no active workflow, whatever the profiles'
	// selectors say. Anvil's addition.
	BootProfileRef *LocalObjectReference `json:"bootProfileRef,omitempty"`
}

// HardwareStatus is Tinkerbell's Hardware status.
type HardwareStatus struct {
	State string `json:"state,omitempty"`
	// Attributes is the inventory the machine's agent last reported
	// (Anvil's agent on each boot, or a tink-agent), in Tinkerbell's
	// shape. Written by the server, never by hand.
	Attributes *Attributes `json:"attributes,omitempty"`
	// Commissioning is what the machine's commissioning checks found
	// (docs/commissioning.md). Written by the server, never by hand.
	// Anvil's.
	Commissioning *Commissioning `json:"commissioning,omitempty"`
}

// LocalObjectReference names another object in the same namespace.
type LocalObjectReference struct {
	APIGroup *string `json:"apiGroup,omitempty"`
	Kind     string  `json:"kind,omitempty"`
	Name     string  `json:"name,omitempty"`
}

// Interface is one network interface: what DHCP answers and how it netboots.
type Interface struct {
	Netboot     *Netboot `json:"netboot,omitempty"`
	DHCP        *DHCP    `json:"dhcp,omitempty"`
	DisableDHCP *bool    `json:"disableDhcp,omitempty"`
}

// Netboot says whether and how an interface may network boot.
type Netboot struct {
	AllowPXE      *bool `json:"allowPXE,omitempty"`
	AllowWorkflow *bool `json:"allowWorkflow,omitempty"`
	IPXE          *IPXE `json:"ipxe,omitempty"`
	OSIE          *OSIE `json:"osie,omitempty"`
}

// IPXE overrides the iPXE script or binary a machine gets.
type IPXE struct {
	URL      string `json:"url,omitempty"`
	Contents string `json:"contents,omitempty"`
	Binary   string `json:"binary,omitempty"`
}

// OSIE overrides the boot environment (kernel, initrd, arguments).
type OSIE struct {
	BaseURL      string   `json:"baseURL,omitempty"`
	Kernel       string   `json:"kernel,omitempty"`
	Initrd       string   `json:"initrd,omitempty"`
	KernelParams []string `json:"kernelParams,omitempty"`
}

// DHCP is what the DHCP server answers an interface with.
type DHCP struct {
	MAC                   string                 `json:"mac,omitempty"`
	Hostname              string                 `json:"hostname,omitempty"`
	DomainName            string                 `json:"domain_name,omitempty"`
	LeaseTime             int64                  `json:"lease_time,omitempty"`
	NameServers           []string               `json:"name_servers,omitempty"`
	TimeServers           []string               `json:"time_servers,omitempty"`
	Arch                  string                 `json:"arch,omitempty"`
	UEFI                  *bool                  `json:"uefi,omitempty"`
	IfaceName             string                 `json:"iface_name,omitempty"`
	IP                    *IP                    `json:"ip,omitempty"`
	VLANID                string                 `json:"vlan_id,omitempty"`
	ClasslessStaticRoutes []ClasslessStaticRoute `json:"classless_static_routes,omitempty"`
	TFTPServerName        string                 `json:"tftp_server_name,omitempty"`
	BootFileName          string                 `json:"boot_file_name,omitempty"`
}

// IP is an address with its mask and gateway.
type IP struct {
	Address string `json:"address,omitempty"`
	Netmask string `json:"netmask,omitempty"`
	Gateway string `json:"gateway,omitempty"`
	Family  int64  `json:"family,omitempty"`
}

// ClasslessStaticRoute is one RFC 3442 route.
type ClasslessStaticRoute struct {
	DestinationDescriptor string `json:"destination_descriptor,omitempty"`
	Router                string `json:"router,omitempty"`
}

// Disk is one disk of the machine, by device path.
type Disk struct {
	Device string `json:"device,omitempty"`
}

// HardwareMetadata is what the machine reads about itself from the metadata
// service.
type HardwareMetadata struct {
	State        string                `json:"state,omitempty"`
	BondingMode  int64                 `json:"bonding_mode,omitempty"`
	Manufacturer *MetadataManufacturer `json:"manufacturer,omitempty"`
	Instance     *MetadataInstance     `json:"instance,omitempty"`
	Custom       map[string]any        `json:"custom,omitempty"`
	Facility     *MetadataFacility     `json:"facility,omitempty"`
}

// MetadataManufacturer names the machine's maker.
type MetadataManufacturer struct {
	ID   string `json:"id,omitempty"`
	Slug string `json:"slug,omitempty"`
}

// MetadataFacility says where the machine is and what it is.
type MetadataFacility struct {
	PlanSlug        string `json:"plan_slug,omitempty"`
	PlanVersionSlug string `json:"plan_version_slug,omitempty"`
	FacilityCode    string `json:"facility_code,omitempty"`
}

// MetadataInstance describes the instance the machine is to become.
type MetadataInstance struct {
	ID                  string                   `json:"id,omitempty"`
	State               string                   `json:"state,omitempty"`
	Hostname            string                   `json:"hostname,omitempty"`
	AllowPXE            *bool                    `json:"allow_pxe,omitempty"`
	Rescue              *bool                    `json:"rescue,omitempty"`
	OperatingSystem     *MetadataOperatingSystem `json:"operating_system,omitempty"`
	AlwaysPXE           *bool                    `json:"always_pxe,omitempty"`
	IPXEScriptURL       string                   `json:"ipxe_script_url,omitempty"`
	IPs                 []MetadataIP             `json:"ips,omitempty"`
	Userdata            string                   `json:"userdata,omitempty"`
	CryptedRootPassword string                   `json:"crypted_root_password,omitempty"`
	Tags                []string                 `json:"tags,omitempty"`
	// Storage is kept as free-form JSON: rootio reads it, Anvil passes it on.
	Storage      map[string]any `json:"storage,omitempty"`
	SSHKeys      []string       `json:"ssh_keys,omitempty"`
	NetworkReady *bool          `json:"network_ready,omitempty"`
}

// MetadataOperatingSystem names the OS to install.
type MetadataOperatingSystem struct {
	Slug     string `json:"slug,omitempty"`
	Distro   string `json:"distro,omitempty"`
	Version  string `json:"version,omitempty"`
	ImageTag string `json:"image_tag,omitempty"`
	OSSlug   string `json:"os_slug,omitempty"`
}

// MetadataIP is one address of the instance.
type MetadataIP struct {
	Address    string `json:"address,omitempty"`
	Netmask    string `json:"netmask,omitempty"`
	Gateway    string `json:"gateway,omitempty"`
	Family     int64  `json:"family,omitempty"`
	Public     *bool  `json:"public,omitempty"`
	Management *bool  `json:"management,omitempty"`
}

// MAC returns the interface's dhcp.mac, or the zero MAC when it has none.
// The Hardware keeps the MAC as the user wrote it (`get -o yaml` shows what
// was applied); this is its one reading as an address, for every lookup and
// comparison. A MAC that does not parse is the zero MAC too: Validate
// refuses it, so no stored Hardware has one.
func (i *Interface) MAC() macaddr.MAC {
	if i.DHCP == nil || i.DHCP.MAC == "" {
		return macaddr.MAC{}
	}
	m, _ := macaddr.Parse(i.DHCP.MAC) // the zero MAC on error, as documented
	return m
}

// MACs returns the interfaces' MAC addresses (Interface.MAC), in order,
// leaving out the interfaces without one.
func (h *Hardware) MACs() []macaddr.MAC {
	var out []macaddr.MAC
	for i := range h.Spec.Interfaces {
		if m := h.Spec.Interfaces[i].MAC(); m.IsValid() {
			out = append(out, m)
		}
	}
	return out
}

// IPs returns the interfaces' DHCP addresses, in order.
func (h *Hardware) IPs() []string {
	var out []string
	for _, i := range h.Spec.Interfaces {
		if i.DHCP != nil && i.DHCP.IP != nil && i.DHCP.IP.Address != "" {
			out = append(out, i.DHCP.IP.Address)
		}
	}
	return out
}

// AgentIDs returns the IDs an agent on this machine may report as: spec.agentID
// if set, and the first MAC in canonical form (Tinkerbell's default).
func (h *Hardware) AgentIDs() []string {
	var out []string
	if h.Spec.AgentID != "" {
		out = append(out, h.Spec.AgentID)
	}
	if macs := h.MACs(); len(macs) > 0 && (len(out) == 0 || out[0] != macs[0].String()) {
		out = append(out, macs[0].String())
	}
	return out
}

// VarsAnnotation holds a Hardware's variables as a JSON object (what `anvil
// import inventory` keeps of a host's inventory variables), for boot
// profile templates as .Vars.
const VarsAnnotation = "anvil.dev/inventory-vars"

// AgentAttributesAnnotation holds, as JSON, what a tink-agent reported
// about its machine (CPU, memory, disks, NICs, PCI devices, firmware) in
// its last GetAction: Tinkerbell's annotation, in Tinkerbell's shape, so
// that tools written for it read it here too.
const AgentAttributesAnnotation = "tinkerbell.org/agent-attributes"

// Vars returns the variables of VarsAnnotation: an empty map when there
// is none, an error naming the annotation when it is not a JSON object.
func (h *Hardware) Vars() (map[string]any, error) {
	out := map[string]any{}
	raw, ok := h.Annotations[VarsAnnotation]
	if !ok || raw == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("hardware %s: annotation %s is not a JSON object: %w", h.Key(), VarsAnnotation, err)
	}
	return out, nil
}

// RegistriesAnnotation holds a Hardware's registry settings as JSON (the
// form of oci.Settings: mirrors, plainHTTP, ca, auths): how the agent of
// this machine pulls action images, on top of the server's
// --registry-* flags. An annotation, so that Tinkerbell's Hardware schema
// is kept as it is (docs/actions.md).
const RegistriesAnnotation = "anvil.dev/registries"

// Registries returns the settings of RegistriesAnnotation, normalized:
// zero when there is none, an error naming the annotation when they do
// not parse.
func (h *Hardware) Registries() (oci.Settings, error) {
	raw, ok := h.Annotations[RegistriesAnnotation]
	if !ok || strings.TrimSpace(raw) == "" {
		return oci.Settings{}, nil
	}
	s, err := oci.ParseSettings([]byte(raw))
	if err != nil {
		return oci.Settings{}, fmt.Errorf("hardware %s: annotation %s: %w", h.Key(), RegistriesAnnotation, err)
	}
	return s, nil
}

// InstanceID returns metadata.instance.id, or "".
func (h *Hardware) InstanceID() string {
	if h.Spec.Metadata != nil && h.Spec.Metadata.Instance != nil {
		return h.Spec.Metadata.Instance.ID
	}
	return ""
}
