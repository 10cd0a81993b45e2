package inventory

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
)

// Label and annotation keys Build sets.
const (
	// GroupLabelPrefix starts the label of each group a host is in:
	// group.anvil.dev/workers: "true". One label per group, so a host in
	// several groups matches a selector for any of them.
	GroupLabelPrefix = "group.anvil.dev/"
	// VarsAnnotation holds every variable of the host (but ansible_*
	// passwords), as a JSON object (model.Hardware.Vars reads it for
	// templates as .Vars).
	VarsAnnotation = model.VarsAnnotation
)

// Variables Build maps onto the spec instead of labels; they stay in the
// annotation too.
const (
	VarMAC      = "mac"      // spec.interfaces[0].dhcp.mac; required
	VarIP       = "ip"       // dhcp.ip.address; "10.0.0.5" or "10.0.0.5/24" (sets the netmask)
	VarNetmask  = "netmask"  // dhcp.ip.netmask
	VarGateway  = "gateway"  // dhcp.ip.gateway
	VarHostname = "hostname" // dhcp.hostname; default the host's name
	VarDomain   = "domain"   // dhcp.domain_name
	VarDisk     = "disk"     // spec.disks[0].device
	VarDisks    = "disks"    // spec.disks: a list of device paths (after disk, if both)
)

// varAnsibleHost is used for the IP when ip is not set and it is an address.
const varAnsibleHost = "ansible_host"

var specVars = map[string]bool{VarMAC: true, VarIP: true, VarNetmask: true, VarGateway: true,
	VarHostname: true, VarDomain: true, VarDisk: true, VarDisks: true}

// Options configures Build.
type Options struct {
	// Namespace of every Hardware. If empty, model.DefaultNamespace.
	Namespace string
	// AllowPXE is every interface's netboot.allowPXE (false when zero).
	AllowPXE bool
}

// Result is what Build made.
type Result struct {
	// Hardware holds one object per host, sorted by name.
	Hardware []*model.Hardware
	// Warnings name variables left out of the labels or the annotation.
	Warnings []string
}

// Convert is Parse followed by Build.
func Convert(source string, data []byte, opts Options) (*Result, error) {
	hosts, err := Parse(source, data)
	if err != nil {
		return nil, err
	}
	return Build(source, hosts, opts)
}

