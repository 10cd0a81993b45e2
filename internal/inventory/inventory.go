// Package inventory turns an Ansible-style YAML inventory (groups with vars,
// children and hosts) into Hardware objects, one per host.
//
// It is a pure conversion: no store, no network, no clock. Parse resolves
// the inventory to hosts with their merged variables, following Ansible's
// precedence (all's vars, then parent groups before their children, then
// the host's own vars); Build maps each host onto a Hardware:
//
//   - mac, ip (an address or CIDR), netmask, gateway, hostname, domain and
//     disk/disks fill the spec (one interface, netboot.allowPXE from
//     Options.AllowPXE); mac is required, and every MAC and IP must be unique
//     across the inventory.
//   - every other variable with a scalar value whose name is a valid label
//     name and whose value is a valid label value becomes a label
//     (role=worker); ansible_* variables never do.
//   - every group the host is in, directly or through children, becomes the
//     label group.anvil.dev/<group>: "true" (the group name sanitised into a
//     valid label name).
//   - every variable, the ones mapped onto the spec too, is kept with its
//     YAML type in the annotation anvil.dev/inventory-vars as a JSON object,
//     for templates (.Vars); ansible_* variables naming a password are
//     dropped.
package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/anvilproj/anvil/internal/model"
)

// MaxBytes caps an inventory file: `anvil import` reads it whole before
// converting it.
const MaxBytes = 8 << 20

// maxNodes bounds the YAML nodes an inventory may expand to, aliases
// counted at each use.
const maxNodes = 1 << 18

// allGroup is Ansible's implicit root group.
const allGroup = "all"

// Keys of a group's mapping.
const (
	keyHosts    = "hosts"
	keyVars     = "vars"
	keyChildren = "children"
)

// varGroupPriority is Ansible's variable that orders groups of the same depth.
const varGroupPriority = "ansible_group_priority"

// Host is one host of a parsed inventory with its variables merged.
type Host struct {
	// Name is the host's name in the inventory.
	Name string
	// Line is the line of the host's first definition, from 1.
	Line int
	// Groups lists every group the host is in, directly or through a child
	// group, sorted; "all" is left out.
	Groups []string
	// Vars are the host's variables after precedence: all's vars, then each
	// group's from the shallowest to the deepest (same depth: by
	// ansible_group_priority, then name), then the host's own. Values are
	// what YAML decodes to: string, bool, int, float64, nil, []any or
	// map[string]any.
	Vars map[string]any
	// VarLines maps a variable name to the line its winning value is on.
	VarLines map[string]int
}

// group is one group as the file defines it (possibly in several places).
type group struct {
	name     string
	line     int
	vars     map[string]any
	varLines map[string]int
	children map[string]bool
	parents  map[string]bool
	hosts    []string // direct members, in file order, without repeats
	depth    int
	priority int64
}

// hostDef is one host's own variables, merged over all its definitions.
type hostDef struct {
	name     string
	line     int
	vars     map[string]any
	varLines map[string]int
}

// parser holds the state of one Parse.
type parser struct {
	source string
	groups map[string]*group
	hosts  map[string]*hostDef
	order  []string // host names in file order
	budget int
	active map[*yaml.Node]bool // group bodies being read, to catch alias loops
}

// Parse reads a YAML inventory and returns its hosts, sorted by name, with
// their merged variables. source names the file in errors. The error is a
// *model.FieldError giving the file and line of the problem.
func Parse(source string, data []byte) ([]Host, error) {
	if len(data) > MaxBytes {
		return nil, &model.FieldError{Source: source, Msg: fmt.Sprintf("file is %d bytes; the limit is %d", len(data), MaxBytes)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &model.FieldError{Source: source, Msg: "empty inventory"}
		}
		return nil, &model.FieldError{Source: source, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &model.FieldError{Source: source, Line: extra.Line, Msg: "an inventory is one YAML document; found a second"}
	}
	p := &parser{source: source, groups: map[string]*group{}, hosts: map[string]*hostDef{}, budget: maxNodes,
		active: map[*yaml.Node]bool{}}
	top := resolve(&root)
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil, &model.FieldError{Source: source, Line: top.Line, Msg: "empty inventory"}
	}
	if top.Kind != yaml.MappingNode {
		return nil, &model.FieldError{Source: source, Line: top.Line, Msg: "an inventory is a mapping of group names (usually just all:)"}
	}
	p.group(allGroup, top.Line)
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if err := p.parseGroup(k, v, ""); err != nil {
			return nil, err
		}
	}
	// Top-level groups other than all are all's children, as in Ansible.
	for name, g := range p.groups {
		if name != allGroup && len(g.parents) == 0 {
			g.parents[allGroup] = true
			p.groups[allGroup].children[name] = true
		}
	}
	if err := p.computeDepths(); err != nil {
		return nil, err
	}
	return p.resolveHosts(), nil
}

