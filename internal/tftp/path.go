package tftp

import (
	"fmt"
	"io/fs"
	"net"
	"strings"
)

// resolvePath checks a requested file name and returns the name to open
// in the served fs.FS and, for a per-machine path such as
// "52:54:00:12:34:56/ipxe.efi" or "52-54-00-12-34-56/ipxe.efi", the MAC
// address its first element names (the rest is what is served).
//
// A name is refused, never rewritten, when it is absolute, has a ".."
// element, a backslash, a control character (NUL included) or is
// otherwise not a valid fs.FS path (fs.ValidPath: no "." or empty
// elements, no trailing slash). The error says which rule it broke.
func resolvePath(name string) (path string, mac net.HardwareAddr, err error) {
	switch {
	case name == "":
		return "", nil, fmt.Errorf("empty file name")
	case strings.HasPrefix(name, "/"):
		return "", nil, fmt.Errorf("absolute path")
	case strings.ContainsRune(name, '\\'):
		return "", nil, fmt.Errorf("backslash in file name")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f {
			return "", nil, fmt.Errorf("control character %#02x in file name", c)
		}
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == ".." {
			return "", nil, fmt.Errorf("parent directory (..) in file name")
		}
	}
	if !fs.ValidPath(name) || name == "." { // ValidPath allows "." for the root
		return "", nil, fmt.Errorf("not a clean relative path (empty or . element, trailing slash, or not UTF-8)")
	}
	if first, rest, ok := strings.Cut(name, "/"); ok {
		if m, ok := parseMAC(first); ok {
			return rest, m, nil
		}
	}
	return name, nil, nil
}

// parseMAC parses a 48-bit MAC address written as six two-digit hex
// octets separated by all ':' or all '-'.
func parseMAC(s string) (net.HardwareAddr, bool) {
	const n = 6
	if len(s) != 3*n-1 {
		return nil, false
	}
	sep := s[2]
	if sep != ':' && sep != '-' {
		return nil, false
	}
	mac := make(net.HardwareAddr, n)
	for i := 0; i < n; i++ {
		j := 3 * i
		if i > 0 && s[j-1] != sep {
			return nil, false
		}
		hi, ok1 := unhex(s[j])
		lo, ok2 := unhex(s[j+1])
		if !ok1 || !ok2 {
			return nil, false
		}
		mac[i] = hi<<4 | lo
	}
	return mac, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
