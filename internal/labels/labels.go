// Package labels parses and evaluates Kubernetes-style label selectors:
// "env=prod,tier!=db,zone in (a,b),role notin (x),gpu,!spare".
//
// It owns only the selector syntax and its matching; it knows nothing of the
// objects that carry labels.
package labels

import (
	"fmt"
	"sort"
	"strings"
)

// Selector matches a set of labels. The nil Selector matches everything.
type Selector []Requirement

// Operator is the relation a Requirement tests.
type Operator string

// The operators of the selector syntax.
const (
	Equals       Operator = "="
	NotEquals    Operator = "!="
	In           Operator = "in"
	NotIn        Operator = "notin"
	Exists       Operator = "exists"
	DoesNotExist Operator = "!"
)

// Requirement is one term of a Selector.
type Requirement struct {
	Key      string
	Operator Operator
	Values   []string
}

// Matches reports whether the labels satisfy every requirement.
func (s Selector) Matches(l map[string]string) bool {
	for _, r := range s {
		if !r.Matches(l) {
			return false
		}
	}
	return true
}

// Matches reports whether the labels satisfy r.
func (r Requirement) Matches(l map[string]string) bool {
	v, ok := l[r.Key]
	switch r.Operator {
	case Exists:
		return ok
	case DoesNotExist:
		return !ok
	case Equals, In:
		return ok && contains(r.Values, v)
	case NotEquals, NotIn:
		return !ok || !contains(r.Values, v)
	}
	return false
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// String renders the selector in the syntax Parse accepts.
func (s Selector) String() string {
	parts := make([]string, 0, len(s))
	for _, r := range s {
		switch r.Operator {
		case Exists:
			parts = append(parts, r.Key)
		case DoesNotExist:
			parts = append(parts, "!"+r.Key)
		case In, NotIn:
			parts = append(parts, fmt.Sprintf("%s %s (%s)", r.Key, r.Operator, strings.Join(r.Values, ",")))
		default:
			v := ""
			if len(r.Values) > 0 {
				v = r.Values[0]
			}
			parts = append(parts, r.Key+string(r.Operator)+v)
		}
	}
	return strings.Join(parts, ",")
}

// FromMap returns the selector that requires every key=value of m.
func FromMap(m map[string]string) Selector {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := make(Selector, 0, len(m))
	for _, k := range keys {
		s = append(s, Requirement{Key: k, Operator: Equals, Values: []string{m[k]}})
	}
	return s
}

// Parse parses a selector. The empty string is the selector that matches
// everything.
func Parse(s string) (Selector, error) {
	var sel Selector
	rest := strings.TrimSpace(s)
	for rest != "" {
		term, tail, err := nextTerm(rest)
		if err != nil {
			return nil, fmt.Errorf("label selector %q: %w", s, err)
		}
		r, err := parseTerm(strings.TrimSpace(term))
		if err != nil {
			return nil, fmt.Errorf("label selector %q: %w", s, err)
		}
		sel = append(sel, r)
		rest = strings.TrimSpace(tail)
	}
	return sel, nil
}

// nextTerm splits off the first comma-separated term, keeping commas inside
// parentheses.
func nextTerm(s string) (term, rest string, err error) {
	depth := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return "", "", fmt.Errorf("unbalanced ')'")
			}
		case ',':
			if depth == 0 {
				return s[:i], s[i+1:], nil
			}
		}
	}
	if depth != 0 {
		return "", "", fmt.Errorf("unbalanced '('")
	}
	return s, "", nil
}

func parseTerm(t string) (Requirement, error) {
	if t == "" {
		return Requirement{}, fmt.Errorf("empty term")
	}
	if strings.HasPrefix(t, "!") && !strings.Contains(t, "=") {
		k := strings.TrimSpace(t[1:])
		return Requirement{Key: k, Operator: DoesNotExist}, validKey(k)
	}
	for _, op := range []string{"!=", "==", "="} {
		if k, v, ok := strings.Cut(t, op); ok {
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			o := Equals
			if op == "!=" {
				o = NotEquals
			}
			if err := validKey(k); err != nil {
				return Requirement{}, err
			}
			return Requirement{Key: k, Operator: o, Values: []string{v}}, validValue(v)
		}
	}
	fields := strings.Fields(t)
	if len(fields) == 1 {
		return Requirement{Key: fields[0], Operator: Exists}, validKey(fields[0])
	}
	k := fields[0]
	rest := strings.TrimSpace(strings.TrimPrefix(t, k))
	var op Operator
	switch {
	case strings.HasPrefix(rest, "notin"):
		op, rest = NotIn, strings.TrimSpace(rest[len("notin"):])
	case strings.HasPrefix(rest, "in"):
		op, rest = In, strings.TrimSpace(rest[len("in"):])
	default:
		return Requirement{}, fmt.Errorf("term %q: want key, !key, key=value, key!=value, key in (...) or key notin (...)", t)
	}
	if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
		return Requirement{}, fmt.Errorf("term %q: values must be in parentheses", t)
	}
	var vals []string
	for _, v := range strings.Split(rest[1:len(rest)-1], ",") {
		v = strings.TrimSpace(v)
		if err := validValue(v); err != nil {
			return Requirement{}, err
		}
		vals = append(vals, v)
	}
	if err := validKey(k); err != nil {
		return Requirement{}, err
	}
	return Requirement{Key: k, Operator: op, Values: vals}, nil
}

func validKey(k string) error {
	if k == "" {
		return fmt.Errorf("empty label key")
	}
	for _, c := range k {
		if !(c == '-' || c == '_' || c == '.' || c == '/' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("label key %q: character %q not allowed", k, c)
		}
	}
	return nil
}

func validValue(v string) error {
	for _, c := range v {
		if !(c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("label value %q: character %q not allowed", v, c)
		}
	}
	return nil
}