// resolve follows document and alias nodes to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for {
		switch n.Kind {
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line}
			}
			n = n.Content[0]
		case yaml.AliasNode:
			n = n.Alias
		default:
			return n
		}
	}
}

func (p *parser) errorf(line int, format string, args ...any) *model.FieldError {
	return &model.FieldError{Source: p.source, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// group returns the group name, creating it.
func (p *parser) group(name string, line int) *group {
	g := p.groups[name]
	if g == nil {
		g = &group{name: name, line: line, vars: map[string]any{}, varLines: map[string]int{},
			children: map[string]bool{}, parents: map[string]bool{}}
		p.groups[name] = g
	}
	return g
}

// key returns a mapping key's text, or an error if it is not a scalar.
func (p *parser) key(k *yaml.Node, what string) (string, error) {
	k = resolve(k)
	if k.Kind != yaml.ScalarNode || k.Value == "" {
		return "", p.errorf(k.Line, "%s must be a non-empty string", what)
	}
	if k.Tag == "!!merge" {
		return "", p.errorf(k.Line, "YAML merge keys (<<) are not supported")
	}
	return k.Value, nil
}

// parseGroup reads the group named by k with body v; parent is "" for a
// top-level group.
func (p *parser) parseGroup(k, v *yaml.Node, parent string) error {
	name, err := p.key(k, "a group name")
	if err != nil {
		return err
	}
	g := p.group(name, k.Line)
	if parent != "" {
		if name == allGroup {
			return p.errorf(k.Line, "group all cannot be a child of %s", parent)
		}
		g.parents[parent] = true
		p.groups[parent].children[name] = true
	}
	v = resolve(v)
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil // "workers:" with nothing under it
	}
	if p.budget--; p.budget < 0 {
		return p.errorf(v.Line, "inventory expands to more than %d nodes (aliases?)", maxNodes)
	}
	if p.active[v] {
		return p.errorf(k.Line, "group %s: an alias makes the group contain itself", name)
	}
	p.active[v] = true
	defer delete(p.active, v)
	if v.Kind != yaml.MappingNode {
		return p.errorf(v.Line, "group %s: want a mapping with hosts, vars or children", name)
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		sk, sv := v.Content[i], resolve(v.Content[i+1])
		key, err := p.key(sk, "a group's key")
		if err != nil {
			return err
		}
		if sv.Kind == yaml.ScalarNode && sv.Tag == "!!null" {
			continue // "hosts:" with nothing under it
		}
		switch key {
		case keyHosts:
			if sv.Kind != yaml.MappingNode {
				return p.errorf(sv.Line, "group %s: hosts must be a mapping of host names (name: or name: {vars})", name)
			}
			for j := 0; j+1 < len(sv.Content); j += 2 {
				if err := p.parseHost(g, sv.Content[j], sv.Content[j+1]); err != nil {
					return err
				}
			}
		case keyVars:
			if err := p.parseVars(sv, fmt.Sprintf("group %s: vars", name), g.vars, g.varLines); err != nil {
				return err
			}
			if pr, ok := g.vars[varGroupPriority]; ok {
				n, ok := pr.(int)
				if !ok {
					return p.errorf(g.varLines[varGroupPriority], "group %s: %s must be an integer", name, varGroupPriority)
				}
				g.priority = int64(n)
			}
		case keyChildren:
			if sv.Kind != yaml.MappingNode {
				return p.errorf(sv.Line, "group %s: children must be a mapping of group names", name)
			}
			for j := 0; j+1 < len(sv.Content); j += 2 {
				if err := p.parseGroup(sv.Content[j], sv.Content[j+1], name); err != nil {
					return err
				}
			}
		default:
			return p.errorf(sk.Line, "group %s: unknown key %q (want hosts, vars or children)", name, key)
		}
	}
	return nil
}

// parseHost reads one host of group g. A host defined in several places
// gets the variables of every definition; a later definition's value wins.
func (p *parser) parseHost(g *group, k, v *yaml.Node) error {
	name, err := p.key(k, "a host name")
	if err != nil {
		return err
	}
	if strings.ContainsAny(name, "[]") {
		return p.errorf(k.Line, "host %s: host ranges ([01:10]) are not supported: each host needs its own mac", name)
	}
	h := p.hosts[name]
	if h == nil {
		h = &hostDef{name: name, line: k.Line, vars: map[string]any{}, varLines: map[string]int{}}
		p.hosts[name] = h
		p.order = append(p.order, name)
	}
	if !contains(g.hosts, name) {
		g.hosts = append(g.hosts, name)
	}
	v = resolve(v)
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		return p.errorf(v.Line, "host %s: want a mapping of variables (or nothing)", name)
	}
	return p.parseVars(v, "host "+name, h.vars, h.varLines)
}

