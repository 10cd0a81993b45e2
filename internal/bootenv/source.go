package bootenv

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/anvilproj/anvil/internal/kmod"
)

// modulesSource is where the modules come from.
type modulesSource struct {
	deb  string // a Debian linux-image package, or
	dir  string // a module directory …/lib/modules/RELEASE
	root string // the root it is in, if it was given as a root ("" otherwise)
}

// moduleRoots are where a root directory keeps its module directories.
var moduleRoots = []string{"lib/modules", "usr/lib/modules"}

// findModules classifies --modules: a .deb file; a module directory (it
// has modules.order, modules.builtin or a kernel/ directory); or a root
// containing exactly one lib/modules/RELEASE (or usr/lib/modules/…).
func findModules(p string) (modulesSource, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return modulesSource{}, fmt.Errorf("modules: %w", err)
	}
	if fi.Mode().IsRegular() {
		magic := make([]byte, len(arMagic))
		f, err := os.Open(p)
		if err != nil {
			return modulesSource{}, fmt.Errorf("modules: %w", err)
		}
		_, rerr := io.ReadFull(f, magic)
		f.Close()
		if rerr != nil || string(magic) != arMagic {
			return modulesSource{}, fmt.Errorf("modules %s: a file, but not a Debian package (.deb); give a .deb, a /lib/modules/RELEASE directory or a root directory containing one", p)
		}
		return modulesSource{deb: p}, nil
	}
	if !fi.IsDir() {
		return modulesSource{}, fmt.Errorf("modules %s: not a file or directory", p)
	}
	if isModuleDir(p) {
		return modulesSource{dir: p}, nil
	}
	var found []string
	for _, r := range moduleRoots {
		matches, _ := filepath.Glob(filepath.Join(p, r, "*"))
		for _, m := range matches {
			if isModuleDir(m) {
				found = append(found, m)
			}
		}
	}
	switch len(found) {
	case 0:
		return modulesSource{}, fmt.Errorf("modules %s: no module directory in it (want RELEASE/ with modules.order or kernel/, or lib/modules/RELEASE/ below it)", p)
	case 1:
		return modulesSource{dir: found[0], root: p}, nil
	}
	var releases []string
	for _, f := range found {
		releases = append(releases, filepath.Base(f))
	}
	slices.Sort(releases)
	return modulesSource{}, fmt.Errorf("modules %s: several kernels (%s); give the module directory of one, e.g. %s",
		p, strings.Join(releases, ", "), filepath.Join(p, "lib", "modules", releases[0]))
}

// isModuleDir reports whether dir looks like /lib/modules/RELEASE.
func isModuleDir(dir string) bool {
	for _, name := range []string{kmod.OrderFile, kmod.BuiltinFile, kmod.DepFile, "kernel"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// kernelInRoot returns root/boot/vmlinuz-RELEASE if it exists.
func kernelInRoot(root, release string) string {
	if root == "" {
		return ""
	}
	p := filepath.Join(root, "boot", "vmlinuz-"+release)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
		return p
	}
	return ""
}
