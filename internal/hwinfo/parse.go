package hwinfo

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The parsers below read the kernel's text formats. Each takes the bytes
// as read (already capped by the reader) and never fails: a line it does
// not understand is skipped, so a tree that lies gives fewer facts, not an
// error or a panic. FuzzParsers holds them to that.

// cleanString is s as a fact worth keeping: spaces at either end trimmed,
// control characters and invalid UTF-8 dropped, cut to MaxString bytes on
// a rune boundary. ok is false when it had to be cut.
func cleanString(s string) (out string, ok bool) {
	s = strings.TrimSpace(s)
	if len(s) <= MaxString && isClean(s) {
		return s, true
	}
	var b strings.Builder
	ok = true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > MaxString {
			ok = false
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String()), ok
}

// isClean reports whether s has only printable, valid UTF-8.
func isClean(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// logicalCPU is one "processor" block of /proc/cpuinfo.
type logicalCPU struct {
	pkg      string // physical id ("" when not said: one package)
	core     string // core id
	cpuCores uint32 // "cpu cores": the package's core count, when said
	vendor   string
	model    string
	flags    string
}

// maxLogicalCPUs bounds the processor blocks parseCPUInfo keeps: more
// than any machine has (the kernel's NR_CPUS is at most 8192).
const maxLogicalCPUs = 8192

// parseCPUInfo reads /proc/cpuinfo: blocks of "key : value" lines, one per
// logical CPU, separated by blank lines. It knows x86's keys (vendor_id,
// model name, physical id, core id, cpu cores, flags) and Arm's (CPU
// implementer, Features); a line without a colon is skipped.
func parseCPUInfo(b []byte) []logicalCPU {
	var out []logicalCPU
	var cur *logicalCPU
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "processor" {
			if len(out) == maxLogicalCPUs {
				break
			}
			out = append(out, logicalCPU{})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue // lines before the first processor (s390's header)
		}
		switch k {
		case "physical id":
			cur.pkg = v
		case "core id":
			cur.core = v
		case "cpu cores":
			if n, err := strconv.ParseUint(v, 10, 32); err == nil {
				cur.cpuCores = uint32(n)
			}
		case "vendor_id", "CPU implementer":
			if cur.vendor == "" {
				cur.vendor = v
			}
		case "model name", "Processor", "cpu model":
			if cur.model == "" {
				cur.model = v
			}
		case "flags", "Features":
			cur.flags = v
		}
	}
	return out
}

// parseMemInfo returns /proc/meminfo's MemTotal in bytes, or 0.
func parseMemInfo(b []byte) uint64 {
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "MemTotal" {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0
		}
		if len(f) > 1 && f[1] == "kB" {
			if n > (1<<64-1)/1024 {
				return 0
			}
			n *= 1024
		}
		return n
	}
	return 0
}

// maxKeys bounds the keys parseKV keeps: a uevent has about ten, a udev
// database entry a few dozen.
const maxKeys = 256

// parseKV reads KEY=VALUE lines: a sysfs uevent file (prefix "") or a udev
// database entry's properties (prefix "E:"). Lines without the prefix or
// without "=" are skipped; the first of repeated keys is kept.
func parseKV(b []byte, prefix string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\r\n")
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(rest, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := out[k]; dup {
			continue
		}
		if len(out) == maxKeys {
			break
		}
		out[k] = v
	}
	return out
}

// vpdSerialPage is the code of SCSI's Unit Serial Number VPD page (SPC-4
// 7.8.15), which sysfs gives as vpd_pg80.
const vpdSerialPage = 0x80

// vpdHeader is the bytes before a VPD page's data: peripheral, page code,
// page length (big-endian).
const vpdHeader = 4

// parseVPD80 returns the product serial number of a Unit Serial Number VPD
// page, or "" when b is not one.
func parseVPD80(b []byte) string {
	if len(b) < vpdHeader || b[1] != vpdSerialPage {
		return ""
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if n > len(b)-vpdHeader {
		return ""
	}
	return string(b[vpdHeader : vpdHeader+n])
}

// pciNames are the names pci.ids gives the IDs a machine has.
type pciNames struct {
	vendors map[string]string // "8086"
	devices map[string]string // "8086:1533"
	classes map[string]string // "02"
}

// parsePCIIDs reads a pci.ids database (vendor lines "vvvv  Name", device
// lines "\tdddd  Name", class lines "C cc  Name"), keeping only the names
// of the IDs in want (vendor "8086", device "8086:1533", class "02"), so
// that the 1.5 MB file costs no more than its scan. IDs are lower-case.
func parsePCIIDs(sc *bufio.Scanner, want map[string]bool) pciNames {
	out := pciNames{vendors: map[string]string{}, devices: map[string]string{}, classes: map[string]string{}}
	vendor := "" // the vendor the device lines below belong to; "" inside the class section
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		switch {
		case strings.HasPrefix(line, "C "):
			vendor = ""
			id, name, ok := idAndName(line[2:], 2)
			if ok && want[id] {
				out.classes[id] = name
			}
		case line[0] == '\t' && (len(line) < 2 || line[1] != '\t'):
			if vendor == "" {
				continue // a subclass, or a device without a vendor
			}
			id, name, ok := idAndName(line[1:], 4)
			if ok && want[vendor+":"+id] {
				out.devices[vendor+":"+id] = name
			}
		case line[0] != '\t':
			id, name, ok := idAndName(line, 4)
			if !ok {
				vendor = ""
				continue
			}
			vendor = id
			if want[id] {
				out.vendors[id] = name
			}
		}
	}
	return out
}

// idAndName splits "8086  Intel Corporation": an ID of n hex digits, then
// white space and a name.
func idAndName(s string, n int) (id, name string, ok bool) {
	if len(s) <= n || (s[n] != ' ' && s[n] != '\t') {
		return "", "", false
	}
	id = strings.ToLower(s[:n])
	if !isHex(id) {
		return "", "", false
	}
	name, _ = cleanString(s[n:])
	return id, name, name != ""
}

// isHex reports whether s is all hex digits.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return s != ""
}

// hexID is a sysfs ID file's value ("0x8086\n") as lower-case hex without
// 0x and with n digits, or "" when it is not one.
func hexID(s string, n int) string {
	s = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "0x"))
	if len(s) != n || !isHex(s) {
		return ""
	}
	return s
}
