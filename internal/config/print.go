package config

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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
	for _, warning := range c.Warnings {
		header += "# Warning: " + strings.ReplaceAll(warning, "\n", `\n`) + "\n" // a variable's name may hold a line break
	}
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, s := range c.Settings {
		v := valueNode(s)
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

// valueNode is the setting's value as a YAML node. Nodes are built, not
// encoded from Go values: yaml.v3's Node.Encode writes text with line
// breaks as a block scalar and loses it.
func valueNode(s Setting) *yaml.Node {
	redact := s.Redacted()
	switch v := s.Value().(type) {
	case []string:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle} // one line per key, for the source's comment
		for _, item := range v {
			if redact {
				item = Redacted
			}
			n.Content = append(n.Content, stringNode(item))
		}
		return n
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
	case int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v, 10)}
	case float64:
		text := strconv.FormatFloat(v, 'g', -1, 64)
		switch {
		case !strings.ContainsAny(text, ".eEnN"):
			text += ".0" // a number that reads as one: 50.0, not !!float 50
		case math.IsInf(v, 1):
			text = ".inf"
		case math.IsInf(v, -1):
			text = "-.inf"
		case math.IsNaN(v):
			text = ".nan"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: text}
	case string:
		if redact {
			v = Redacted
		}
		return stringNode(v)
	}
	panic("config: a setting of no known kind") // Value returns only the types above
}

// stringNode is s as a YAML string, double-quoted with escapes when it
// holds what a plain or single-quoted scalar cannot (line breaks, control
// characters), so that the key stays on one line.
func stringNode(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) >= 0 || !utf8.ValidString(s) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
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
