package rulepattern_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/rulepattern"
)

var schema = reflect.TypeOf(model.Attributes{})

// machine is the attributes of a two-disk Dell, as JSON the way the
// matcher receives them.
const machine = `{
  "cpu": {"totalCores": 16, "totalThreads": 32, "processors": [{"vendor": "GenuineIntel", "capabilities": ["sse4_2", "avx2"]}]},
  "blockDevices": [
    {"name": "sda", "model": "MZ7LH960", "size": "960GB", "driveType": "SSD"},
    {"name": "sdb", "model": "ST4000NM", "size": "4TB", "driveType": "HDD"}
  ],
  "networkInterfaces": [{"name": "eno1", "mac": "a8:a1:59:d0:e2:52", "speed": "10000Mb/s"}],
  "product": {"name": "PowerEdge R650", "vendor": "Dell Inc.", "serialNumber": "7B60007P"},
  "anvil": {"firmware": "uefi", "memoryBytes": 68719476736}
}`

func doc(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMatch(t *testing.T) {
	d := doc(t, machine)
	for _, tc := range []struct {
		name    string
		pattern string
		want    bool
	}{
		{"exact string", `{"product": {"vendor": ["Dell Inc."]}}`, true},
		{"exact string, other value", `{"product": {"vendor": ["HPE"]}}`, false},
		{"any of the values", `{"product": {"vendor": ["HPE", "Dell Inc."]}}`, true},
		{"all keys must match", `{"product": {"vendor": ["Dell Inc."], "name": ["PowerEdge R750"]}}`, false},
		{"two objects, both match", `{"product": {"vendor": ["Dell Inc."]}, "anvil": {"firmware": ["uefi"]}}`, true},
		{"number", `{"cpu": {"totalCores": [16]}}`, true},
		{"number written as float", `{"cpu": {"totalCores": [16.0]}}`, true},
		{"number is not its string", `{"cpu": {"totalCores": ["16"]}}`, false},
		{"big number exact", `{"anvil": {"memoryBytes": [68719476736]}}`, true},
		{"list element", `{"networkInterfaces": {"mac": ["a8:a1:59:d0:e2:52"]}}`, true},
		{"list element absent", `{"networkInterfaces": {"mac": ["00:00:00:00:00:01"]}}`, false},
		{"one element has both", `{"blockDevices": {"model": ["ST4000NM"], "driveType": ["HDD"]}}`, true},
		{"fields of two elements do not combine", `{"blockDevices": {"model": ["ST4000NM"], "driveType": ["SSD"]}}`, false},
		{"scalar list", `{"cpu": {"processors": {"capabilities": ["avx2"]}}}`, true},
		{"scalar list, missing flag", `{"cpu": {"processors": {"capabilities": ["avx512f"]}}}`, false},
		{"prefix", `{"product": {"name": [{"prefix": "PowerEdge "}]}}`, true},
		{"prefix no", `{"product": {"name": [{"prefix": "ProLiant"}]}}`, false},
		{"suffix", `{"product": {"name": [{"suffix": "R650"}]}}`, true},
		{"equals-ignore-case", `{"product": {"vendor": [{"equals-ignore-case": "DELL INC."}]}}`, true},
		{"shellstyle", `{"product": {"name": [{"shellstyle": "Power*R6*"}]}}`, true},
		{"shellstyle no", `{"product": {"name": [{"shellstyle": "Power*R7*"}]}}`, false},
		{"shellstyle exact when no star", `{"product": {"name": [{"shellstyle": "PowerEdge"}]}}`, false},
		{"wildcard escape", `{"product": {"name": [{"wildcard": "PowerEdge\\*"}]}}`, false},
		{"wildcard star", `{"product": {"name": [{"wildcard": "*650"}]}}`, true},
		{"anything-but", `{"product": {"vendor": [{"anything-but": ["HPE", "Lenovo"]}]}}`, true},
		{"anything-but excluded", `{"product": {"vendor": [{"anything-but": "Dell Inc."}]}}`, false},
		{"anything-but needs the field", `{"chassis": {"vendor": [{"anything-but": "x"}]}}`, false},
		{"exists true", `{"product": {"serialNumber": [{"exists": true}]}}`, true},
		{"exists false on absent", `{"anvil": {"tpm": [{"exists": false}]}}`, true},
		{"exists false on present", `{"anvil": {"firmware": [{"exists": false}]}}`, false},
		{"absent object", `{"chassis": {"serial": ["x"]}}`, false},
		{"absent object, exists false", `{"chassis": {"serial": [{"exists": false}]}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := rulepattern.Parse(tc.pattern, schema)
			if err != nil {
				t.Fatalf("Parse(%s): %v", tc.pattern, err)
			}
			if got := p.Match(d); got != tc.want {
				t.Errorf("Parse(%s).Match(machine) = %v; want %v", tc.pattern, got, tc.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, pattern, want string
	}{
		{"empty", ``, "empty pattern"},
		{"not JSON", `{"product":`, "not JSON"},
		{"not an object", `["x"]`, "a pattern is a JSON object, not an array"},
		{"trailing text", `{"product": {"vendor": ["x"]}} {}`, "text after"},
		{"unknown top-level attribute", `{"serial": ["x"]}`, `serial: unknown attribute "serial" (the attributes have: anvil, baseboard, bios, blockDevices`},
		{"unknown nested attribute", `{"chassis": {"manufacturer": ["Dell Inc."]}}`, `chassis.manufacturer: unknown attribute "manufacturer" (chassis has: serial, vendor)`},
		{"object where a value is", `{"product": {"vendor": {"name": ["x"]}}}`, "product.vendor: product.vendor is a value, not an object"},
		{"values where an object is", `{"product": ["Dell"]}`, "product: product is an object: descend into it"},
		{"bare string", `{"product": {"vendor": "Dell"}}`, `product.vendor: want an array of values (e.g. "vendor": ["Dell"])`},
		{"empty values", `{"product": {"vendor": []}}`, "empty array of values"},
		{"empty object", `{"product": {}}`, "product: empty object"},
		{"unknown operator", `{"product": {"vendor": [{"regex": "D.*"}]}}`, `product.vendor[0].regex: unknown operator "regex"`},
		{"two operators", `{"product": {"vendor": [{"prefix": "D", "suffix": "c."}]}}`, "exactly one key"},
		{"exists not bool", `{"product": {"vendor": [{"exists": "yes"}]}}`, "exists takes true or false"},
		{"empty prefix", `{"product": {"vendor": [{"prefix": ""}]}}`, "prefix is empty"},
		{"adjacent stars", `{"product": {"vendor": [{"shellstyle": "D**"}]}}`, "adjacent"},
		{"bad escape", `{"product": {"vendor": [{"wildcard": "D\\x"}]}}`, "must escape"},
		{"nested array", `{"product": {"vendor": [["x"]]}}`, "an array inside the array"},
		{"huge", `{"product": {"vendor": ["` + strings.Repeat("x", rulepattern.MaxPatternBytes) + `"]}}`, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rulepattern.Parse(tc.pattern, schema)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%.80s) error = %v; want it to contain %q", tc.pattern, err, tc.want)
			}
		})
	}
}

// TestParseWithoutSchema: with no schema any key is accepted, the shape
// rules still hold.
func TestParseWithoutSchema(t *testing.T) {
	p, err := rulepattern.Parse(`{"anything": {"goes": ["here"]}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Match(doc(t, `{"anything": [{"goes": "nowhere"}, {"goes": "here"}]}`)) {
		t.Error("no match on the second element")
	}
	if _, err := rulepattern.Parse(`{"a": "b"}`, nil); err == nil {
		t.Error(`Parse({"a": "b"}, nil) accepted a bare value`)
	}
}

func TestString(t *testing.T) {
	p, err := rulepattern.Parse(`{"product": {"vendor": [{"equals-ignore-case": "Dell"}, "HPE"], "name": [{"wildcard": "a\\*b*"}]}, "cpu": {"totalCores": [8, 1e1]}}`, schema)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cpu":{"totalCores":[8,10]},"product":{"name":[{"wildcard":"a\\*b*"}],"vendor":[{"equals-ignore-case":"dell"},"HPE"]}}`
	if got := p.String(); got != want {
		t.Errorf("String() = %s; want %s", got, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"product": {"vendor": ["Dell Inc."]}}`,
		`{"blockDevices": {"model": ["X"], "size": [{"prefix": "4"}]}}`,
		`{"cpu": {"totalCores": [16, 8.5, null, true]}}`,
		`{"product": {"name": [{"shellstyle": "a*b*c"}, {"wildcard": "\\**\\\\"}]}}`,
		`{"anvil": {"tpm": [{"exists": false}], "firmware": [{"anything-but": ["bios", 1]}]}}`,
		`{"product": {"vendor": [{"equals-ignore-case": "ÄB"}]}}`,
		`{"x": ["y"]}`, `{}`, `[]`, `{"product": {"vendor": "x"}}`, `{"a":{"b":{"c":{"d":["e"]}}}}`,
	} {
		f.Add(s)
	}
	docs := []any{}
	for _, s := range []string{machine, `{"product": {"vendor": "Dell Inc.", "name": "a*b\\c"}}`, `[]`, `null`} {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			f.Fatal(err)
		}
		docs = append(docs, v)
	}
	f.Fuzz(func(t *testing.T, src string) {
		for _, sch := range []reflect.Type{schema, nil} {
			p, err := rulepattern.Parse(src, sch) // must not panic
			if err != nil {
				continue
			}
			out := p.String()
			again, err := rulepattern.Parse(out, sch)
			if err != nil {
				t.Fatalf("Parse(%q).String() = %q, which does not parse: %v", src, out, err)
			}
			if out2 := again.String(); out2 != out {
				t.Fatalf("String not stable: %q then %q", out, out2)
			}
			for _, d := range docs {
				if a, b := p.Match(d), again.Match(d); a != b {
					t.Fatalf("Parse(%q).Match = %v but its String %q matches %v", src, a, out, b)
				}
			}
		}
	})
}
