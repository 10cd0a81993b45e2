package macaddr

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	want := From([Len]byte{0x3c, 0xec, 0xef, 0x12, 0x34, 0x07})
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"canonical", "3c:ec:ef:12:34:07", true},
		{"upper case", "3C:EC:EF:12:34:07", true},
		{"hyphens", "3c-ec-ef-12-34-07", true},
		{"cisco dots", "3cec.ef12.3407", true},
		{"cisco dots upper", "3CEC.EF12.3407", true},
		{"bare digits", "3cecef123407", true},
		{"mixed separators", "3c:ec-ef:12:34:07", false},
		{"dots with pairs", "3c.ec.ef.12.34.07", false},
		{"colon groups of four", "3cec:ef12:3407", false},
		{"too short", "3c:ec:ef:12:34", false},
		{"eight bytes", "3c:ec:ef:12:34:07:00:01", false},
		{"not hex", "3c:ec:ef:12:34:0g", false},
		{"leading space", " 3c:ec:ef:12:34:07", false},
		{"empty", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if !tc.ok {
				var pe *ParseError
				if !errors.As(err, &pe) || pe.Input != tc.in || got.IsValid() {
					t.Fatalf("Parse(%q) = %v, %v; want a *ParseError naming the input", tc.in, got, err)
				}
				if !strings.Contains(err.Error(), "3c:ec:ef:12:34:07") {
					t.Errorf("error %q does not show the wanted form", err)
				}
				return
			}
			if err != nil || got != want {
				t.Fatalf("Parse(%q) = %v, %v; want %v", tc.in, got, err, want)
			}
		})
	}
}

func TestZero(t *testing.T) {
	var z MAC
	if z.IsValid() || z.String() != "" || z.HardwareAddr() != nil {
		t.Errorf("zero MAC: IsValid %v, String %q, HardwareAddr %v; want false, \"\", nil", z.IsValid(), z.String(), z.HardwareAddr())
	}
	if allZero := MustParse("00:00:00:00:00:00"); allZero == z || !allZero.IsValid() {
		t.Errorf("00:00:00:00:00:00 = %#v; want a valid MAC distinct from the zero MAC", allZero)
	}
}

func TestFromBytes(t *testing.T) {
	b := []byte{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	m, ok := FromBytes(b)
	if !ok || m.String() != "52:54:00:12:34:56" {
		t.Fatalf("FromBytes(%x) = %v, %v; want 52:54:00:12:34:56, true", b, m, ok)
	}
	b[0] = 0xff // m keeps its own copy
	if m.String() != "52:54:00:12:34:56" {
		t.Errorf("FromBytes shares the caller's buffer: %v", m)
	}
	if !bytes.Equal(m.HardwareAddr(), []byte{0x52, 0x54, 0, 0x12, 0x34, 0x56}) {
		t.Errorf("HardwareAddr() = %v", m.HardwareAddr())
	}
	for _, n := range []int{0, 5, 7, 16} {
		if m, ok := FromBytes(make([]byte, n)); ok || m.IsValid() {
			t.Errorf("FromBytes(%d bytes) = %v, %v; want the zero MAC, false", n, m, ok)
		}
	}
}

func TestJSON(t *testing.T) {
	type rec struct {
		MAC MAC `json:"mac"`
	}
	var r rec
	if err := json.Unmarshal([]byte(`{"mac":"3C-EC-EF-12-34-07"}`), &r); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(r)
	if err != nil || string(out) != `{"mac":"3c:ec:ef:12:34:07"}` {
		t.Errorf("round trip = %s, %v; want the canonical form", out, err)
	}
	if err := json.Unmarshal([]byte(`{"mac":"nope"}`), &r); err == nil || !strings.Contains(err.Error(), `"nope" is not a MAC address`) {
		t.Errorf("bad MAC: err = %v; want one naming the value", err)
	}
	r = rec{}
	if err := json.Unmarshal([]byte(`{"mac":""}`), &r); err != nil || r.MAC.IsValid() {
		t.Errorf(`"" = %v, %v; want the zero MAC`, r.MAC, err)
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("3C:EC:EF:12:34:07"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParse checks Parse against net.ParseMAC restricted to six bytes (the
// same spellings, the same bytes) and the round trip through String.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"3c:ec:ef:12:34:07",       // canonical
		"3C-EC-EF-12-34-07",       // hyphens, upper case (iPXE's ${mac:hexhyp})
		"3cec.ef12.3407",          // Cisco's dotted form
		"3c:ec-ef:12:34:07",       // mixed separators: refused
		"00:00:00:00:00:00:00:00", // EUI-64: refused
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(s)
		hw, nerr := net.ParseMAC(s)
		if wantOK := nerr == nil && len(hw) == Len; wantOK != (err == nil) {
			t.Fatalf("Parse(%q) err = %v; net.ParseMAC = %v, %v", s, err, hw, nerr)
		}
		if err != nil {
			return
		}
		if got := m.Bytes(); !bytes.Equal(got[:], hw) {
			t.Fatalf("Parse(%q) = %x; net.ParseMAC = %x", s, got, hw)
		}
		c := m.String()
		if c != hw.String() {
			t.Fatalf("Parse(%q).String() = %q; want %q", s, c, hw.String())
		}
		if again, err := Parse(c); err != nil || again != m {
			t.Fatalf("Parse(String()) = %v, %v; want %v", again, err, m)
		}
	})
}
