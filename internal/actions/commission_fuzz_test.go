package actions

import (
	"encoding/binary"
	"math/big"
	"strconv"
	"testing"
)

// FuzzParseNVMeHealth: any buffer gives a page or an error, never a
// panic; a full page's fields are its bytes, the 128-bit counters read
// little-endian.
func FuzzParseNVMeHealth(f *testing.F) {
	f.Add(nvmePage(0, 3, 0, 310))
	f.Add(nvmePage(0xff, 255, 1<<63, 0xffff))
	f.Add(make([]byte, 511))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseNVMeHealth(b)
		if len(b) < nvmeLogSMARTSize {
			if err == nil {
				t.Fatalf("%d bytes parsed as a page", len(b))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.criticalWarning != b[0] || h.percentageUsed != b[5] || h.temperatureK != binary.LittleEndian.Uint16(b[1:]) {
			t.Fatalf("fields %+v do not match the bytes", h)
		}
		low, high := binary.LittleEndian.Uint64(b[160:]), binary.LittleEndian.Uint64(b[168:])
		want := new(big.Int).Lsh(new(big.Int).SetUint64(high), 64)
		want.Or(want, new(big.Int).SetUint64(low))
		if h.mediaErrors.Cmp(want) != 0 {
			t.Fatalf("media errors %s, want %s", h.mediaErrors, want)
		}
		if len(h.warnings()) == 0 && h.criticalWarning != 0 {
			t.Fatalf("critical warning 0x%02x named no warning", h.criticalWarning)
		}
	})
}

// FuzzParseATAStatus: any sense data gives an answer without a panic;
// registers are reported only with an answer, and the verdict is theirs.
func FuzzParseATAStatus(f *testing.F) {
	f.Add(ataSense(0x4f, 0xc2))
	f.Add(ataSense(0xf4, 0x2c))
	f.Add([]byte{0x72, 0, 0, 0, 0, 0, 0, 0xff, 0x09, 0xff})
	f.Add([]byte{0x70, 0, 0x01, 0, 0x50, 0, 0, 10, 0, 0, 0xf4, 0x2c, 0x00, 0x1d})
	f.Add([]byte{0x72, 0, 0, 0, 0, 0, 0, 4, 0x00, 0x00, 0x09, 0x0c})
	f.Fuzz(func(t *testing.T, sense []byte) {
		st, mid, high := parseATAStatus(sense)
		if st == ataNoAnswer {
			if mid != 0 || high != 0 {
				t.Fatalf("no answer with registers %x %x", mid, high)
			}
			return
		}
		if judgeATA(mid, high) != st {
			t.Fatalf("registers %x %x judged %v", mid, high, st)
		}
	})
}

// FuzzParseDMIMemoryDevice: any structure gives a size or nothing; only
// type 17 structures have a size, and it is a whole number of KiB.
func FuzzParseDMIMemoryDevice(f *testing.F) {
	dimm := make([]byte, 0x28)
	dimm[0], dimm[1] = 17, 0x28
	binary.LittleEndian.PutUint16(dimm[0x0c:], 0x7fff)
	binary.LittleEndian.PutUint32(dimm[0x1c:], 65536)
	f.Add(dimm)
	f.Add([]byte{17, 0x15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x84, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{17, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x7f})
	f.Add([]byte{16, 0x17})
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, ok := parseDMIMemoryDevice(raw)
		if !ok {
			if n != 0 {
				t.Fatalf("size %d without ok", n)
			}
			return
		}
		if raw[0] != 17 || n%1024 != 0 {
			t.Fatalf("size %d from a structure of type %d", n, raw[0])
		}
	})
}

// FuzzParseSize: a size parses or is refused, never panics; what parses
// as a number of bytes written in decimal parses back to itself.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"16GiB", "16GB", "512m", "1024", "3 K", "18446744073709551615", "16384P", "iB", "1.5G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			return
		}
		m, err := parseSize(strconv.FormatUint(n, 10))
		if err != nil || m != n {
			t.Fatalf("parseSize(%q) = %d, which does not parse back (%d, %v)", s, n, m, err)
		}
	})
}

// FuzzParseSMBIOSMemory: any table is walked without a panic or an
// endless loop; it counts no more modules than it could hold structures.
func FuzzParseSMBIOSMemory(f *testing.F) {
	dimm := make([]byte, 0x28)
	dimm[0], dimm[1] = 17, 0x28
	binary.LittleEndian.PutUint16(dimm[0x0c:], 512)
	table := append([]byte{0, 4, 0, 0, 0, 0}, dimm...)
	table = append(table, 'D', 0, 0)
	f.Add(append(table, 127, 4, 0, 0, 0, 0))
	f.Add([]byte{17, 3, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		total, modules := parseSMBIOSMemory(b)
		if modules > len(b)/0x0e || (modules == 0) != (total == 0) {
			t.Fatalf("%d modules, %d bytes from a %d-byte table", modules, total, len(b))
		}
	})
}
