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
	byName := make(map[string]*ModuleFile, len(mods))
	for i := range mods {
		m := &mods[i]
		name := moduleFileName(m)
		if prev := byName[name]; prev != nil {
			return IndexFiles{}, fmt.Errorf("module %s twice: %s and %s", name, prev.Path, m.Path)
		}
		byName[name] = m
	}
	// closure returns what name needs in load order, itself last.
	memo := map[string][]string{}
	var closure func(name string, chain []string) ([]string, error)
	closure = func(name string, chain []string) ([]string, error) {
		if order, ok := memo[name]; ok {
			return order, nil
		}
		if slices.Contains(chain, name) {
			return nil, fmt.Errorf("dependency cycle %s", strings.Join(append(chain, name), " → "))
		}
		m := byName[name]
		var order []string
		for _, dep := range m.Info.Depends {
			if byName[dep] == nil {
				return nil, fmt.Errorf("module %s (%s) needs %s, which is not among the modules", name, m.Path, dep)
			}
			sub, err := closure(dep, append(chain, name))
			if err != nil {
				return nil, err
			}
			for _, s := range sub {
				if !slices.Contains(order, s) {
					order = append(order, s)
				}
			}
		}
		order = append(order, name)
		memo[name] = order
		return order, nil
	}

	var dep, alias, soft bytes.Buffer
	alias.WriteString("# Aliases extracted from modules themselves.\n")
	soft.WriteString("# Soft dependencies extracted from modules themselves.\n")
	for i := range mods {
		m := &mods[i]
		name := moduleFileName(m)
		order, err := closure(name, nil)
		if err != nil {
			return IndexFiles{}, err
		}
		dep.WriteString(m.Path)
		dep.WriteByte(':')
		for j := len(order) - 2; j >= 0; j-- {
			dep.WriteByte(' ')
			dep.WriteString(byName[order[j]].Path)
		}
		dep.WriteByte('\n')
		for _, a := range m.Info.Aliases {
			if strings.ContainsAny(a, " \t\n") {
				return IndexFiles{}, fmt.Errorf("module %s: alias %q contains white space", name, a)
			}
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

// moduleFileName is a ModuleFile's module name: its modinfo name, else
// its file name.
func moduleFileName(m *ModuleFile) string {
	if m.Info.Name != "" {
		return ModuleName(m.Info.Name)
	}
	return ModuleName(m.Path)
}
