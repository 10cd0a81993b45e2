// Package rulepattern parses and evaluates the rules of a WorkflowRuleSet:
// JSON patterns in the shape Tinkerbell takes from Quamina
// (https://github.com/timbray/quamina/blob/main/PATTERNS.md), matched
// against a machine's attributes as JSON.
//
// A pattern is a JSON object. A key names a field of the attributes; its
// value is either an object (descend into that field) or an array of
// values the field may have (any one of them matches). Every key of an
// object must match (AND). When the attributes hold an array where the
// pattern descends or tests, one element suffices, and the keys of one
// object pattern must all match the same element (a disk whose model is X
// and whose size is Y, not one disk of model X and another of size Y).
//
// Values are literals (string, number, true, false, null: equal), or
// objects of one operator: {"exists": true|false}, {"prefix": "s"},
// {"suffix": "s"}, {"equals-ignore-case": "s"}, {"anything-but": "s" or
// [values]}, {"shellstyle": "a*b"} ('*' any run) and {"wildcard": "a*b"}
// ('*' any run, '\*' and '\\' literal).
//
// Parse checks a pattern against a schema (a Go struct type whose json tags
// name the fields, e.g. model.Attributes), so that a rule naming a field the
// attributes never have is refused when it is written, not silently never
// matched. The package owns only the syntax and the matching; it knows
// nothing of stores or rule sets.
package rulepattern

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxPatternBytes bounds a pattern's source: a rule is a few fields, and
// the rule set is stored and evaluated for every discovered machine.
const MaxPatternBytes = 16 << 10

// maxDepth bounds nesting when no schema does (the attributes are 3 deep).
const maxDepth = 16

// Pattern is a parsed rule. The zero Pattern matches nothing; use Parse.
// A Pattern is immutable and safe for concurrent use.
type Pattern struct {
	root *object
}

type object struct {
	fields []field // sorted by key
}

type field struct {
	key    string
	obj    *object   // descend; or
	values []matcher // one of these
}

// op is a matcher's operator.
type op string

const (
	opEqual         op = "" // a literal
	opExists        op = "exists"
	opPrefix        op = "prefix"
	opSuffix        op = "suffix"
	opEqualsIgnCase op = "equals-ignore-case"
	opAnythingBut   op = "anything-but"
	opShellstyle    op = "shellstyle"
	opWildcard      op = "wildcard"
)

const operatorsForHint = "exists, prefix, suffix, equals-ignore-case, anything-but, shellstyle, wildcard"

// matcher is one allowed value of a field.
type matcher struct {
	op     op
	lits   []literal // opEqual: one; opAnythingBut: the excluded ones
	str    string    // prefix, suffix, equals-ignore-case (lower-cased)
	exists bool      // opExists
	glob   []string  // shellstyle, wildcard: the literal runs between '*'
}

// literal is a JSON scalar in canonical form: a string's JSON encoding, a
// number's float value, or true/false/null.
type literal struct {
	kind byte // 's', 'n', 'b' (true/false in s), 'z' (null)
	s    string
	n    float64
}

