package labels

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Selector
	}{
		{"", nil},
		{"   ", nil},
		{"a=b", Selector{{"a", Equals, []string{"b"}}}},
		// A trailing comma is tolerated (Kubernetes rejects it).
		{"a=b,", Selector{{"a", Equals, []string{"b"}}}},
		{"a==b", Selector{{"a", Equals, []string{"b"}}}},
		{" a = b ", Selector{{"a", Equals, []string{"b"}}}},
		{"a!=b", Selector{{"a", NotEquals, []string{"b"}}}},
		{"a=", Selector{{"a", Equals, []string{""}}}},
		{"a", Selector{{"a", Exists, nil}}},
		{"!a", Selector{{"a", DoesNotExist, nil}}},
		{"! a", Selector{{"a", DoesNotExist, nil}}},
		{"a in (x,y)", Selector{{"a", In, []string{"x", "y"}}}},
		{"a in ( x , y )", Selector{{"a", In, []string{"x", "y"}}}},
		{"a notin (x)", Selector{{"a", NotIn, []string{"x"}}}},
		{"a in(x)", Selector{{"a", In, []string{"x"}}}},
		{"example.com/role=web", Selector{{"example.com/role", Equals, []string{"web"}}}},
		{"env=prod,tier!=db,zone in (a,b),role notin (x),gpu,!spare", Selector{
			{"env", Equals, []string{"prod"}},
			{"tier", NotEquals, []string{"db"}},
			{"zone", In, []string{"a", "b"}},
			{"role", NotIn, []string{"x"}},
			{"gpu", Exists, nil},
			{"spare", DoesNotExist, nil},
		}},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		",",
		",a=b",
		"a=b,,c=d",
		"!",
		"=b",
		"a=b=c",
		"a=(b)",
		"a b",
		"a in x",
		"a in (x",
		"a in x)",
		"a in (x))",
		"a in ((x))",
		"a in (x) y",
		"a foo (x)",
		"a b c",
		"a$=b",
		"a=b c",
		"k=v,(",
		")",
		"ключ=v",
		"k=значение",
	} {
		if sel, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %#v, want an error", in, sel)
		} else if !strings.Contains(err.Error(), "label selector") {
			t.Errorf("Parse(%q) error %q does not say what it parsed", in, err)
		}
	}
}

func TestMatches(t *testing.T) {
	l := map[string]string{"env": "prod", "tier": "web", "empty": ""}
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"env=prod", true},
		{"env=dev", false},
		{"env!=dev", true},
		{"env!=prod", false},
		{"missing!=x", true}, // as in Kubernetes: != matches an absent key
		{"env in (dev,prod)", true},
		{"env in (dev)", false},
		{"missing in (x)", false},
		{"env notin (dev)", true},
		{"env notin (prod)", false},
		{"missing notin (x)", true},
		{"env", true},
		{"missing", false},
		{"!missing", true},
		{"!env", false},
		{"empty=", true},
		{"empty", true},
		{"missing=", false},
		{"env=prod,tier=web", true},
		{"env=prod,tier=db", false},
	} {
		sel, err := Parse(tc.sel)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.sel, err)
		}
		if got := sel.Matches(l); got != tc.want {
			t.Errorf("%q.Matches(%v) = %v, want %v", tc.sel, l, got, tc.want)
		}
	}
	var nilSel Selector
	if !nilSel.Matches(nil) || !nilSel.Matches(l) {
		t.Error("the nil selector must match everything")
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, in := range []string{
		"",
		"a=b",
		"a!=b",
		"a=",
		"a",
		"!a",
		"a in (x,y)",
		"a notin (x)",
		"a in ()",
		"env=prod,tier!=db,zone in (a,b),role notin (x),gpu,!spare",
	} {
		sel, err := Parse(in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if got := sel.String(); got != in {
			t.Errorf("Parse(%q).String() = %q", in, got)
		}
	}
}

func TestFromMap(t *testing.T) {
	sel := FromMap(map[string]string{"b": "2", "a": "1"})
	if got := sel.String(); got != "a=1,b=2" {
		t.Errorf("FromMap String = %q, want a=1,b=2", got)
	}
	if !sel.Matches(map[string]string{"a": "1", "b": "2", "c": "3"}) || sel.Matches(map[string]string{"a": "1"}) {
		t.Error("FromMap selector matches wrongly")
	}
	if s := FromMap(nil); len(s) != 0 || !s.Matches(nil) {
		t.Errorf("FromMap(nil) = %#v", s)
	}
}

// labelSets returns label maps that exercise sel: for each key none, each
// of its values and one other value, over all combinations of up to a few
// keys.
func labelSets(sel Selector) []map[string]string {
	var keys []string
	vals := map[string][]string{}
	for _, r := range sel {
		if !slices.Contains(keys, r.Key) {
			keys = append(keys, r.Key)
		}
		vals[r.Key] = append(vals[r.Key], r.Values...)
	}
	if len(keys) > 4 {
		keys = keys[:4]
	}
	sets := []map[string]string{{}}
	for _, k := range keys {
		choices := append([]string{"\x00absent", "zz-other", ""}, vals[k]...)
		var next []map[string]string
		for _, base := range sets {
			for _, c := range choices {
				m := map[string]string{}
				for bk, bv := range base {
					m[bk] = bv
				}
				if c != "\x00absent" {
					m[k] = c
				}
				next = append(next, m)
			}
			if len(next) > 2000 {
				break
			}
		}
		sets = next
	}
	return sets
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "a", "!a", "a=b", "a==b", "a!=b", "a=", "a in (x,y)", "a notin (x)",
		"a in ()", "a in (,)", "env=prod,tier!=db,zone in (a,b),role notin (x),gpu,!spare",
		"example.com/role=web", " a = b ", "a in(x)", "a notin(x,y)", "a,b,c", "!a,!b",
		"a in (x", "a)", "(", "a=b=c", "!a=b", "a !=b", "a in (x) y", "in", "notin",
		"a in", "a notin", "in in (in)", "notin notin (notin)", "a\tin\t(b)", "a\u0085in (b)",
		"!!a", "! !a", "a==", "a!=", "a in ((b))", ",", "a,,b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		sel, err := Parse(in) // must not panic
		if err != nil {
			return
		}
		out := sel.String()
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(%q) = %#v; its String %q does not parse: %v", in, sel, out, err)
		}
		if len(again) != len(sel) {
			t.Fatalf("Parse(%q) has %d terms; Parse(String()=%q) has %d", in, len(sel), out, len(again))
		}
		for _, l := range labelSets(sel) {
			if a, b := sel.Matches(l), again.Matches(l); a != b {
				t.Fatalf("Parse(%q).Matches(%v) = %v but Parse(%q).Matches = %v", in, l, a, out, b)
			}
		}
		if out2 := again.String(); out2 != out {
			t.Fatalf("String not stable: %q then %q", out, out2)
		}
	})
}