// parseVars decodes a mapping of variables into vars, recording lines.
func (p *parser) parseVars(n *yaml.Node, what string, vars map[string]any, lines map[string]int) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return p.errorf(n.Line, "%s: want a mapping of variables", what)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, err := p.key(n.Content[i], "a variable name")
		if err != nil {
			return err
		}
		val, err := p.value(n.Content[i+1])
		if err != nil {
			return err
		}
		vars[name], lines[name] = val, n.Content[i].Line
	}
	return nil
}

// value converts a YAML node to a JSON-compatible value.
func (p *parser) value(n *yaml.Node) (any, error) {
	if p.budget--; p.budget < 0 {
		return nil, p.errorf(n.Line, "inventory expands to more than %d nodes (aliases?)", maxNodes)
	}
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, err := p.key(n.Content[i], "a mapping key")
			if err != nil {
				return nil, err
			}
			v, err := p.value(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := p.value(e)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, nil
		case "!!bool", "!!int", "!!float":
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, p.errorf(n.Line, "%v", err)
			}
			return v, nil
		}
		return n.Value, nil // strings, and timestamps kept as written
	}
	return nil, p.errorf(n.Line, "unsupported YAML node")
}

// computeDepths sets each group's depth: the longest path from all, as
// Ansible orders variable precedence. A cycle of children is an error.
func (p *parser) computeDepths() error {
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, depth int, path []string) error
	visit = func(name string, depth int, path []string) error {
		g := p.groups[name]
		if state[name] == 1 {
			return p.errorf(g.line, "groups are their own children: %s", strings.Join(append(path, name), " → "))
		}
		if depth > g.depth {
			g.depth = depth
		} else if state[name] == 2 {
			return nil
		}
		state[name] = 1
		for _, c := range sortedKeys(g.children) {
			if err := visit(c, g.depth+1, append(path, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		return nil
	}
	return visit(allGroup, 0, nil)
}

// resolveHosts merges each host's variables in Ansible's order.
func (p *parser) resolveHosts() []Host {
	members := map[string]map[string]bool{} // host -> groups, transitively
	var addUp func(host, g string)
	addUp = func(host, g string) {
		if members[host][g] {
			return
		}
		members[host][g] = true
		for parent := range p.groups[g].parents {
			addUp(host, parent)
		}
	}
	for _, g := range p.groups {
		for _, h := range g.hosts {
			if members[h] == nil {
				members[h] = map[string]bool{}
			}
			addUp(h, g.name)
		}
	}
	out := make([]Host, 0, len(p.hosts))
	for _, name := range p.order {
		def := p.hosts[name]
		gs := make([]*group, 0, len(members[name]))
		for g := range members[name] {
			gs = append(gs, p.groups[g])
		}
		sort.Slice(gs, func(i, j int) bool {
			a, b := gs[i], gs[j]
			if a.depth != b.depth {
				return a.depth < b.depth
			}
			if a.priority != b.priority {
				return a.priority < b.priority
			}
			return a.name < b.name
		})
		h := Host{Name: name, Line: def.line, Vars: map[string]any{}, VarLines: map[string]int{}}
		for _, g := range gs {
			if g.name != allGroup {
				h.Groups = append(h.Groups, g.name)
			}
			for k, v := range g.vars {
				h.Vars[k], h.VarLines[k] = v, g.varLines[k]
			}
		}
		for k, v := range def.vars {
			h.Vars[k], h.VarLines[k] = v, def.varLines[k]
		}
		delete(h.Vars, varGroupPriority)
		delete(h.VarLines, varGroupPriority)
		sort.Strings(h.Groups)
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
