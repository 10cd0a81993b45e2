package hwinfo

import (
	"bufio"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParsers holds the parsers to their contract on any bytes: no panic,
// and what they keep is bounded and clean.
func FuzzParsers(f *testing.F) {
	// x86 cpuinfo, with topology.
	f.Add([]byte("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nphysical id\t: 0\ncore id\t: 0\ncpu cores\t: 2\nflags\t: fpu sse\n\n"))
	// Arm cpuinfo: no topology, Features.
	f.Add([]byte("processor : 0\nFeatures : fp asimd\nCPU implementer : 0x41\n\n"))
	// meminfo, and one that overflows.
	f.Add([]byte("MemTotal:       2014252 kB\nMemFree: 1 kB\n"))
	f.Add([]byte("MemTotal: 18446744073709551615 kB\n"))
	// A uevent and a udev database entry.
	f.Add([]byte("DRIVER=e1000e\nPCI_CLASS=20000\nPCI_ID=8086:15B8\n"))
	f.Add([]byte("S:disk/by-id/x\nE:ID_SERIAL_SHORT=S1\nE:ID_WWN=0x5000\n"))
	// A VPD page 0x80, and one whose length lies.
	f.Add([]byte("\x00\x80\x00\x04ABCD"))
	f.Add([]byte("\x00\x80\xff\xffAB"))
	// pci.ids lines.
	f.Add([]byte("8086  Intel Corporation\n\t1533  I210 Gigabit Network Connection\nC 02  Network controller\n\t00  Ethernet controller\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cpus := parseCPUInfo(b)
		if len(cpus) > maxLogicalCPUs {
			t.Fatalf("%d logical CPUs kept; the cap is %d", len(cpus), maxLogicalCPUs)
		}
		_ = parseMemInfo(b)
		for _, prefix := range []string{"", "E:"} {
			kv := parseKV(b, prefix)
			if len(kv) > maxKeys {
				t.Fatalf("%d keys kept; the cap is %d", len(kv), maxKeys)
			}
			for k := range kv {
				if k == "" || strings.Contains(k, "=") {
					t.Fatalf("key %q", k)
				}
			}
		}
		if s := parseVPD80(b); len(s) > len(b) {
			t.Fatalf("a %d-byte serial from %d bytes", len(s), len(b))
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		sc.Buffer(nil, maxLine)
		want := map[string]bool{"8086": true, "8086:1533": true, "02": true}
		names := parsePCIIDs(sc, want)
		for _, m := range []map[string]string{names.vendors, names.devices, names.classes} {
			for id, name := range m {
				if !want[id] || name == "" {
					t.Fatalf("name %q for %q, which was not asked for or is empty", name, id)
				}
			}
		}
		s, _ := cleanString(string(b))
		if len(s) > MaxString || !utf8.ValidString(s) || !isClean(s) {
			t.Fatalf("cleanString gave %q", s)
		}
		// Cleaning is idempotent: a clean string is kept as it is.
		if again, ok := cleanString(s); again != s || !ok {
			t.Fatalf("cleanString(%q) = %q, %v; want it unchanged", s, again, ok)
		}
	})
}
