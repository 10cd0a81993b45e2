package actions

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// FuzzDetect: compression detection never panics, the magic bytes decide
// whatever the name says, and a name is only trusted when the bytes
// match no format.
func FuzzDetect(f *testing.F) {
	// Seeds: each format's magic with a fitting, a misleading and a
	// silent name; raw data named like a compressed file; short heads.
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x00}, "http://h/os.raw.zst")
	f.Add([]byte{0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00}, "http://h/os.raw.xz")
	f.Add([]byte{0xfd, '7', 'z', 'X', 'Z', 0x00}, "http://h/download?id=1")
	f.Add([]byte("BZh91A"), "https://h/os.bz2")
	f.Add([]byte{0x50, 0x2a, 0x4d, 0x18, 0, 0}, "http://h/skippable")
	f.Add([]byte{0xeb, 0x63, 0x90, 0, 0, 0}, "http://h/os.raw.gz")
	f.Add([]byte{}, "http://h/os.img")
	f.Add([]byte("BZh"), "http://h/x.zs?y=.gz")
	f.Fuzz(func(t *testing.T, head []byte, rawURL string) {
		got, how, err := detect(head, rawURL)
		magic := sniff(head)
		switch {
		case magic != formatRaw:
			if err != nil || got != magic || how != "magic bytes" {
				t.Fatalf("detect(% x, %q) = %v, %q, %v; the magic bytes say %v", head, rawURL, got, how, err, magic)
			}
		case bySuffix(rawURL) != formatRaw:
			if err == nil {
				t.Fatalf("detect(% x, %q) = %v; want an error: the name says %v, the bytes do not", head, rawURL, got, bySuffix(rawURL))
			}
		default:
			if err != nil || got != formatRaw {
				t.Fatalf("detect(% x, %q) = %v, %v; want raw", head, rawURL, got, err)
			}
		}
		// Bytes beyond magicLen never change the answer.
		if len(head) > magicLen && sniff(head[:magicLen]) != magic {
			t.Fatalf("sniff depends on bytes past %d: % x", magicLen, head)
		}
	})
}

// FuzzParseChecksum: a checksum that parses prints in a canonical form
// that parses to the same digest (round trip).
func FuzzParseChecksum(f *testing.F) {
	for _, s := range []string{"sha256:" + strings.Repeat("ab", 32), "SHA512:" + strings.Repeat("0F", 64), strings.Repeat("1", 64),
		"sha256:xyz", "md5:00", ":", "sha256:", " sha256:" + strings.Repeat("cd", 32) + "\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseChecksum(s)
		if err != nil || c == nil {
			return
		}
		again, err := parseChecksum(c.String())
		if err != nil || again.String() != c.String() || !bytes.Equal(again.sum, c.sum) {
			t.Fatalf("parseChecksum(%q) = %v; its canonical form parses to %v, %v", s, c, again, err)
		}
		if len(c.sum) != c.newHash().Size() {
			t.Fatalf("parseChecksum(%q): %d-byte digest for %s", s, len(c.sum), c.algo)
		}
	})
}

// FuzzParseMode: an accepted MODE fits chmod(2)'s 12 bits and prints
// back (as %04o) to the same mode.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"0644", "644", "0o755", "4755", "07777", "10000", "-1", "0x1ff", "rw-r--r--", "0O600", "0o"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMode(s, 0)
		if err != nil {
			return
		}
		n := unixPerm(m)
		if n > 0o7777 {
			t.Fatalf("parseMode(%q) = %o: more than 12 bits", s, n)
		}
		if again, err := parseMode(fmt.Sprintf("%04o", n), 0); err != nil || again != m {
			t.Fatalf("parseMode(%q) = %v; %04o parses to %v, %v", s, m, n, again, err)
		}
	})
}
