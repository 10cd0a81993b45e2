package kmod

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// The index files of a module directory (/lib/modules/RELEASE).
const (
	DepFile            = "modules.dep"
	AliasFile          = "modules.alias"
	SoftdepFile        = "modules.softdep"
	BuiltinFile        = "modules.builtin"
	BuiltinModinfoFile = "modules.builtin.modinfo"
	OrderFile          = "modules.order"
)

// ModulesRoot is where a running kernel's module directories live.
const ModulesRoot = "/lib/modules"

// Index is a module directory's index: which modules exist, what each
// needs, which aliases name them and which are built into the kernel. It
// is read once and never changes; it is safe for concurrent use.
type Index struct {
	dir            string
	mods           map[string]*module
	names          []string // in modules.dep order
	aliases        aliasTable
	builtin        map[string]bool
	builtinAliases aliasTable
}

type module struct {
	path string   // as modules.dep has it
	deps []string // names, in modules.dep's order
	soft Softdep
}

// Open reads the index of the module directory dir (e.g.
// /lib/modules/6.1.0-56-amd64). modules.dep must exist; modules.alias,
// modules.softdep, modules.builtin and modules.builtin.modinfo are read
// when present.
func Open(dir string) (*Index, error) {
	x, err := ReadIndex(os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("module index %s: %w", dir, err)
	}
	x.dir = dir
	return x, nil
}