// Build makes one Hardware per host (see the package doc for the mapping).
// It returns every problem at once as a model.ErrorList, each naming the
// host and the line of the variable at fault: a host without a MAC,
// a MAC or an IP used twice, a value the Hardware would not validate with.
func Build(source string, hosts []Host, opts Options) (*Result, error) {
	ns := opts.Namespace
	if ns == "" {
		ns = model.DefaultNamespace
	}
	res := &Result{}
	var errs model.ErrorList
	type seen struct {
		host string
		line int
	}
	macs, ips := map[macaddr.MAC]seen{}, map[string]seen{}
	for _, h := range hosts {
		fail := func(v string, format string, args ...any) {
			line := h.Line
			if l, ok := h.VarLines[v]; ok {
				line = l
			}
			errs = append(errs, &model.FieldError{Source: source, Line: line, Doc: "host " + h.Name, Msg: fmt.Sprintf(format, args...)})
		}
		hw, warns, ok := buildHost(h, ns, opts.AllowPXE, fail)
		res.Warnings = append(res.Warnings, warns...)
		if !ok {
			continue
		}
		d := hw.Spec.Interfaces[0].DHCP
		// A MAC that does not parse is validateHardware's to report.
		if mac := hw.Spec.Interfaces[0].MAC(); mac.IsValid() {
			if prev, dup := macs[mac]; dup {
				fail(VarMAC, "mac %s is also host %s's (line %d)", d.MAC, prev.host, prev.line)
			} else {
				macs[mac] = seen{h.Name, h.VarLines[VarMAC]}
			}
		}
		if d.IP != nil && d.IP.Address != "" {
			ipVar := VarIP
			if _, ok := h.VarLines[VarIP]; !ok {
				ipVar = varAnsibleHost
			}
			if prev, dup := ips[d.IP.Address]; dup {
				fail(ipVar, "ip %s is also host %s's (line %d)", d.IP.Address, prev.host, prev.line)
			} else {
				ips[d.IP.Address] = seen{h.Name, h.VarLines[ipVar]}
			}
		}
		for _, fe := range validateHardware(hw) {
			fail(fieldVar(fe.Path), "%s: %s", fe.Path, fe.Msg)
		}
		res.Hardware = append(res.Hardware, hw)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	sort.Slice(res.Hardware, func(i, j int) bool { return res.Hardware[i].Name < res.Hardware[j].Name })
	return res, nil
}

// validateHardware returns model.Validate's field errors for hw.
func validateHardware(hw *model.Hardware) model.ErrorList {
	err := model.Validate(hw)
	if err == nil {
		return nil
	}
	if l, ok := err.(model.ErrorList); ok {
		return l
	}
	return model.ErrorList{{Msg: err.Error()}}
}

// fieldVar names the variable a Hardware field came from, for the line of
// an error.
func fieldVar(path string) string {
	switch {
	case strings.HasSuffix(path, ".dhcp.mac"):
		return VarMAC
	case strings.HasSuffix(path, ".ip.address"):
		return VarIP
	case strings.HasSuffix(path, ".ip.netmask"):
		return VarNetmask
	case strings.HasSuffix(path, ".ip.gateway"):
		return VarGateway
	case strings.HasSuffix(path, ".dhcp.hostname"):
		return VarHostname
	case strings.HasPrefix(path, "spec.disks"):
		return VarDisk
	}
	return ""
}

// buildHost maps one host; ok is false when it failed (fail was called).
func buildHost(h Host, ns string, allowPXE bool, fail func(v, format string, args ...any)) (hw *model.Hardware, warns []string, ok bool) {
	ok = true
	str := func(name string) string {
		v, present := h.Vars[name]
		if !present || v == nil {
			return ""
		}
		s, isScalar := scalarString(v)
		if !isScalar {
			fail(name, "%s must be a single value, not %T", name, v)
			ok = false
		}
		return s
	}
	mac := str(VarMAC)
	if mac == "" && ok {
		fail(VarMAC, "no mac variable: every host needs the MAC address it boots from (set mac: on the host)")
		return nil, nil, false
	}
	d := &model.DHCP{MAC: mac, Hostname: h.Name, DomainName: str(VarDomain)}
	if hn := str(VarHostname); hn != "" {
		d.Hostname = hn
	}
	ip := &model.IP{Address: str(VarIP), Netmask: str(VarNetmask), Gateway: str(VarGateway)}
	if ip.Address == "" {
		if a, err := netip.ParseAddr(str(varAnsibleHost)); err == nil {
			ip.Address = a.String()
		}
	}
	if pfx, err := netip.ParsePrefix(ip.Address); err == nil && pfx.Addr().Is4() {
		ip.Address = pfx.Addr().String()
		if ip.Netmask == "" {
			ip.Netmask = net.IP(net.CIDRMask(pfx.Bits(), 32)).String()
		}
	}
	if *ip != (model.IP{}) {
		d.IP = ip
	}
	var disks []model.Disk
	if dev := str(VarDisk); dev != "" {
		disks = append(disks, model.Disk{Device: dev})
	}
	if v, present := h.Vars[VarDisks]; present && v != nil {
		list, isList := v.([]any)
		if !isList {
			fail(VarDisks, "disks must be a list of device paths")
			ok = false
		}
		for _, e := range list {
			s, isScalar := scalarString(e)
			if !isScalar || s == "" {
				fail(VarDisks, "disks must be a list of device paths")
				ok = false
				break
			}
			disks = append(disks, model.Disk{Device: s})
		}
	}
	if !ok {
		return nil, nil, false
	}

	labels, annotated := map[string]string{}, map[string]any{}
	for _, name := range sortedKeys(h.Vars) {
		v := h.Vars[name]
		if strings.HasPrefix(name, "ansible_") && strings.Contains(name, "pass") {
			warns = append(warns, fmt.Sprintf("host %s: %s left out of the Hardware: it is a secret", h.Name, name))
			continue
		}
		// Every variable is kept, the ones mapped onto the spec too: a
		// template reads the inventory as Ansible would (.Vars.gateway for
		// `gateway:`), not knowing which variables the spec took.
		annotated[name] = v
		if specVars[name] || strings.HasPrefix(name, "ansible_") {
			continue
		}
		s, isScalar := scalarString(v)
		if isScalar && v != nil && checkLabelName(name) == "" && checkLabelValue(s) == "" {
			labels[name] = s
		}
	}
	for _, g := range h.Groups {
		if key := GroupLabelPrefix + SanitizeLabelName(g); key != GroupLabelPrefix {
			labels[key] = "true"
		} else {
			warns = append(warns, fmt.Sprintf("host %s: group %q has no usable label name; no label for it", h.Name, g))
		}
	}
	hw = &model.Hardware{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindHardware},
		ObjectMeta: model.ObjectMeta{Name: h.Name, Namespace: ns},
		Spec: model.HardwareSpec{
			Interfaces: []model.Interface{{DHCP: d, Netboot: &model.Netboot{AllowPXE: model.Bool(allowPXE)}}},
			Disks:      disks,
		},
	}
	if len(labels) > 0 {
		hw.Labels = labels
	}
	if len(annotated) > 0 {
		b, err := json.Marshal(annotated) // map keys sorted: stable across imports
		if err != nil {
			fail("", "variables: %v", err)
			return nil, warns, false
		}
		hw.Annotations = map[string]string{VarsAnnotation: string(b)}
	}
	return hw, warns, true
}

// scalarString formats a scalar variable as a label would hold it, and
// reports whether v is a scalar (nil counts, as "").
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	}
	return "", false
}

// maxLabelName is the longest label name (and value) Kubernetes allows.
const maxLabelName = 63

// checkLabelName returns why s is not a valid unprefixed label name, or "":
// 1–63 characters, alphanumeric at both ends, '-', '_' and '.' inside.
func checkLabelName(s string) string {
	if s == "" {
		return "empty"
	}
	return checkLabelValue(s)
}

// checkLabelValue returns why s is not a valid label value, or "": empty,
// or up to 63 characters, alphanumeric at both ends, '-', '_' and '.'
// inside.
func checkLabelValue(s string) string {
	if len(s) > maxLabelName {
		return "longer than 63 characters"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isAlnum(c):
		case (c == '-' || c == '_' || c == '.') && i > 0 && i < len(s)-1:
		default:
			return fmt.Sprintf("character %q at position %d is not allowed", c, i+1)
		}
	}
	return ""
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// SanitizeLabelName makes s a valid label name: every character other than
// a letter, a digit, '-', '_' or '.' becomes '-', non-alphanumeric
// characters are trimmed from both ends, and the result is cut to 63
// characters. It returns "" when nothing usable is left. Two different
// names can give the same result ("web servers", "web-servers").
func SanitizeLabelName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			b[i] = '-'
		}
	}
	out := strings.TrimFunc(string(b), func(r rune) bool { return r > 0x7f || !isAlnum(byte(r)) })
	if len(out) > maxLabelName {
		out = strings.TrimRightFunc(out[:maxLabelName], func(r rune) bool { return !isAlnum(byte(r)) })
	}
	return out
}
