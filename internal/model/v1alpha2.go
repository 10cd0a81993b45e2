package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Tinkerbell's tinkerbell.org/v1alpha2 Hardware and Workflow are accepted
// on input and produced on output (ToVersion), but stored in the one
// internal model (v1alpha1's shape): one schema for validation, the
// store, the engine and the boot path. The shapes below are written from
// tinkerbell/tinkerbell api/v1alpha2 (field names and JSON tags are the
// contract); subtrees Anvil does not interpret are kept as free-form JSON.
//
// Conversion loses nothing. What one form cannot express travels in an
// annotation holding a JSON Patch (RFC 6902) over the other form's spec:
// V1alpha2FieldsAnnotation on the stored object (fields of an applied
// v1alpha2 document that v1alpha1 has no place for, such as
// spec.instance.lookupID), V1alpha1FieldsAnnotation on a v1alpha2 output
// (v1alpha1 fields v1alpha2 has no place for, such as
// spec.metadata.facility). Applying either form back restores the rest.

// APIVersionV1alpha2 is Tinkerbell's newer group/version, accepted for
// Hardware and Workflow.
const APIVersionV1alpha2 = "tinkerbell.org/v1alpha2"

// Annotations that carry what one form of an object cannot express.
const (
	// V1alpha2FieldsAnnotation, on a stored object, holds the JSON Patch
	// that turns its v1alpha2 form, as converted, into the spec that was
	// applied. Anvil keeps these fields without acting on them.
	V1alpha2FieldsAnnotation = "anvil.dev/v1alpha2-fields"
	// V1alpha1FieldsAnnotation, on an object shown as v1alpha2, holds the
	// JSON Patch that turns its v1alpha1 form, as converted back, into the
	// stored spec. Applying the v1alpha2 form applies it.
	V1alpha1FieldsAnnotation = "anvil.dev/v1alpha1-fields"
)

// bmcAPIGroup and bmcKind are what a v1alpha2 BMC reference converts to
// in spec.bmcRef: Rufio's Machine.
const (
	bmcAPIGroup = "bmc.tinkerbell.org"
	bmcKind     = "Machine"
)

type hardwareV2 struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       hardwareSpecV2 `json:"spec,omitempty"`
}

type hardwareSpecV2 struct {
	AgentID           string           `json:"agentID,omitempty"`
	Attributes        *attributesV2    `json:"attributes,omitempty"`
	Auto              any              `json:"auto,omitempty"`
	Instance          *instanceV2      `json:"instance,omitempty"`
	NetworkInterfaces map[string]nicV2 `json:"networkInterfaces,omitempty"`
	References        *referencesV2    `json:"references,omitempty"`
	StorageDevices    []storageV2      `json:"storageDevices,omitempty"`
}

type attributesV2 struct {
	Arch string `json:"arch,omitempty"`
	UEFI bool   `json:"uefi,omitempty"`
}

type instanceV2 struct {
	LookupID      string   `json:"lookupID,omitempty"`
	Metadata      *string  `json:"metadata,omitempty"`
	NetworkConfig *string  `json:"networkConfig,omitempty"`
	OSIE          *osieV2  `json:"osie,omitempty"`
	SSHKeys       []string `json:"sshKeys,omitempty"`
	Userdata      *string  `json:"userdata,omitempty"`
	Vendordata    *string  `json:"vendordata,omitempty"`
}

type osieV2 struct {
	InitrdURL    string   `json:"initrdURL,omitempty"`
	KernelParams []string `json:"kernelParams,omitempty"`
	KernelURL    string   `json:"kernelURL,omitempty"`
}

type nicV2 struct {
	DHCP    *dhcpV2    `json:"dhcp,omitempty"`
	IPAM    *ipamV2    `json:"ipam,omitempty"`
	Isoboot any        `json:"isoboot,omitempty"`
	Netboot *netbootV2 `json:"netboot,omitempty"`
}

type dhcpV2 struct {
	V4 *dhcpV4 `json:"v4,omitempty"`
	V6 any     `json:"v6,omitempty"`
}