// ReadIndex reads a module directory's index from fsys, as Open does.
// Paths it returns (Index.Path) are then relative to fsys's root.
func ReadIndex(fsys fs.FS) (*Index, error) {
	x := &Index{mods: map[string]*module{}, builtin: map[string]bool{}}
	data, err := fs.ReadFile(fsys, DepFile)
	if err != nil {
		return nil, err
	}
	deps, err := ParseDep(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	for _, d := range deps {
		name := ModuleName(d.Path)
		if _, dup := x.mods[name]; dup {
			return nil, fmt.Errorf("%s: module %s listed twice", DepFile, name)
		}
		m := &module{path: d.Path}
		for _, p := range d.Deps {
			m.deps = append(m.deps, ModuleName(p))
		}
		x.mods[name] = m
		x.names = append(x.names, name)
	}
	for _, name := range x.names {
		for _, d := range x.mods[name].deps {
			if x.mods[d] == nil {
				return nil, fmt.Errorf("%s: %s needs %s, which has no line of its own", DepFile, name, d)
			}
		}
	}

	if data, err := readOptional(fsys, AliasFile); err != nil {
		return nil, err
	} else if data != nil {
		aliases, err := ParseAlias(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		x.aliases = newAliasTable(aliases)
	}
	if data, err := readOptional(fsys, SoftdepFile); err != nil {
		return nil, err
	} else if data != nil {
		soft, err := ParseSoftdep(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		for name, sd := range soft {
			if m := x.mods[name]; m != nil {
				m.soft = sd
			}
		}
	}
	if data, err := readOptional(fsys, BuiltinFile); err != nil {
		return nil, err
	} else if data != nil {
		names, err := ParseBuiltin(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			x.builtin[n] = true
		}
	}
	if data, err := readOptional(fsys, BuiltinModinfoFile); err != nil {
		return nil, err
	} else if data != nil {
		infos, err := ParseBuiltinModinfo(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", BuiltinModinfoFile, err)
		}
		var aliases []Alias
		for _, name := range sortedKeys(infos) {
			x.builtin[name] = true
			for _, a := range infos[name].Aliases {
				aliases = append(aliases, Alias{Pattern: a, Module: name})
			}
		}
		x.builtinAliases = newAliasTable(aliases)
	}
	return x, nil
}

// readOptional returns a file's contents, or nil if it does not exist.
func readOptional(fsys fs.FS, name string) ([]byte, error) {
	data, err := fs.ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// Dir returns the module directory the index was opened from ("" for
// ReadIndex).
func (x *Index) Dir() string { return x.dir }

// Modules returns the names of every loadable module, in modules.dep
// order.
func (x *Index) Modules() []string { return slices.Clone(x.names) }

// Has reports whether name (any spelling, see ModuleName) is a loadable
// module of the index.
func (x *Index) Has(name string) bool { return x.mods[ModuleName(name)] != nil }

// IsBuiltin reports whether the module name is built into the kernel.
func (x *Index) IsBuiltin(name string) bool { return x.builtin[ModuleName(name)] }

// Path returns the file of the module name, joined to the directory the
// index was opened from, or "" if there is no such module.
func (x *Index) Path(name string) string {
	m := x.mods[ModuleName(name)]
	switch {
	case m == nil:
		return ""
	case path.IsAbs(m.path) || x.dir == "":
		return m.path
	}
	return filepath.Join(x.dir, filepath.FromSlash(m.path))
}

// Softdep returns the soft dependencies modules.softdep gives the module.
func (x *Index) Softdep(name string) Softdep {
	if m := x.mods[ModuleName(name)]; m != nil {
		return m.soft
	}
	return Softdep{}
}

// Lookup returns the modules whose alias patterns match the modalias
// (e.g. "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"), in
// modules.alias order without repeats, and whether an alias of a
// built-in module matches it too.
func (x *Index) Lookup(modalias string) (modules []string, builtin bool) {
	return x.aliases.match(modalias), len(x.builtinAliases.match(modalias)) > 0
}

// LoadOrder returns the modules to load, in order, so that name can load:
// its dependencies (every module modules.dep lists for it), each after
// the modules it needs, then name itself. Soft dependencies are not
// included (see Prober). It fails for a module the index does not have.
func (x *Index) LoadOrder(name string) ([]string, error) {
	name = ModuleName(name)
	if x.mods[name] == nil {
		if x.builtin[name] {
			return nil, nil
		}
		return nil, fmt.Errorf("module %s: %w", name, ErrNotFound)
	}
	var order []string
	state := map[string]int{} // 1: being visited, 2: done
	var visit func(n string, chain []string) error
	visit = func(n string, chain []string) error {
		switch state[n] {
		case 1:
			return fmt.Errorf("module %s: dependency cycle %s", name, strings.Join(append(chain, n), " → "))
		case 2:
			return nil
		}
		state[n] = 1
		deps := x.mods[n].deps
		// depmod lists a module's needs so that the last loads first.
		for i := len(deps) - 1; i >= 0; i-- {
			if err := visit(deps[i], append(chain, n)); err != nil {
				return err
			}
		}
		state[n] = 2
		order = append(order, n)
		return nil
	}
	if err := visit(name, nil); err != nil {
		return nil, err
	}
	return order, nil
}

// ErrNotFound means no module (and no built-in module) has the name or
// alias asked for.
var ErrNotFound = errors.New("not found")

// aliasTable finds the aliases matching a modalias without trying all of
// them: patterns with a literal bus prefix ("pci:", "usb:", …) are
// grouped by it, the few others are tried for every modalias.
type aliasTable struct {
	byBus   map[string][]indexedAlias
	generic []indexedAlias
}

type indexedAlias struct {
	Alias
	norm string // the pattern with '-' as '_' outside sets
	seq  int    // position in the file
}

func newAliasTable(aliases []Alias) aliasTable {
	t := aliasTable{byBus: map[string][]indexedAlias{}}
	for i, a := range aliases {
		ia := indexedAlias{Alias: a, norm: normalizeAlias(a.Pattern), seq: i}
		if bus, _, ok := strings.Cut(ia.norm, ":"); ok && !hasMeta(bus) {
			t.byBus[bus] = append(t.byBus[bus], ia)
		} else {
			t.generic = append(t.generic, ia)
		}
	}
	return t
}

// match returns the modules of the aliases matching s, in file order,
// each once.
func (t aliasTable) match(s string) []string {
	s = normalizeAlias(s)
	var hits []indexedAlias
	if bus, _, ok := strings.Cut(s, ":"); ok {
		for _, a := range t.byBus[bus] {
			if Match(a.norm, s) {
				hits = append(hits, a)
			}
		}
	}
	for _, a := range t.generic {
		if Match(a.norm, s) {
			hits = append(hits, a)
		}
	}
	slices.SortFunc(hits, func(a, b indexedAlias) int { return a.seq - b.seq })
	var mods []string
	for _, h := range hits {
		if !slices.Contains(mods, h.Module) {
			mods = append(mods, h.Module)
		}
	}
	return mods
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