// Error is a fault in a pattern, at a dotted path within it ("chassis.serial").
type Error struct {
	Path string
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Parse parses src. With a non-nil schema (a struct type, or a pointer to
// one) every key must be the json name of a field at that place, objects
// must descend into structs (or lists of them) and value arrays must test
// scalars (or lists of them). The error is an *Error naming the place.
func Parse(src string, schema reflect.Type) (*Pattern, error) {
	if len(src) > MaxPatternBytes {
		return nil, &Error{Msg: fmt.Sprintf("pattern is %d bytes; at most %d", len(src), MaxPatternBytes)}
	}
	if strings.TrimSpace(src) == "" {
		return nil, &Error{Msg: `empty pattern: write a JSON object such as {"product": {"vendor": ["Dell Inc."]}}`}
	}
	dec := json.NewDecoder(strings.NewReader(src))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &Error{Msg: "not JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &Error{Msg: "text after the pattern's JSON object"}
	}
	if _, err := dec.Token(); err == nil {
		return nil, &Error{Msg: "text after the pattern's JSON object"}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{Msg: fmt.Sprintf(`a pattern is a JSON object, not %s: e.g. {"product": {"vendor": ["Dell Inc."]}}`, jsonKind(v))}
	}
	root, err := parseObject(m, "", structOf(schema), 0)
	if err != nil {
		return nil, err
	}
	return &Pattern{root: root}, nil
}

// structOf returns the struct under t's pointers and slices, or nil.
func structOf(t reflect.Type) reflect.Type {
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice) {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	return t
}

// jsonFields maps the json names of struct t's fields to their types.
func jsonFields(t reflect.Type) (map[string]reflect.Type, []string) {
	out := map[string]reflect.Type{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
		names = append(names, name)
	}
	slices.Sort(names)
	return out, names
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func parseObject(m map[string]any, path string, schema reflect.Type, depth int) (*object, error) {
	if depth > maxDepth {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("nested deeper than %d objects", maxDepth)}
	}
	if len(m) == 0 {
		return nil, &Error{Path: path, Msg: "empty object: name at least one field to test"}
	}
	var fields map[string]reflect.Type
	var known []string
	if schema != nil {
		fields, known = jsonFields(schema)
	}
	o := &object{}
	for _, k := range slices.Sorted(mapKeys(m)) {
		p := join(path, k)
		var ft reflect.Type
		if schema != nil {
			var ok bool
			if ft, ok = fields[k]; !ok {
				where := "the attributes have"
				if path != "" {
					where = path + " has"
				}
				return nil, &Error{Path: p, Msg: fmt.Sprintf("unknown attribute %q (%s: %s)", k, where, strings.Join(known, ", "))}
			}
		}
		switch v := m[k].(type) {
		case map[string]any:
			sub := structOf(ft)
			if ft != nil && sub == nil {
				return nil, &Error{Path: p, Msg: fmt.Sprintf("%s is a value, not an object: test it with an array of values, e.g. %q: [\"x\"]", p, k)}
			}
			child, err := parseObject(v, p, sub, depth+1)
			if err != nil {
				return nil, err
			}
			o.fields = append(o.fields, field{key: k, obj: child})
		case []any:
			if ft != nil && structOf(ft) != nil {
				return nil, &Error{Path: p, Msg: fmt.Sprintf("%s is an object: descend into it with {...}, e.g. %q: {\"%s\": [\"x\"]}", p, k, firstField(structOf(ft)))}
			}
			if len(v) == 0 {
				return nil, &Error{Path: p, Msg: "empty array of values: it would match nothing"}
			}
			f := field{key: k}
			for i, e := range v {
				mt, err := parseValue(e, fmt.Sprintf("%s[%d]", p, i))
				if err != nil {
					return nil, err
				}
				f.values = append(f.values, mt)
			}
			o.fields = append(o.fields, f)
		default:
			return nil, &Error{Path: p, Msg: fmt.Sprintf("want an array of values (e.g. %q: [%s]) or an object, not %s", k, jsonText(v), jsonKind(v))}
		}
	}
	return o, nil
}

func firstField(t reflect.Type) string {
	_, names := jsonFields(t)
	if len(names) == 0 {
		return "field"
	}
	return names[0]
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func parseLiteral(v any, path string) (literal, error) {
	switch x := v.(type) {
	case string:
		return literal{kind: 's', s: x}, nil
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return literal{}, &Error{Path: path, Msg: fmt.Sprintf("number %s out of range", x)}
		}
		return literal{kind: 'n', n: f}, nil
	case bool:
		return literal{kind: 'b', s: strconv.FormatBool(x)}, nil
	case nil:
		return literal{kind: 'z'}, nil
	}
	return literal{}, &Error{Path: path, Msg: fmt.Sprintf("want a string, number, true, false or null, not %s", jsonKind(v))}
}

func parseValue(v any, path string) (matcher, error) {
	m, ok := v.(map[string]any)
	if !ok {
		if _, isArr := v.([]any); isArr {
			return matcher{}, &Error{Path: path, Msg: "an array inside the array of values: list the values once"}
		}
		l, err := parseLiteral(v, path)
		return matcher{op: opEqual, lits: []literal{l}}, err
	}
	if len(m) != 1 {
		return matcher{}, &Error{Path: path, Msg: fmt.Sprintf("an operator object has exactly one key (one of %s), not %d", operatorsForHint, len(m))}
	}
	for k, arg := range m {
		p := path + "." + k
		str := func() (string, error) {
			s, ok := arg.(string)
			if !ok {
				return "", &Error{Path: p, Msg: fmt.Sprintf("%s takes a string, not %s", k, jsonKind(arg))}
			}
			return s, nil
		}
		switch op(k) {
		case opExists:
			b, ok := arg.(bool)
			if !ok {
				return matcher{}, &Error{Path: p, Msg: fmt.Sprintf("exists takes true or false, not %s", jsonKind(arg))}
			}
			return matcher{op: opExists, exists: b}, nil
		case opPrefix, opSuffix:
			s, err := str()
			if err != nil {
				return matcher{}, err
			}
			if s == "" {
				return matcher{}, &Error{Path: p, Msg: k + " is empty: it would match every value; use {\"exists\": true}"}
			}
			return matcher{op: op(k), str: s}, nil
		case opEqualsIgnCase:
			s, err := str()
			if err != nil {
				return matcher{}, err
			}
			return matcher{op: opEqualsIgnCase, str: strings.ToLower(s)}, nil
		case opAnythingBut:
			vals, isArr := arg.([]any)
			if !isArr {
				vals = []any{arg}
			}
			if len(vals) == 0 {
				return matcher{}, &Error{Path: p, Msg: "anything-but of nothing: list at least one value"}
			}
			mt := matcher{op: opAnythingBut}
			for i, e := range vals {
				l, err := parseLiteral(e, fmt.Sprintf("%s[%d]", p, i))
				if err != nil {
					return matcher{}, err
				}
				mt.lits = append(mt.lits, l)
			}
			return mt, nil
		case opShellstyle, opWildcard:
			s, err := str()
			if err != nil {
				return matcher{}, err
			}
			g, err := parseGlob(s, op(k) == opWildcard)
			if err != nil {
				return matcher{}, &Error{Path: p, Msg: err.Error()}
			}
			return matcher{op: op(k), glob: g}, nil
		}
		return matcher{}, &Error{Path: p, Msg: fmt.Sprintf("unknown operator %q (known: %s)", k, operatorsForHint)}
	}
	panic("unreachable")
}

// parseGlob splits s at its '*'s into the literal runs between them.
// Adjacent stars are refused (they mean nothing more than one); with
// escapes (wildcard), '\*' and '\\' are literal and any other '\' is an
// error.
func parseGlob(s string, escapes bool) ([]string, error) {
	var runs []string
	var cur strings.Builder
	prevStar := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && escapes:
			if i+1 >= len(s) || (s[i+1] != '*' && s[i+1] != '\\') {
				return nil, fmt.Errorf("%q: '\\' must escape '*' or '\\'", s)
			}
			i++
			cur.WriteByte(s[i])
			prevStar = false
		case c == '*':
			if prevStar {
				return nil, fmt.Errorf("%q: adjacent '*'s; one matches any run", s)
			}
			runs = append(runs, cur.String())
			cur.Reset()
			prevStar = true
		default:
			cur.WriteByte(c)
			prevStar = false
		}
	}
	return append(runs, cur.String()), nil
}