type dhcpV4 struct {
	Disabled              bool      `json:"disabled,omitempty"`
	BootFileName          string    `json:"bootFileName,omitempty"`
	ClasslessStaticRoutes []routeV2 `json:"classlessStaticRoutes,omitempty"`
	DomainName            string    `json:"domainName,omitempty"`
	DomainSearchList      []string  `json:"domainSearchList,omitempty"`
	Hostname              *string   `json:"hostname,omitempty"`
	LeaseTimeSeconds      *int64    `json:"leaseTimeSeconds,omitempty"`
	Nameservers           []string  `json:"nameservers,omitempty"`
	TFTPServerName        string    `json:"tftpServerName,omitempty"`
	NTPServers            []string  `json:"ntpServers,omitempty"`
	VLANID                *string   `json:"vlanID,omitempty"`
}

type routeV2 struct {
	DestinationDescriptor string `json:"destinationDescriptor"`
	Router                string `json:"router"`
}

type ipamV2 struct {
	IPv4 *ipV2 `json:"ipv4,omitempty"`
	IPv6 any   `json:"ipv6,omitempty"`
}

type ipV2 struct {
	Address string `json:"address,omitempty"`
	Gateway string `json:"gateway,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
}

type netbootV2 struct {
	Disabled bool    `json:"disabled,omitempty"`
	IPXE     *ipxeV2 `json:"ipxe,omitempty"`
}

type ipxeV2 struct {
	Binary string `json:"binary,omitempty"`
	Script string `json:"script,omitempty"`
	URL    string `json:"url,omitempty"`
}

type referencesV2 struct {
	Additional any            `json:"additional,omitempty"`
	Builtin    *builtinRefsV2 `json:"builtin,omitempty"`
}

type builtinRefsV2 struct {
	BMC *simpleRefV2 `json:"bmc,omitempty"`
}

type simpleRefV2 struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

type storageV2 struct {
	Name string `json:"name,omitempty"`
}

type workflowV2 struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       workflowSpecV2 `json:"spec,omitempty"`
	// Status is the server's (Tinkerbell's v1alpha2 status is another
	// machine: BMC jobs, rendered Tasks); ignored on input, not shown.
	Status any `json:"status,omitempty"`
}

type workflowSpecV2 struct {
	Disabled       *bool            `json:"disabled,omitempty"`
	Globals        *extraV2         `json:"globals,omitempty"`
	References     any              `json:"references,omitempty"`
	TimeoutSeconds *int64           `json:"timeoutSeconds,omitempty"`
	Tasks          []workflowTaskV2 `json:"tasks,omitempty"`
	Vars           any              `json:"vars,omitempty"`
}

type extraV2 struct {
	Env         any               `json:"env,omitempty"`
	TemplateMap map[string]string `json:"templateMap,omitempty"`
	Volumes     any               `json:"volumes,omitempty"`
}

type workflowTaskV2 struct {
	AgentID        string              `json:"agentID,omitempty"`
	Extra          *extraV2            `json:"extra,omitempty"`
	Hardware       *workflowHardwareV2 `json:"hardware,omitempty"`
	TimeoutSeconds *int64              `json:"timeoutSeconds,omitempty"`
	TaskRef        simpleRefV2         `json:"taskRef,omitempty"`
}

type workflowHardwareV2 struct {
	BootOptions *bootOptionsV2 `json:"bootOptions,omitempty"`
	HardwareRef *simpleRefV2   `json:"hardwareRef,omitempty"`
}

type bootOptionsV2 struct {
	ToggleNetboot bool   `json:"toggleNetboot,omitempty"`
	ISOURL        string `json:"isoURL,omitempty"`
	BootMode      string `json:"bootMode,omitempty"`
	Customboot    any    `json:"customboot,omitempty"`
}

// convError is a v1alpha2 field that cannot be converted.
type convError struct {
	path, msg string // path from the object's root: "spec.tasks[1]"
}

func (e *convError) Error() string { return e.path + ": " + e.msg }

func ptr[T any](v T) *T { return &v }

// hardwareDown converts a v1alpha2 Hardware spec to the internal one.
// Interfaces are in the order of their MACs (v1alpha2 keys them by MAC).
func hardwareDown(s hardwareSpecV2) (HardwareSpec, error) {
	var out HardwareSpec
	out.AgentID = s.AgentID
	var osie *OSIE
	if in := s.Instance; in != nil {
		out.UserData, out.VendorData = in.Userdata, in.Vendordata
		if len(in.SSHKeys) > 0 {
			out.Metadata = &HardwareMetadata{Instance: &MetadataInstance{SSHKeys: in.SSHKeys}}
		}
		if o := in.OSIE; o != nil {
			osie = &OSIE{Kernel: o.KernelURL, Initrd: o.InitrdURL, KernelParams: o.KernelParams}
		}
	}
	if r := s.References; r != nil && r.Builtin != nil && r.Builtin.BMC != nil && r.Builtin.BMC.Name != "" {
		out.BMCRef = &LocalObjectReference{APIGroup: ptr(bmcAPIGroup), Kind: bmcKind, Name: r.Builtin.BMC.Name}
	}
	for _, d := range s.StorageDevices {
		out.Disks = append(out.Disks, Disk{Device: d.Name})
	}
	for _, mac := range slices.Sorted(maps.Keys(s.NetworkInterfaces)) {
		nic := s.NetworkInterfaces[mac]
		d := &DHCP{MAC: mac}
		iface := Interface{DHCP: d}
		if a := s.Attributes; a != nil {
			d.Arch = a.Arch
			if a.UEFI {
				d.UEFI = ptr(true)
			}
		}
		if nic.DHCP != nil && nic.DHCP.V4 != nil {
			v4 := nic.DHCP.V4
			if v4.Disabled {
				iface.DisableDHCP = ptr(true)
			}
			d.BootFileName, d.TFTPServerName, d.DomainName = v4.BootFileName, v4.TFTPServerName, v4.DomainName
			for _, r := range v4.ClasslessStaticRoutes {
				d.ClasslessStaticRoutes = append(d.ClasslessStaticRoutes, ClasslessStaticRoute(r))
			}
			if v4.Hostname != nil {
				d.Hostname = *v4.Hostname
			}
			if v4.LeaseTimeSeconds != nil {
				d.LeaseTime = *v4.LeaseTimeSeconds
			}
			if v4.VLANID != nil {
				d.VLANID = *v4.VLANID
			}
			d.NameServers, d.TimeServers = v4.Nameservers, v4.NTPServers
		}
		if nic.IPAM != nil && nic.IPAM.IPv4 != nil {
			ip := nic.IPAM.IPv4
			d.IP = &IP{Address: ip.Address, Gateway: ip.Gateway}
			if ip.Prefix != "" {
				n, err := strconv.Atoi(ip.Prefix)
				if err != nil || n < 0 || n > 32 {
					return HardwareSpec{}, &convError{path: "spec.networkInterfaces." + mac + ".ipam.ipv4.prefix",
						msg: fmt.Sprintf("prefix %q is not an IPv4 prefix length (0 to 32)", ip.Prefix)}
				}
				d.IP.Netmask = net.IP(net.CIDRMask(n, 32)).String()
			}
		}
		disabled := nic.Netboot != nil && nic.Netboot.Disabled
		nb := &Netboot{AllowPXE: ptr(!disabled), AllowWorkflow: ptr(!disabled), OSIE: osie}
		if nic.Netboot != nil && nic.Netboot.IPXE != nil {
			x := nic.Netboot.IPXE
			nb.IPXE = &IPXE{URL: x.URL, Contents: x.Script, Binary: x.Binary}
		}
		iface.Netboot = nb
		out.Interfaces = append(out.Interfaces, iface)
	}
	return out, nil
}

// hardwareUp converts an internal Hardware spec to v1alpha2, as far as
// v1alpha2 can say it.
func hardwareUp(h HardwareSpec, namespace string) hardwareSpecV2 {
	var out hardwareSpecV2
	out.AgentID = h.AgentID
	in := &instanceV2{Userdata: h.UserData, Vendordata: h.VendorData}
	if h.Metadata != nil && h.Metadata.Instance != nil {
		in.SSHKeys = h.Metadata.Instance.SSHKeys
	}
	if h.BMCRef != nil && h.BMCRef.Name != "" {
		out.References = &referencesV2{Builtin: &builtinRefsV2{BMC: &simpleRefV2{Name: h.BMCRef.Name, Namespace: namespace}}}
	}
	for _, d := range h.Disks {
		out.StorageDevices = append(out.StorageDevices, storageV2{Name: d.Device})
	}
	for _, i := range h.Interfaces {
		d := i.DHCP
		if d == nil || d.MAC == "" {
			continue
		}
		if out.Attributes == nil && (d.Arch != "" || d.UEFI != nil && *d.UEFI) {
			out.Attributes = &attributesV2{Arch: d.Arch, UEFI: d.UEFI != nil && *d.UEFI}
		}
		var nic nicV2
		v4 := &dhcpV4{
			Disabled:     i.DisableDHCP != nil && *i.DisableDHCP,
			BootFileName: d.BootFileName, TFTPServerName: d.TFTPServerName, DomainName: d.DomainName,
			Nameservers: d.NameServers, NTPServers: d.TimeServers,
		}
		for _, r := range d.ClasslessStaticRoutes {
			v4.ClasslessStaticRoutes = append(v4.ClasslessStaticRoutes, routeV2(r))
		}
		if d.Hostname != "" {
			v4.Hostname = ptr(d.Hostname)
		}
		if d.LeaseTime != 0 {
			v4.LeaseTimeSeconds = ptr(d.LeaseTime)
		}
		if d.VLANID != "" {
			v4.VLANID = ptr(d.VLANID)
		}
		if !reflect.ValueOf(*v4).IsZero() {
			nic.DHCP = &dhcpV2{V4: v4}
		}
		if ip := d.IP; ip != nil && (ip.Address != "" || ip.Gateway != "" || ip.Netmask != "") {
			v := &ipV2{Address: ip.Address, Gateway: ip.Gateway}
			if m := net.ParseIP(ip.Netmask).To4(); m != nil {
				if ones, bits := net.IPMask(m).Size(); bits == 32 {
					v.Prefix = strconv.Itoa(ones)
				}
			}
			nic.IPAM = &ipamV2{IPv4: v}
		}
		if nb := i.Netboot; nb != nil {
			n := &netbootV2{Disabled: nb.AllowPXE != nil && !*nb.AllowPXE}
			if x := nb.IPXE; x != nil {
				n.IPXE = &ipxeV2{Binary: x.Binary, Script: x.Contents, URL: x.URL}
			}
			if n.Disabled || n.IPXE != nil {
				nic.Netboot = n
			}
			if o := nb.OSIE; o != nil && in.OSIE == nil {
				in.OSIE = &osieV2{InitrdURL: o.Initrd, KernelParams: o.KernelParams, KernelURL: o.Kernel}
			}
		}
		if out.NetworkInterfaces == nil {
			out.NetworkInterfaces = map[string]nicV2{}
		}
		out.NetworkInterfaces[d.MAC] = nic
	}
	if !reflect.ValueOf(*in).IsZero() {
		out.Instance = in
	}
	return out
}

// workflowDown converts a v1alpha2 Workflow spec to the internal one.
// Anvil has no Task kind: the one task's taskRef names the Template to
// run, in the Workflow's namespace. A Workflow of several tasks is
// refused (Anvil runs one Template per Workflow; dropping tasks would
// change what runs).
func workflowDown(s workflowSpecV2, namespace string) (WorkflowSpec, error) {
	var out WorkflowSpec
	switch {
	case len(s.Tasks) == 0:
		return out, &convError{path: "spec.tasks", msg: "a Workflow needs one task; its taskRef names the Template to run"}
	case len(s.Tasks) > 1:
		return out, &convError{path: "spec.tasks[1]", msg: fmt.Sprintf("Anvil runs one Template per Workflow; this one has %d tasks (split it into one Workflow per task)", len(s.Tasks))}
	}
	t := s.Tasks[0]
	sameNS := func(path string, r simpleRefV2) error {
		if r.Namespace != "" && r.Namespace != namespace {
			return &convError{path: path, msg: fmt.Sprintf("namespace %q is not the Workflow's (%q): Anvil's references stay in one namespace", r.Namespace, namespace)}
		}
		return nil
	}
	if err := sameNS("spec.tasks[0].taskRef.namespace", t.TaskRef); err != nil {
		return out, err
	}
	out.TemplateRef = t.TaskRef.Name
	if hw := t.Hardware; hw != nil {
		if hw.HardwareRef != nil {
			if err := sameNS("spec.tasks[0].hardware.hardwareRef.namespace", *hw.HardwareRef); err != nil {
				return out, err
			}
			out.HardwareRef = hw.HardwareRef.Name
		}
		if b := hw.BootOptions; b != nil && (b.ToggleNetboot || b.ISOURL != "" || b.BootMode != "") {
			out.BootOptions = &BootOptions{ToggleAllowNetboot: b.ToggleNetboot, ISOURL: b.ISOURL, BootMode: b.BootMode}
		}
	}
	out.Disabled = s.Disabled
	if s.Globals != nil && len(s.Globals.TemplateMap) > 0 {
		out.HardwareMap = s.Globals.TemplateMap
	}
	return out, nil
}

// workflowUp converts an internal Workflow spec to v1alpha2.
func workflowUp(w WorkflowSpec, namespace string) workflowSpecV2 {
	out := workflowSpecV2{Disabled: w.Disabled}
	t := workflowTaskV2{TaskRef: simpleRefV2{Name: w.TemplateRef, Namespace: namespace}}
	if w.HardwareRef != "" || w.BootOptions != nil {
		t.Hardware = &workflowHardwareV2{}
		if w.HardwareRef != "" {
			t.Hardware.HardwareRef = &simpleRefV2{Name: w.HardwareRef, Namespace: namespace}
		}
		if b := w.BootOptions; b != nil {
			t.Hardware.BootOptions = &bootOptionsV2{ToggleNetboot: b.ToggleAllowNetboot, ISOURL: b.ISOURL, BootMode: b.BootMode}
		}
	}
	out.Tasks = []workflowTaskV2{t}
	if len(w.HardwareMap) > 0 {
		out.Globals = &extraV2{TemplateMap: w.HardwareMap}
	}
	return out
}

// v2Type is the Go shape of kind's v1alpha2 form (for unknown-field
// checks), or nil when kind has none.
func v2Type(kind string) reflect.Type {
	switch kind {
	case KindHardware:
		return reflect.TypeOf(hardwareV2{})
	case KindWorkflow:
		return reflect.TypeOf(workflowV2{})
	}
	return nil
}

// fromV1alpha2 converts a v1alpha2 document (decoded JSON) to the internal
// form's JSON, with V1alpha2FieldsAnnotation holding what the internal
// form cannot say. ignored lists those fields' paths ("spec.auto"): Anvil
// keeps them and does not act on them.
func fromV1alpha2(kind string, value map[string]any) (out map[string]any, ignored []string, err error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return nil, nil, err
	}
	var meta ObjectMeta
	var spec2 any // the v1alpha2 spec, normalized through its Go shape
	var internal any
	ns := func() string {
		if meta.Namespace == "" {
			return DefaultNamespace
		}
		return meta.Namespace
	}
	var up func(specJSON []byte) (any, error)
	switch kind {
	case KindHardware:
		var h hardwareV2
		if err := json.Unmarshal(raw, &h); err != nil {
			return nil, nil, err
		}
		meta = h.ObjectMeta
		spec, err := hardwareDown(h.Spec)
		if err != nil {
			return nil, nil, err
		}
		if spec2, err = jsonValue(h.Spec); err != nil {
			return nil, nil, err
		}
		if internal, err = jsonValue(spec); err != nil {
			return nil, nil, err
		}
		up = func(b []byte) (any, error) {
			var s HardwareSpec
			if err := json.Unmarshal(b, &s); err != nil {
				return nil, err
			}
			return jsonValue(hardwareUp(s, ns()))
		}
	case KindWorkflow:
		var w workflowV2
		if err := json.Unmarshal(raw, &w); err != nil {
			return nil, nil, err
		}
		meta = w.ObjectMeta
		spec, err := workflowDown(w.Spec, ns())
		if err != nil {
			return nil, nil, err
		}
		if spec2, err = jsonValue(w.Spec); err != nil {
			return nil, nil, err
		}
		if internal, err = jsonValue(spec); err != nil {
			return nil, nil, err
		}
		up = func(b []byte) (any, error) {
			var s WorkflowSpec
			if err := json.Unmarshal(b, &s); err != nil {
				return nil, err
			}
			return jsonValue(workflowUp(s, ns()))
		}
	default:
		return nil, nil, &convError{path: "apiVersion", msg: fmt.Sprintf("%s has no %s form (Tinkerbell's v1alpha2 has Hardware and Workflow; write a %s as %s)", kind, APIVersionV1alpha2, kind, APIVersion)}
	}
	annotations := maps.Clone(meta.Annotations)
	delete(annotations, V1alpha2FieldsAnnotation)
	if p, ok := annotations[V1alpha1FieldsAnnotation]; ok {
		ops, err := parsePatch(p)
		if err != nil {
			return nil, nil, &convError{path: "metadata.annotations." + V1alpha1FieldsAnnotation, msg: err.Error()}
		}
		internal = applyPatch(internal, ops)
		delete(annotations, V1alpha1FieldsAnnotation)
	}
	ib, err := json.Marshal(internal)
	if err != nil {
		return nil, nil, err
	}
	back, err := up(ib)
	if err != nil {
		return nil, nil, err
	}
	ops := diffPatch(back, spec2, "")
	for _, op := range ops {
		// A removal is a default the conversion filled in; an empty
		// object ("netboot: {}") says nothing. Both are kept, unwarned.
		if op.Op != "remove" && !hollow(op.Value) {
			ignored = append(ignored, "spec"+pointerToPath(op.Path))
		}
	}
	if len(ops) > 0 {
		b, err := json.Marshal(ops)
		if err != nil {
			return nil, nil, err
		}
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[V1alpha2FieldsAnnotation] = string(b)
	}
	meta.Annotations = annotations
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	metaJSON, err := jsonValue(meta)
	if err != nil {
		return nil, nil, err
	}
	out = map[string]any{"apiVersion": APIVersion, "kind": kind, "metadata": metaJSON, "spec": internal}
	return out, ignored, nil
}

// ToVersion returns obj as apiVersion shows it: obj itself for its own
// apiVersion (or ""), a v1alpha2 object for APIVersionV1alpha2 (Hardware
// and Workflow only; a Workflow's status is not shown: v1alpha2's is
// another machine). The result encodes as JSON.
func ToVersion(obj Object, apiVersion string) (any, error) {
	kind := KindOf(obj)
	if apiVersion == "" || apiVersion == APIVersionOf(kind) {
		return obj, nil
	}
	if apiVersion != APIVersionV1alpha2 || v2Type(kind) == nil {
		forms := APIVersionOf(kind)
		if v2Type(kind) != nil {
			forms += " or " + APIVersionV1alpha2
		}
		return nil, fmt.Errorf("%s has no %s form (it has %s)", kind, apiVersion, forms)
	}
	meta := *obj.GetObjectMeta()
	meta.Annotations = maps.Clone(meta.Annotations)
	var extra []patchOp
	if p, ok := meta.Annotations[V1alpha2FieldsAnnotation]; ok {
		var err error
		if extra, err = parsePatch(p); err != nil {
			return nil, fmt.Errorf("%s %s: annotation %s: %w", kind, meta.Key(), V1alpha2FieldsAnnotation, err)
		}
		delete(meta.Annotations, V1alpha2FieldsAnnotation)
	}
	var spec2, internal, back any
	var err error
	switch o := obj.(type) {
	case *Hardware:
		if spec2, err = jsonValue(hardwareUp(o.Spec, meta.Namespace)); err != nil {
			return nil, err
		}
		spec2 = applyPatch(spec2, extra)
		var s hardwareSpecV2
		if err := remarshal(spec2, &s); err != nil {
			return nil, err
		}
		d, err := hardwareDown(s)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, meta.Key(), err)
		}
		if back, err = jsonValue(d); err != nil {
			return nil, err
		}
		if internal, err = jsonValue(o.Spec); err != nil {
			return nil, err
		}
	case *Workflow:
		if spec2, err = jsonValue(workflowUp(o.Spec, meta.Namespace)); err != nil {
			return nil, err
		}
		spec2 = applyPatch(spec2, extra)
		var s workflowSpecV2
		if err := remarshal(spec2, &s); err != nil {
			return nil, err
		}
		d, err := workflowDown(s, meta.Namespace)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, meta.Key(), err)
		}
		if back, err = jsonValue(d); err != nil {
			return nil, err
		}
		if internal, err = jsonValue(o.Spec); err != nil {
			return nil, err
		}
	}
	if ops := diffPatch(back, internal, ""); len(ops) > 0 {
		b, err := json.Marshal(ops)
		if err != nil {
			return nil, err
		}
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		meta.Annotations[V1alpha1FieldsAnnotation] = string(b)
	}
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	return &versioned{TypeMeta: TypeMeta{APIVersion: APIVersionV1alpha2, Kind: kind}, ObjectMeta: meta, Spec: spec2}, nil
}

// versioned is an object in another apiVersion's shape.
type versioned struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       any `json:"spec,omitempty"`
}

// jsonValue returns v as decoded JSON (maps, slices, json.Number, string,
// bool, nil): the form patches are computed on.
func jsonValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// hollow reports whether v (decoded JSON) holds no value: an empty list,
// or an object whose members are all hollow.
func hollow(v any) bool {
	switch v := v.(type) {
	case []any:
		return len(v) == 0
	case map[string]any:
		for _, m := range v {
			if !hollow(m) {
				return false
			}
		}
		return true
	}
	return false
}

// remarshal decodes the JSON value v into out.
func remarshal(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// patchOp is one JSON Patch (RFC 6902) operation: add, replace or remove.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// parsePatch reads a JSON Patch of add, replace and remove operations.
func parsePatch(s string) ([]patchOp, error) {
	var ops []patchOp
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ops); err != nil {
		return nil, fmt.Errorf("not a JSON Patch: %w", err)
	}
	for _, op := range ops {
		switch op.Op {
		case "add", "replace", "remove":
		default:
			return nil, fmt.Errorf("operation %q at %q: want add, replace or remove", op.Op, op.Path)
		}
		if !strings.HasPrefix(op.Path, "/") {
			return nil, fmt.Errorf("path %q: want a JSON Pointer (/a/b)", op.Path)
		}
	}
	return ops, nil
}

// diffPatch returns the operations that turn from into to: objects are
// compared key by key, arrays of the same length element by element; any
// other difference replaces the value whole.
func diffPatch(from, to any, ptrPath string) []patchOp {
	if reflect.DeepEqual(from, to) {
		return nil
	}
	switch t := to.(type) {
	case map[string]any:
		if f, ok := from.(map[string]any); ok {
			var ops []patchOp
			for _, k := range slices.Sorted(maps.Keys(f)) {
				if _, ok := t[k]; !ok {
					ops = append(ops, patchOp{Op: "remove", Path: ptrPath + "/" + escapePointer(k)})
				}
			}
			for _, k := range slices.Sorted(maps.Keys(t)) {
				p := ptrPath + "/" + escapePointer(k)
				if fv, ok := f[k]; ok {
					ops = append(ops, diffPatch(fv, t[k], p)...)
				} else {
					ops = append(ops, patchOp{Op: "add", Path: p, Value: t[k]})
				}
			}
			return ops
		}
	case []any:
		if f, ok := from.([]any); ok && len(f) == len(t) {
			var ops []patchOp
			for i := range t {
				ops = append(ops, diffPatch(f[i], t[i], fmt.Sprintf("%s/%d", ptrPath, i))...)
			}
			return ops
		}
	}
	if ptrPath == "" {
		return []patchOp{{Op: "replace", Path: "/", Value: to}}
	}
	return []patchOp{{Op: "replace", Path: ptrPath, Value: to}}
}

// applyPatch applies ops to doc (decoded JSON) and returns the result. An
// operation whose parent is missing creates it (as an object); one that
// names an array index out of range is skipped: the patch was made
// against an earlier version of the object.
func applyPatch(doc any, ops []patchOp) any {
	for _, op := range ops {
		if op.Path == "/" {
			if op.Op != "remove" {
				doc = op.Value
			}
			continue
		}
		keys := strings.Split(op.Path[1:], "/")
		for i := range keys {
			keys[i] = unescapePointer(keys[i])
		}
		doc = setAt(doc, keys, op)
	}
	return doc
}

func setAt(node any, keys []string, op patchOp) any {
	k := keys[0]
	last := len(keys) == 1
	switch n := node.(type) {
	case []any:
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= len(n) {
			return node
		}
		if last {
			if op.Op == "remove" {
				return append(n[:i:i], n[i+1:]...)
			}
			n[i] = op.Value
			return n
		}
		n[i] = setAt(n[i], keys[1:], op)
		return n
	case map[string]any:
		if last {
			if op.Op == "remove" {
				delete(n, k)
			} else {
				n[k] = op.Value
			}
			return n
		}
		n[k] = setAt(n[k], keys[1:], op)
		return n
	case nil:
		if op.Op == "remove" {
			return nil
		}
		return setAt(map[string]any{}, keys, op)
	}
	return node
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// pointerToPath turns a JSON Pointer ("/tasks/0/agentID") into the dotted
// form errors use (".tasks[0].agentID").
func pointerToPath(p string) string {
	if p == "/" {
		return ""
	}
	var b strings.Builder
	for _, k := range strings.Split(p[1:], "/") {
		k = unescapePointer(k)
		if _, err := strconv.Atoi(k); err == nil {
			fmt.Fprintf(&b, "[%s]", k)
			continue
		}
		b.WriteString("." + k)
	}
	return b.String()
}
