package config

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// kind is what a flag type's key holds in the file.
type kind struct {
	// want says what the key takes, for errors.
	want string
	// list: a YAML list of strings, and a comma-separated variable.
	list bool
	// tags are the YAML tags a value may resolve to; nil: any scalar but
	// null (a string key takes 8080 or true as written).
	tags []string
}

// kinds are the flag types (pflag's Value.Type()) a key can hold: the one
// place that says how each is written in the file. A flag of another type
// is refused by Load (checkKeys) until it is added here.
var kinds = map[string]kind{
	"bool":        {want: "true or false", tags: []string{"!!bool"}},
	"int":         {want: "an integer", tags: []string{"!!int"}},
	"int64":       {want: "an integer", tags: []string{"!!int"}},
	"float64":     {want: "a number", tags: []string{"!!int", "!!float"}},
	"duration":    {want: "a duration such as 30s or 1m30s", tags: []string{"!!str", "!!int"}},
	"string":      {want: "a string"},
	"stringSlice": {want: "a list of strings", list: true},
	"stringArray": {want: "a list of strings", list: true},
}

// entry is a key of the file: its line and its value, as the strings the
// flag's parser takes (one for a scalar, the items of a list).
type entry struct {
	line   int
	values []string
	bad    bool // refused already: not to be set
}

// parseFile reads the file's one mapping of keys. Every problem is
// reported, each with the file, the line and the key: syntax, a key that
// is no flag of fs, a key given twice, a value of the wrong type. With
// such problems it still returns the keys that have none, so that their
// values are checked too and every problem is reported at once; a syntax
// error returns no keys.
func parseFile(name string, data []byte, fs *pflag.FlagSet) (map[string]entry, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil // empty, or only comments
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document: the config file is one mapping of keys", name, line)
	}
	root := deref(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil // "---" or "~" alone
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of keys (http-port: 7080), got %s", name, root.Line, describe(root))
	}
	keys := map[string]entry{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := deref(root.Content[i]), root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("%s:%d: want a key's name, got %s", name, k.Line, describe(k)))
			continue
		}
		f := fs.Lookup(k.Value)
		if f == nil {
			msg := fmt.Sprintf("%s:%d: unknown key %q", name, k.Line, k.Value)
			if near := nearest(k.Value, fs); near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		if first, ok := keys[k.Value]; ok {
			errs = append(errs, fmt.Errorf("%s:%d: %s given twice (first on line %d)", name, k.Line, k.Value, first.line))
			continue
		}
		values, err := nodeValues(kinds[f.Value.Type()], v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %w", name, v.Line, k.Value, err))
			keys[k.Value] = entry{line: k.Line, bad: true}
			continue
		}
		keys[k.Value] = entry{line: k.Line, values: values}
	}
	return keys, errors.Join(errs...)
}

// nodeValues is the value n as the flag's parser takes it, or why n is
// not of kind k.
func nodeValues(k kind, n *yaml.Node) ([]string, error) {
	n = deref(n)
	if !k.list {
		s, err := scalar(k, n)
		return []string{s}, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("want %s, got %s", k.want, describe(n))
	}
	items := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		s, err := scalar(kinds["string"], deref(item))
		if err != nil {
			return nil, fmt.Errorf("item %d (line %d): %w", i+1, item.Line, err)
		}
		items = append(items, s)
	}
	return items, nil
}

// scalar is the scalar n as a string the flag's parser reads the way YAML
// means it (0x1F90, 7_080 and 1e3 decoded by YAML's rules), or why n is
// not of kind k.
func scalar(k kind, n *yaml.Node) (string, error) {
	tag := n.ShortTag()
	ok := n.Kind == yaml.ScalarNode && tag != "!!null"
	if ok && k.tags != nil {
		ok = false
		for _, t := range k.tags {
			ok = ok || t == tag
		}
	}
	if !ok {
		return "", fmt.Errorf("want %s, got %s", k.want, describe(n))
	}
	var err error
	switch tag {
	case "!!int":
		var i int64
		if err = n.Decode(&i); err == nil {
			return strconv.FormatInt(i, 10), nil
		}
	case "!!float":
		var f float64
		if err = n.Decode(&f); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64), nil
		}
	case "!!bool":
		var b bool
		if err = n.Decode(&b); err == nil {
			return strconv.FormatBool(b), nil
		}
	default:
		return n.Value, nil
	}
	return "", fmt.Errorf("want %s, got %s: %w", k.want, describe(n), err)
}

// describe names what n is, for errors: `"eighty" (a string)`, `a list`.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		what := map[string]string{"!!str": "a string", "!!int": "an integer", "!!float": "a number", "!!bool": "a boolean",
			"!!null": "nothing", "!!timestamp": "a timestamp", "!!binary": "binary data"}[n.ShortTag()]
		if n.ShortTag() == "!!null" {
			return "no value"
		}
		if what == "" {
			what = "a value tagged " + n.ShortTag()
		}
		return fmt.Sprintf("%q (%s)", n.Value, what)
	}
	return "an alias"
}

// deref follows aliases (*name) to the anchored node; a chain is cut
// short, which yaml.v3 does not make but a parser should not loop on.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 16; i++ {
		n = n.Alias
	}
	return n
}

// set gives f the values: a list's items replace what it held, a
// scalar is parsed by the flag's own Set. A secret may not be the
// redaction placeholder.
func set(f *pflag.Flag, values []string) error {
	if IsSecret(f) && len(values) > 0 && values[0] == Redacted {
		return fmt.Errorf("%s is print-config's placeholder for a secret, not its value: put the value back or remove the key", Redacted)
	}
	if kinds[f.Value.Type()].list {
		return f.Value.(pflag.SliceValue).Replace(values)
	}
	if len(values) != 1 {
		return fmt.Errorf("%d values for one", len(values))
	}
	return f.Value.Set(values[0])
}

// current is f's value in the form set takes.
func current(f *pflag.Flag) []string {
	if kinds[f.Value.Type()].list {
		return append([]string(nil), f.Value.(pflag.SliceValue).GetSlice()...)
	}
	return []string{f.Value.String()}
}

// splitList reads a list variable: comma-separated, with CSV's quotes
// around an item holding a comma ("a,b",c), as pflag reads a
// comma-separated flag.
func splitList(v string) ([]string, error) {
	r := csv.NewReader(strings.NewReader(v))
	r.LazyQuotes = false
	items, err := r.Read()
	if err != nil {
		return nil, err
	}
	if _, err := r.Read(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one line")
	}
	return items, nil
}

// nearest is the flag of fs whose name is closest to name, if one is
// close enough to be a typo (http_port, htp-port, HTTP-Port); "" if none.
func nearest(name string, fs *pflag.FlagSet) string {
	norm := func(s string) string { return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s)) }
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		d := distance(norm(name), norm(f.Name))
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// distance is the Levenshtein distance of a and b (bytes).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
