package model

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/oci"
)

// Validate checks an object on its own (references to other objects are
// CheckReferences' job). The error is an ErrorList whose entries name the
// field path; it is nil when the object is valid.
func Validate(obj Object) error {
	return validate(obj).errOrNil()
}

func validate(obj Object) ErrorList {
	var errs ErrorList
	add := func(path, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	meta := obj.GetObjectMeta()
	if meta.Name == "" {
		add("metadata.name", "missing name")
	} else if msg := checkDNSSubdomain(meta.Name); msg != "" {
		add("metadata.name", "%q: %s", meta.Name, msg)
	}
	if meta.Namespace != "" {
		if msg := checkDNSLabel(meta.Namespace); msg != "" {
			add("metadata.namespace", "%q: %s", meta.Namespace, msg)
		}
	}
	switch o := obj.(type) {
	case *Hardware:
		validateHardware(o, add)
	case *Template:
		if o.Spec.Data == nil || strings.TrimSpace(*o.Spec.Data) == "" {
			add("spec.data", "missing template data (the workflow definition, as YAML)")
		}
	case *Workflow:
		validateWorkflow(o, add)
	case *BootProfile:
		validateBootProfile(o, add)
	case *Machine:
		validateMachine(o, add)
	case *Job:
		validateJob(o, add)
	case *BMCTask:
		validateTask(o, add)
	case *Secret:
		validateSecret(o, add)
	case *WorkflowRuleSet:
		validateWorkflowRuleSet(o, add)
	}
	return errs
}

type addFunc func(path, format string, args ...any)

func validateHardware(h *Hardware, add addFunc) {
	if raw, ok := h.Annotations[RegistriesAnnotation]; ok && strings.TrimSpace(raw) != "" {
		if _, err := oci.ParseSettings([]byte(raw)); err != nil {
			add("metadata.annotations["+RegistriesAnnotation+"]", "%v", err)
		}
	}
	if len(h.Spec.Interfaces) == 0 {
		add("spec.interfaces", "at least one interface with dhcp.mac is required")
	}
	seenMAC := map[macaddr.MAC]string{}
	for i, iface := range h.Spec.Interfaces {
		p := fmt.Sprintf("spec.interfaces[%d]", i)
		d := iface.DHCP
		if d == nil {
			add(p+".dhcp", "missing dhcp (it holds the interface's mac)")
			continue
		}
		if d.MAC == "" {
			add(p+".dhcp.mac", "missing MAC address")
		} else if mac, err := macaddr.Parse(d.MAC); err != nil {
			add(p+".dhcp.mac", "%v", err)
		} else {
			if prev, ok := seenMAC[mac]; ok {
				add(p+".dhcp.mac", "%s is also the MAC of %s", d.MAC, prev)
			}
			seenMAC[mac] = p
		}
		if d.IP != nil {
			checkAddr(add, p+".dhcp.ip.address", d.IP.Address)
			checkNetmask(add, p+".dhcp.ip.netmask", d.IP.Netmask)
			checkAddr(add, p+".dhcp.ip.gateway", d.IP.Gateway)
		}
		for j, ns := range d.NameServers {
			checkAddr(add, fmt.Sprintf("%s.dhcp.name_servers[%d]", p, j), ns)
		}
		if d.LeaseTime < 0 {
			add(p+".dhcp.lease_time", "must not be negative")
		}
		if (d.TFTPServerName == "") != (d.BootFileName == "") {
			add(p+".dhcp", "tftp_server_name and boot_file_name go together: set both or neither")
		}
		switch d.Arch {
		case "", "x86_64", "aarch64", "arm64", "amd64", "i386", "x86", "hua", "2a2", "arm", "riscv64":
		default:
			add(p+".dhcp.arch", "unknown architecture %q (want x86_64 or aarch64)", d.Arch)
		}
		for j, r := range d.ClasslessStaticRoutes {
			rp := fmt.Sprintf("%s.dhcp.classless_static_routes[%d]", p, j)
			if _, err := netip.ParsePrefix(r.DestinationDescriptor); err != nil {
				add(rp+".destination_descriptor", "%q is not a CIDR prefix", r.DestinationDescriptor)
			}
			checkAddr(add, rp+".router", r.Router)
		}
	}
	if m := h.Spec.Metadata; m != nil && m.Instance != nil {
		for i, ip := range m.Instance.IPs {
			p := fmt.Sprintf("spec.metadata.instance.ips[%d]", i)
			checkAddr(add, p+".address", ip.Address)
			checkAddr(add, p+".gateway", ip.Gateway)
		}
	}
	for i, d := range h.Spec.Disks {
		if d.Device == "" {
			add(fmt.Sprintf("spec.disks[%d].device", i), "missing device path")
		}
	}
	if r := h.Spec.BootProfileRef; r != nil {
		if r.Name == "" {
			add("spec.bootProfileRef.name", "missing name (of a BootProfile in the same namespace)")
		} else if msg := checkDNSSubdomain(r.Name); msg != "" {
			add("spec.bootProfileRef.name", "%q: %s", r.Name, msg)
		}
		if r.Kind != "" && r.Kind != KindBootProfile {
			add("spec.bootProfileRef.kind", "kind %q: a bootProfileRef names a %s", r.Kind, KindBootProfile)
		}
	}
	if r := h.Spec.BMCRef; r != nil {
		if r.Name == "" {
			add("spec.bmcRef.name", "missing name (of a Machine in the same namespace)")
		} else if msg := checkDNSSubdomain(r.Name); msg != "" {
			add("spec.bmcRef.name", "%q: %s", r.Name, msg)
		}
		if r.Kind != "" && r.Kind != KindMachine {
			add("spec.bmcRef.kind", "kind %q: a bmcRef names a %s (apiGroup bmc.tinkerbell.org)", r.Kind, KindMachine)
		}
	}
}

func validateWorkflow(w *Workflow, add addFunc) {
	if w.Spec.TemplateRef == "" {
		add("spec.templateRef", "missing templateRef (the name of a Template)")
	}
	for k := range w.Spec.HardwareMap {
		if k == "hardware" || k == "Hardware" {
			add("spec.hardwareMap."+k, "the key %q is reserved for the Hardware the workflow runs on", k)
		}
	}
	if b := w.Spec.BootOptions; b != nil {
		switch b.BootMode {
		case "", "netboot", "isoboot", "customboot", "iso":
		default:
			add("spec.bootOptions.bootMode", "unknown boot mode %q (want netboot, isoboot or customboot)", b.BootMode)
		}
		if b.ToggleAllowNetboot && w.Spec.HardwareRef == "" {
			add("spec.bootOptions.toggleAllowNetboot", "needs spec.hardwareRef: it toggles that Hardware's allowPXE")
		}
		if c := b.CustombootConfig; c != nil {
			if b.BootMode != "customboot" {
				add("spec.bootOptions.custombootConfig", "is acted on with bootMode customboot only (bootMode is %q)", b.BootMode)
			}
			for i, a := range c.PreparingActions {
				validateAction(a, fmt.Sprintf("spec.bootOptions.custombootConfig.preparingActions[%d]", i), add)
			}
			for i, a := range c.PostActions {
				validateAction(a, fmt.Sprintf("spec.bootOptions.custombootConfig.postActions[%d]", i), add)
			}
		}
	}
}

// checkAddr adds an error when s is set and is not an IP address. Whether a
// field is required is the caller's rule, not this one's.
func checkAddr(add addFunc, path, s string) {
	if s == "" {
		return
	}
	if _, err := netip.ParseAddr(s); err != nil {
		add(path, "%q is not an IP address", s)
	}
}

func checkNetmask(add addFunc, path, s string) {
	if s == "" {
		return
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		add(path, "%q is not an IPv4 netmask", s)
		return
	}
	b := a.As4()
	if _, bits := net.IPMask(b[:]).Size(); bits == 0 {
		add(path, "%q is not a contiguous netmask (like 255.255.255.0)", s)
	}
}

// checkDNSSubdomain returns why s is not a DNS-1123 subdomain (the rule for
// Kubernetes object names), or "".
func checkDNSSubdomain(s string) string {
	if len(s) > 253 {
		return "longer than 253 characters"
	}
	for _, label := range strings.Split(s, ".") {
		if msg := checkLabelChars(label); msg != "" {
			return msg + " (names are lower-case letters, digits, '-' and '.')"
		}
	}
	return ""
}

// checkDNSLabel returns why s is not a DNS-1123 label (the rule for
// namespaces), or "".
func checkDNSLabel(s string) string {
	if len(s) > 63 {
		return "longer than 63 characters"
	}
	if msg := checkLabelChars(s); msg != "" {
		return msg + " (namespaces are lower-case letters, digits and '-')"
	}
	return ""
}

func checkLabelChars(l string) string {
	if l == "" {
		return "empty name part"
	}
	for i, c := range l {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(l)-1:
		default:
			return fmt.Sprintf("character %q at position %d is not allowed", c, i+1)
		}
	}
	return ""
}
