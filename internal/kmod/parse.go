package kmod

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"path"
	"strings"
)

// maxLine bounds one line of an index file. modules.dep lines of large
// modules list a few dozen paths; 1 MiB is far beyond any real one.
const maxLine = 1 << 20

// Module extensions, with the compression of each. Modules are named by
// their file name without these.
var moduleExts = []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"}

// ModuleName returns the module name of a module file path or a name:
// the base name without a module extension, '-' replaced by '_' (the
// kernel's and modprobe's canonical form: "crc32c-intel" and
// "crc32c_intel" are one module).
func ModuleName(p string) string {
	base := path.Base(p)
	for _, ext := range moduleExts {
		if s, ok := strings.CutSuffix(base, ext); ok {
			base = s
			break
		}
	}
	return strings.ReplaceAll(base, "-", "_")
}

// IsModuleFile reports whether a file name ends in a module extension.
func IsModuleFile(name string) bool {
	for _, ext := range moduleExts {
		if strings.HasSuffix(name, ext) && len(name) > len(ext) {
			return true
		}
	}
	return false
}

// normalizeAlias replaces '-' with '_' outside bracket expressions, as
// modprobe does to both sides of an alias lookup, so "fs-ext4" and
// "fs_ext4" are the same alias while "[a-f]" keeps its range.
func normalizeAlias(s string) string {
	if !strings.Contains(s, "-") {
		return s
	}
	b := []byte(s)
	inSet := false
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '[' && !inSet:
			inSet = true
			// A ']' right after '[' or '[!' is a member, not the end.
			if i+1 < len(b) && (b[i+1] == '!' || b[i+1] == '^') {
				i++
			}
			if i+1 < len(b) && b[i+1] == ']' {
				i++
			}
		case b[i] == ']' && inSet:
			inSet = false
		case b[i] == '-' && !inSet:
			b[i] = '_'
		}
	}
	return string(b)
}

// DepEntry is one line of modules.dep: a module file and the files of
// every module it needs, directly or not.
type DepEntry struct {
	// Path is the module file, relative to the module directory (e.g.
	// "kernel/drivers/net/virtio_net.ko") or absolute.
	Path string
	// Deps are the needed modules' files in depmod's order: a module
	// needs only modules after it in the list, so loading them from last
	// to first works.
	Deps []string
}