// globMatch reports whether s is runs[0] * runs[1] * ... runs[n-1]. Greedy
// matching of each middle run at its first occurrence is exact for '*'
// globs, so this is linear in len(s) times the number of runs.
func globMatch(runs []string, s string) bool {
	if len(runs) == 1 {
		return s == runs[0]
	}
	first, last := runs[0], runs[len(runs)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, r := range runs[1 : len(runs)-1] {
		i := strings.Index(mid, r)
		if i < 0 {
			return false
		}
		mid = mid[i+len(r):]
	}
	return true
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "..."
	}
	return string(b)
}

// Match reports whether the attributes doc (JSON as encoding/json decodes
// it into an any: map[string]any, []any, string, float64 or json.Number,
// bool, nil) match p.
func (p *Pattern) Match(doc any) bool {
	if p == nil || p.root == nil {
		return false
	}
	return matchObject(p.root, doc)
}

func matchObject(o *object, v any) bool {
	switch x := v.(type) {
	case []any:
		return slices.ContainsFunc(x, func(e any) bool { return matchObject(o, e) })
	case map[string]any:
		for _, f := range o.fields {
			fv, present := x[f.key]
			if f.obj != nil {
				if !present || !matchObject(f.obj, fv) {
					return false
				}
				continue
			}
			if !slices.ContainsFunc(f.values, func(m matcher) bool { return m.match(fv, present) }) {
				return false
			}
		}
		return true
	}
	return false
}

