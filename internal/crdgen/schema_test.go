package crdgen

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

type customJSON struct{ v int }

func (c customJSON) MarshalJSON() ([]byte, error) { return json.Marshal(c.v) }

type textInt int

func (t *textInt) UnmarshalText([]byte) error { return nil }

// TestFromType: Go types map to the schema of what encoding/json writes.
func TestFromType(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type embedded struct {
		E bool `json:"e,omitempty"`
	}
	type sample struct {
		embedded
		S       string            `json:"s,omitempty"`
		N       int64             `json:"n"`
		I       int               `json:"i,omitempty"`
		F       float64           `json:"f,omitempty"`
		When    *time.Time        `json:"when,omitempty"`
		List    []inner           `json:"list"`
		Opt     []string          `json:"opt,omitempty"`
		Labels  map[string]string `json:"labels,omitempty"`
		Free    map[string]any    `json:"free,omitempty"`
		Any     any               `json:"any,omitempty"`
		State   model.State       `json:"state,omitempty"`
		Skipped string            `json:"-"`
		NoTag   bool
		hidden  int // unexported: left out
	}
	_ = sample{}.hidden
	s, err := FromType(reflect.TypeOf(sample{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"object","properties":{` +
		`"NoTag":{"type":"boolean"},` +
		`"any":{"x-kubernetes-preserve-unknown-fields":true},` +
		`"e":{"type":"boolean"},` +
		`"f":{"type":"number"},` +
		`"free":{"type":"object","x-kubernetes-preserve-unknown-fields":true},` +
		`"i":{"type":"integer"},` +
		`"labels":{"type":"object","additionalProperties":{"type":"string"}},` +
		`"list":{"type":"array","nullable":true,"items":{"type":"object","properties":{"a":{"type":"string"}},"x-kubernetes-preserve-unknown-fields":true}},` +
		`"n":{"type":"integer","format":"int64"},` +
		`"opt":{"type":"array","items":{"type":"string"}},` +
		`"s":{"type":"string"},` +
		`"state":{"type":"string"},` +
		`"when":{"type":"string","format":"date-time"}` +
		`},"x-kubernetes-preserve-unknown-fields":true}`
	if string(got) != want {
		t.Errorf("schema\n%s\nwant\n%s", got, want)
	}
}

// TestFromTypeRefusesCustomEncodings: a type that encodes itself has no
// schema the generator can read from its shape; it must be declared, not
// guessed.
func TestFromTypeRefusesCustomEncodings(t *testing.T) {
	for _, v := range []any{
		struct {
			C customJSON `json:"c"`
		}{},
		struct {
			T textInt `json:"t"`
		}{},
		struct {
			M map[int]string `json:"m"`
		}{},
		struct {
			Ch chan int `json:"ch"`
		}{},
	} {
		_, err := FromType(reflect.TypeOf(v), nil)
		if err == nil || !strings.Contains(err.Error(), ".") {
			t.Errorf("%T: err %v, want an error naming the field", v, err)
		}
	}
}

// TestGenerateNeedsSchemaLast: the generator replaces what follows the
// schema line, so it refuses a manifest where anything else follows.
func TestGenerateNeedsSchemaLast(t *testing.T) {
	const m = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
spec:
  names:
    kind: Template
  versions:
    - name: v1alpha1
      schema:
        openAPIV3Schema:
          type: object
      served: true
`
	if _, err := Generate("t.yaml", []byte(m), nil); err == nil || !strings.Contains(err.Error(), "served: true") {
		t.Errorf("err %v, want one naming the key after the schema", err)
	}
	out, err := Generate("t.yaml", []byte(strings.TrimSuffix(m, "      served: true\n")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "            spec:\n") || !strings.HasPrefix(string(out), "apiVersion: apiextensions.k8s.io/v1\n") {
		t.Errorf("generated manifest:\n%s", out)
	}
}

// TestUnmodelledFieldsAreNotModelled: a field crdgen declares for
// Tinkerbell's sake must not also be in the model: KindSchema refuses
// the clash, so the model's type wins once it holds the field.
func TestUnmodelledFieldsAreNotModelled(t *testing.T) {
	for _, kind := range []string{model.KindHardware, model.KindWorkflow, model.KindMachine, model.KindTask} {
		if _, err := KindSchema(kind, nil); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
	u := unmodelledField{kind: "Workflow", at: "status", fields: reflect.TypeOf(struct {
		State string `json:"state"`
	}{})}
	root, err := KindSchema(model.KindWorkflow, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.addTo(root, nil); err == nil || !strings.Contains(err.Error(), "status.state") {
		t.Errorf("err %v, want one naming status.state", err)
	}
}