// ParseDep parses modules.dep: lines "PATH: DEP DEP ...". Blank lines and
// lines starting with '#' are skipped. A line without ':', or with an
// empty path, is an error naming its line number.
func ParseDep(r io.Reader) ([]DepEntry, error) {
	var out []DepEntry
	err := eachLine(r, func(n int, line string) error {
		mod, deps, ok := strings.Cut(line, ":")
		mod = strings.TrimSpace(mod)
		if !ok || mod == "" || strings.ContainsAny(mod, " \t") {
			return fmt.Errorf("modules.dep line %d: want \"module.ko: dep.ko ...\", got %q", n, clip(line))
		}
		e := DepEntry{Path: mod}
		if f := strings.Fields(deps); len(f) > 0 {
			e.Deps = f
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// Alias is one line of modules.alias: a pattern (fnmatch(3) syntax) and
// the module that handles what it matches.
type Alias struct {
	Pattern string
	Module  string
}

// ParseAlias parses modules.alias: lines "alias PATTERN MODULE". Blank
// lines and '#' comments are skipped; any other line is an error naming
// its line number. Module names are returned in canonical form (see
// ModuleName).
func ParseAlias(r io.Reader) ([]Alias, error) {
	var out []Alias
	err := eachLine(r, func(n int, line string) error {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "alias" {
			return fmt.Errorf("modules.alias line %d: want \"alias PATTERN MODULE\", got %q", n, clip(line))
		}
		out = append(out, Alias{Pattern: f[1], Module: ModuleName(f[2])})
		return nil
	})
	return out, err
}

// Softdep is a module's soft dependencies: modules (names or aliases) to
// load before it and after it when they exist, without failing if they
// do not.
type Softdep struct {
	Pre, Post []string
}

// ParseSoftdep parses modules.softdep (and the "softdep" lines of
// modprobe.d files): "softdep MODULE pre: A B post: C". Words before any
// "pre:" or "post:" are ignored, as modprobe ignores them. Other
// directives and '#' comments are skipped. Lines for the same module
// merge.
func ParseSoftdep(r io.Reader) (map[string]Softdep, error) {
	out := map[string]Softdep{}
	err := eachLine(r, func(n int, line string) error {
		f := strings.Fields(line)
		if f[0] != "softdep" {
			return nil
		}
		if len(f) < 2 {
			return fmt.Errorf("modules.softdep line %d: softdep without a module", n)
		}
		name := ModuleName(f[1])
		if name == "" || ModuleName(name) != name {
			// "softdep .ko": no name left; "x.ko.ko": a name that
			// still looks like a file after its extension went.
			return fmt.Errorf("modules.softdep line %d: %q is not a module name", n, clip(f[1]))
		}
		pre, post := parseSoftdepWords(f[2:])
		if len(pre)+len(post) == 0 {
			return nil // "softdep cifs gcm": nothing modprobe would load
		}
		sd := out[name]
		sd.Pre = append(sd.Pre, pre...)
		sd.Post = append(sd.Post, post...)
		out[name] = sd
		return nil
	})
	return out, err
}

// parseSoftdepWords splits "pre: a b post: c" into its lists.
func parseSoftdepWords(words []string) (pre, post []string) {
	var into *[]string
	for _, w := range words {
		switch w {
		case "pre:":
			into = &pre
		case "post:":
			into = &post
		default:
			if into != nil {
				*into = append(*into, w)
			}
		}
	}
	return pre, post
}

// ParseBuiltin parses modules.builtin, the module files built into the
// kernel (one path per line), and returns their module names.
func ParseBuiltin(r io.Reader) ([]string, error) {
	var out []string
	err := eachLine(r, func(n int, line string) error {
		if strings.ContainsAny(line, " \t") {
			return fmt.Errorf("modules.builtin line %d: want one module path, got %q", n, clip(line))
		}
		out = append(out, ModuleName(line))
		return nil
	})
	return out, err
}

// Modinfo is what a module says about itself in its .modinfo section.
type Modinfo struct {
	// Name is the module's name ("name=", else empty).
	Name string
	// Depends are the modules it needs ("depends=", comma-separated).
	Depends []string
	// Aliases are its alias patterns ("alias=").
	Aliases []string
	// Softdep is its "softdep=" entries, merged.
	Softdep Softdep
	// Firmware are the files it may request ("firmware=").
	Firmware []string
	// Vermagic is the kernel release and options it was built for.
	Vermagic string
	// License is its "license=".
	License string
}

// ParseModinfo parses the contents of a module's .modinfo ELF section:
// NUL-terminated "key=value" strings, NUL padding allowed. Unknown keys
// are ignored; an entry without '=' is an error.
func ParseModinfo(data []byte) (Modinfo, error) {
	var mi Modinfo
	err := eachModinfo(data, func(key, value string) {
		mi.add(key, value)
	})
	return mi, err
}

func (mi *Modinfo) add(key, value string) {
	switch key {
	case "name":
		mi.Name = value
	case "depends":
		for _, d := range strings.Split(value, ",") {
			if d = strings.TrimSpace(d); d != "" {
				mi.Depends = append(mi.Depends, strings.ReplaceAll(d, "-", "_"))
			}
		}
	case "alias":
		mi.Aliases = append(mi.Aliases, value)
	case "softdep":
		pre, post := parseSoftdepWords(strings.Fields(value))
		mi.Softdep.Pre = append(mi.Softdep.Pre, pre...)
		mi.Softdep.Post = append(mi.Softdep.Post, post...)
	case "firmware":
		mi.Firmware = append(mi.Firmware, value)
	case "vermagic":
		mi.Vermagic = value
	case "license":
		mi.License = value
	}
}

// ParseBuiltinModinfo parses modules.builtin.modinfo, the .modinfo
// entries of every built-in module, each key prefixed by "MODULE.", and
// returns them by module name.
func ParseBuiltinModinfo(data []byte) (map[string]*Modinfo, error) {
	out := map[string]*Modinfo{}
	err := eachModinfo(data, func(key, value string) {
		mod, k, ok := strings.Cut(key, ".")
		if !ok || mod == "" {
			return
		}
		name := ModuleName(mod)
		mi := out[name]
		if mi == nil {
			mi = &Modinfo{Name: name}
			out[name] = mi
		}
		mi.add(k, value)
	})
	return out, err
}

// eachModinfo calls fn for each "key=value" in NUL-separated data.
func eachModinfo(data []byte, fn func(key, value string)) error {
	for len(data) > 0 {
		entry := data
		if i := bytes.IndexByte(data, 0); i >= 0 {
			entry, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(entry) == 0 {
			continue // padding
		}
		key, value, ok := strings.Cut(string(entry), "=")
		if !ok || key == "" {
			return fmt.Errorf("modinfo: entry %q is not key=value", clip(string(entry)))
		}
		fn(key, value)
	}
	return nil
}

// eachLine calls fn with each non-blank, non-comment line of r, trimmed,
// and its 1-based number, stopping at the first error.
func eachLine(r io.Reader, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", n+1, err)
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
