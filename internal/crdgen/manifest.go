package crdgen

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/internal/model"
)

// KindSchema returns the openAPIV3Schema of kind's objects: spec and
// status from the model's types, with the fields Tinkerbell declares and
// Anvil does not model (unmodelled) added.
func KindSchema(kind string, docs Docs) (*Schema, error) {
	obj, err := model.New(kind)
	if err != nil {
		return nil, err
	}
	t := reflect.TypeOf(obj).Elem()
	root := &Schema{Description: docs.Type(t), Type: "object", Properties: map[string]*Schema{}}
	for _, part := range []string{"Spec", "Status"} {
		f, ok := t.FieldByName(part)
		if !ok {
			return nil, fmt.Errorf("%s: no %s field", kind, part)
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		s, err := FromType(f.Type, docs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		// Kept unknown even where the model's struct is empty
		// (BootProfileStatus), as every object the schema declares.
		s.Description = docs.field(t, f)
		s.PreserveUnknown = true
		root.Properties[name] = s
	}
	for _, u := range unmodelled {
		if u.kind != kind {
			continue
		}
		if err := u.addTo(root, docs); err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
	}
	return root, nil
}

// schemaLine is the manifest line the generated block follows: the
// schema is the last key of the manifest's one version, so everything
// after this line is the generator's.
const schemaLine = "      schema:"

// Generate returns manifest b (file, for messages) with its schema block
// written from the model: the lines up to schemaLine are kept byte for
// byte, the rest is replaced.
func Generate(file string, b []byte, docs Docs) ([]byte, error) {
	var crd struct {
		Spec struct {
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name string `json:"name"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := sigsyaml.Unmarshal(b, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(crd.Spec.Versions) != 1 {
		return nil, fmt.Errorf("%s: %d versions; the generator writes the schema of a manifest with one", file, len(crd.Spec.Versions))
	}
	lines := strings.SplitAfter(string(b), "\n")
	at := -1
	for i, l := range lines {
		if strings.TrimRight(l, "\n") == schemaLine {
			if at >= 0 {
				return nil, fmt.Errorf("%s: two %q lines", file, schemaLine)
			}
			at = i
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("%s: no %q line (the version's schema, last in the manifest)", file, schemaLine)
	}
	for _, l := range lines[at+1:] {
		if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "        ") {
			return nil, fmt.Errorf("%s: %q follows the schema; the schema must be the manifest's last key", file, strings.TrimSpace(l))
		}
	}
	s, err := KindSchema(crd.Spec.Names.Kind, docs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]*Schema{"openAPIV3Schema": s}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	var out strings.Builder
	for _, l := range lines[:at+1] {
		out.WriteString(l)
	}
	indent := strings.Repeat(" ", 8)
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		if l != "" {
			out.WriteString(indent + l)
		}
	}
	return []byte(out.String()), nil
}
