package tftp

import (
	"fmt"
	"io/fs"
	"strings"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// resolvePath checks a requested file name and returns the name to open
// in the served fs.FS and, for a per-machine path such as
// "52:54:00:12:34:56/ipxe.efi" or "52-54-00-12-34-56/ipxe.efi", the MAC
// address its first element names (the rest is what is served; any
// spelling macaddr.Parse reads); the zero MAC for any other path.
//
// A name is refused, never rewritten, when it is absolute, has a ".."
// element, a backslash, a control character (NUL included) or is
// otherwise not a valid fs.FS path (fs.ValidPath: no "." or empty
// elements, no trailing slash). The error says which rule it broke.
func resolvePath(name string) (path string, mac macaddr.MAC, err error) {
	switch {
	case name == "":
		return "", macaddr.MAC{}, fmt.Errorf("empty file name")
	case strings.HasPrefix(name, "/"):
		return "", macaddr.MAC{}, fmt.Errorf("absolute path")
	case strings.ContainsRune(name, '\\'):
		return "", macaddr.MAC{}, fmt.Errorf("backslash in file name")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f {
			return "", macaddr.MAC{}, fmt.Errorf("control character %#02x in file name", c)
		}
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == ".." {
			return "", macaddr.MAC{}, fmt.Errorf("parent directory (..) in file name")
		}
	}
	if !fs.ValidPath(name) || name == "." { // ValidPath allows "." for the root
		return "", macaddr.MAC{}, fmt.Errorf("not a clean relative path (empty or . element, trailing slash, or not UTF-8)")
	}
	if first, rest, ok := strings.Cut(name, "/"); ok {
		if m, err := macaddr.Parse(first); err == nil {
			return rest, m, nil
		}
	}
	return name, macaddr.MAC{}, nil
}
