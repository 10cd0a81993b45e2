package kmod

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// ModuleFile is one module of a module directory: the input of
// GenerateIndex.
type ModuleFile struct {
	// Path is the file relative to the module directory, slash-separated
	// ("kernel/drivers/net/virtio_net.ko").
	Path string
	// Info is its .modinfo (ReadModuleFile).
	Info Modinfo
}

// IndexFiles are the text index files of a module directory.
type IndexFiles struct {
	Dep     []byte // modules.dep
	Alias   []byte // modules.alias
	Softdep []byte // modules.softdep
}

// GenerateIndex writes modules.dep, modules.alias and modules.softdep for
// mods, in the formats depmod writes and modprobe (kmod or busybox) and
// Index read: modules in the order given, each modules.dep line listing
// every module the module needs, directly or not, so that loading them
// from last to first works. A module needing one that mods lacks is an
// error naming both, and so is a dependency cycle or a name used twice.
func GenerateIndex(mods []ModuleFile) (IndexFiles, error) {
	g, err := resolve(mods)
	if err != nil {
		return IndexFiles{}, err
	}
	var dep, alias, soft bytes.Buffer
	alias.WriteString("# Aliases extracted from modules themselves.\n")
	soft.WriteString("# Soft dependencies extracted from modules themselves.\n")
	for i := range mods {
		m := &mods[i]
		name := g.names[i]
		dep.WriteString(m.Path)
		dep.WriteByte(':')
		for _, d := range g.needs[name] {
			dep.WriteByte(' ')
			dep.WriteString(g.byName[d].Path)
		}
		dep.WriteByte('\n')
		for _, a := range m.Info.Aliases {
			fmt.Fprintf(&alias, "alias %s %s\n", a, name)
		}
		if sd := m.Info.Softdep; len(sd.Pre)+len(sd.Post) > 0 {
			fmt.Fprintf(&soft, "softdep %s", name)
			if len(sd.Pre) > 0 {
				fmt.Fprintf(&soft, " pre: %s", strings.Join(sd.Pre, " "))
			}
			if len(sd.Post) > 0 {
				fmt.Fprintf(&soft, " post: %s", strings.Join(sd.Post, " "))
			}
			soft.WriteByte('\n')
		}
	}
	return IndexFiles{Dep: dep.Bytes(), Alias: alias.Bytes(), Softdep: soft.Bytes()}, nil
}

// NewIndex returns the Index of mods, as Open would return it for the
// files GenerateIndex writes (without built-in modules): for choosing
// modules before any file is written. Path returns the paths of mods.
func NewIndex(mods []ModuleFile) (*Index, error) {
	g, err := resolve(mods)
	if err != nil {
		return nil, err
	}
	x := &Index{mods: make(map[string]*module, len(mods)), builtin: map[string]bool{}}
	var aliases []Alias
	for i := range mods {
		m := &mods[i]
		name := g.names[i]
		x.mods[name] = &module{path: m.Path, deps: g.needs[name], soft: m.Info.Softdep}
		x.names = append(x.names, name)
		for _, a := range m.Info.Aliases {
			aliases = append(aliases, Alias{Pattern: a, Module: name})
		}
	}
	x.aliases = newAliasTable(aliases)
	return x, nil
}

// depGraph is mods with every module's needs resolved.
type depGraph struct {
	names  []string               // module names, in the order of mods
	byName map[string]*ModuleFile // by module name
	// needs lists, per module, every module it needs in modules.dep's
	// order: loading from last to first works.
	needs map[string][]string
}

// resolve computes what each module of mods needs, failing for a name
// used twice, a dependency missing from mods, a cycle or an alias with
// white space (it would break modules.alias).
func resolve(mods []ModuleFile) (*depGraph, error) {
	g := &depGraph{byName: make(map[string]*ModuleFile, len(mods)), needs: make(map[string][]string, len(mods))}
	for i := range mods {
		m := &mods[i]
		name := moduleFileName(m)
		if prev := g.byName[name]; prev != nil {
			return nil, fmt.Errorf("module %s twice: %s and %s", name, prev.Path, m.Path)
		}
		for _, a := range m.Info.Aliases {
			if a == "" || strings.ContainsAny(a, " \t\n") {
				return nil, fmt.Errorf("module %s: alias %q is empty or contains white space", name, a)
			}
		}
		g.byName[name] = m
		g.names = append(g.names, name)
	}
	// order returns what name needs in load order, itself last.
	memo := map[string][]string{}
	var order func(name string, chain []string) ([]string, error)
	order = func(name string, chain []string) ([]string, error) {
		if o, ok := memo[name]; ok {
			return o, nil
		}
		if slices.Contains(chain, name) {
			return nil, fmt.Errorf("dependency cycle %s", strings.Join(append(chain, name), " → "))
		}
		m := g.byName[name]
		var o []string
		for _, dep := range m.Info.Depends {
			if g.byName[dep] == nil {
				return nil, fmt.Errorf("module %s (%s) needs %s, which is not among the modules", name, m.Path, dep)
			}
			sub, err := order(dep, append(chain, name))
			if err != nil {
				return nil, err
			}
			for _, s := range sub {
				if !slices.Contains(o, s) {
					o = append(o, s)
				}
			}
		}
		o = append(o, name)
		memo[name] = o
		return o, nil
	}
	for _, name := range g.names {
		o, err := order(name, nil)
		if err != nil {
			return nil, err
		}
		var needs []string
		for j := len(o) - 2; j >= 0; j-- {
			needs = append(needs, o[j])
		}
		g.needs[name] = needs
	}
	return g, nil
}

// moduleFileName is a ModuleFile's module name: its modinfo name, else
// its file name.
func moduleFileName(m *ModuleFile) string {
	if m.Info.Name != "" {
		return ModuleName(m.Info.Name)
	}
	return ModuleName(m.Path)
}