func (m matcher) match(v any, present bool) bool {
	if m.op == opExists {
		return m.exists == (present && !isEmptyArray(v))
	}
	if !present {
		return false
	}
	if arr, ok := v.([]any); ok {
		return slices.ContainsFunc(arr, func(e any) bool { return m.matchScalar(e) })
	}
	return m.matchScalar(v)
}

func isEmptyArray(v any) bool {
	a, ok := v.([]any)
	return ok && len(a) == 0
}

func (m matcher) matchScalar(v any) bool {
	switch m.op {
	case opEqual:
		return m.lits[0].equal(v)
	case opAnythingBut:
		if _, isObj := v.(map[string]any); isObj {
			return false
		}
		return !slices.ContainsFunc(m.lits, func(l literal) bool { return l.equal(v) })
	}
	s, ok := v.(string)
	if !ok {
		return false
	}
	switch m.op {
	case opPrefix:
		return strings.HasPrefix(s, m.str)
	case opSuffix:
		return strings.HasSuffix(s, m.str)
	case opEqualsIgnCase:
		return strings.ToLower(s) == m.str
	case opShellstyle, opWildcard:
		return globMatch(m.glob, s)
	}
	return false
}

func (l literal) equal(v any) bool {
	switch x := v.(type) {
	case string:
		return l.kind == 's' && l.s == x
	case float64:
		return l.kind == 'n' && l.n == x
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		return err == nil && l.kind == 'n' && l.n == f
	case bool:
		return l.kind == 'b' && l.s == strconv.FormatBool(x)
	case nil:
		return l.kind == 'z'
	}
	return false
}

// String returns p in a canonical JSON form: keys sorted, one operator per
// object, numbers as Go formats them. Parse(p.String()) matches exactly
// what p matches.
func (p *Pattern) String() string {
	if p == nil || p.root == nil {
		return ""
	}
	var b bytes.Buffer
	writeObject(&b, p.root)
	return b.String()
}

func writeObject(b *bytes.Buffer, o *object) {
	b.WriteByte('{')
	for i, f := range o.fields {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, f.key)
		b.WriteByte(':')
		if f.obj != nil {
			writeObject(b, f.obj)
			continue
		}
		b.WriteByte('[')
		for j, m := range f.values {
			if j > 0 {
				b.WriteByte(',')
			}
			m.write(b)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
}

func (m matcher) write(b *bytes.Buffer) {
	switch m.op {
	case opEqual:
		m.lits[0].write(b)
		return
	case opExists:
		fmt.Fprintf(b, `{"exists":%t}`, m.exists)
		return
	case opAnythingBut:
		b.WriteString(`{"anything-but":[`)
		for i, l := range m.lits {
			if i > 0 {
				b.WriteByte(',')
			}
			l.write(b)
		}
		b.WriteString("]}")
		return
	case opShellstyle, opWildcard:
		fmt.Fprintf(b, `{"%s":`, m.op)
		var s strings.Builder
		for i, r := range m.glob {
			if i > 0 {
				s.WriteByte('*')
			}
			if m.op == opWildcard {
				r = strings.NewReplacer(`\`, `\\`, `*`, `\*`).Replace(r)
			}
			s.WriteString(r)
		}
		writeString(b, s.String())
		b.WriteByte('}')
		return
	}
	fmt.Fprintf(b, `{"%s":`, m.op)
	writeString(b, m.str)
	b.WriteByte('}')
}

func (l literal) write(b *bytes.Buffer) {
	switch l.kind {
	case 's':
		writeString(b, l.s)
	case 'n':
		b.WriteString(strconv.FormatFloat(l.n, 'g', -1, 64))
	case 'b':
		b.WriteString(l.s)
	default:
		b.WriteString("null")
	}
}

func writeString(b *bytes.Buffer, s string) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	enc, err := json.Marshal(s)
	if err != nil {
		panic(errors.New("rulepattern: marshal string: " + err.Error()))
	}
	b.Write(enc)
}
