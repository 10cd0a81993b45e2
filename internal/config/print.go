package config

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Print writes the effective configuration as a config file would hold
// it: every key with its value, each value's source as a comment (and the
// lower sources it overrode), secrets' values as Redacted. Fed back as the
// file, with the same environment and no flags, it gives the same values,
// secrets aside (Load refuses the placeholder).
func (c *Config) Print(w io.Writer) error {
	file := "none"
	switch {
	case c.File != "" && c.FileFound:
		file = c.File
	case c.File != "":
		file = c.File + " (not found: nothing came from it)"
	}
	header := fmt.Sprintf("# The effective configuration of %s.\n# Precedence: flags > %s* environment > config file > defaults.\n# Config file: %s\n",
		c.Name, EnvPrefix, file)
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, s := range c.Settings {
		v, err := valueNode(s)
		if err != nil {
			return err
		}
		v.LineComment = s.describe()
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.Flag.Name}, v)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(m); err != nil {
		return err
	}
	return enc.Close()
}

// Value is the setting's effective value as YAML reads it back: a bool,
// an int64, a float64, a string (durations as the flag writes them, 1m30s)
// or a []string.
func (s Setting) Value() any {
	k := kinds[s.Flag.Value.Type()]
	v := current(s.Flag)
	if k.list {
		return v
	}
	var err error
	var out any
	switch s.Flag.Value.Type() {
	case "bool":
		out, err = strconv.ParseBool(v[0])
	case "int", "int64":
		out, err = strconv.ParseInt(v[0], 10, 64)
	case "float64":
		out, err = strconv.ParseFloat(v[0], 64)
	default:
		return v[0]
	}
	if err != nil {
		return v[0] // the flag wrote what it cannot read: printed as text, refused on reading
	}
	return out
}

// Redacted reports whether Print writes the setting's value as Redacted:
// a secret with a value.
func (s Setting) Redacted() bool {
	if !IsSecret(s.Flag) {
		return false
	}
	for _, v := range current(s.Flag) {
		if v != "" {
			return true
		}
	}
	return false
}

// valueNode is the setting's value as a YAML node.
func valueNode(s Setting) (*yaml.Node, error) {
	v := s.Value()
	if s.Redacted() {
		if items, ok := v.([]string); ok {
			red := make([]string, len(items))
			for i := range red {
				red[i] = Redacted
			}
			v = red
		} else {
			v = Redacted
		}
	}
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return nil, fmt.Errorf("--%s: %w", s.Flag.Name, err)
	}
	if n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle // one line per key, for the source's comment
	}
	return n, nil
}

// describe is the setting's source comment: "flag --http-port; overrides
// env ANVIL_HTTP_PORT, file line 3".
func (s Setting) describe() string {
	where := func(src Source) string {
		switch src {
		case Flag:
			return "flag --" + s.Flag.Name
		case Env:
			return "env " + EnvName(s.Flag.Name)
		case File:
			return "file line " + strconv.Itoa(s.Line)
		}
		return "default"
	}
	d := where(s.Source)
	if len(s.Overridden) > 0 {
		var o []string
		for _, src := range s.Overridden {
			o = append(o, where(src))
		}
		d += "; overrides " + strings.Join(o, ", ")
	}
	if s.Redacted() {
		d += "; secret, redacted"
	}
	return d
}
