// Package crdgen writes the openAPIV3Schema of Anvil's
// CustomResourceDefinitions (deploy/crds) from the Go types of
// internal/model: each kind's spec and status struct, read by reflection
// through their json tags, with the doc comments of the model's source as
// descriptions. It owns the mapping from a Go type to a structural schema
// and the rewrite of a manifest's schema block; the rest of a manifest
// (names, printer columns, subresources, comments) is written by hand and
// kept as it is.
//
// Every object it declares also keeps unknown fields
// (x-kubernetes-preserve-unknown-fields): the schema types the fields
// Anvil reads, so the API server refuses a wrong type with the field
// named, and `kubectl explain` lists them, while a field Anvil does not
// model (another tool's, a newer Tinkerbell's) is stored as written, as
// before the fields were declared.
package crdgen

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Schema is the part of an OpenAPI v3 schema (apiextensions.k8s.io/v1
// JSONSchemaProps) the generator writes. Field order is the order the
// YAML shows.
type Schema struct {
	Description          string             `yaml:"description,omitempty" json:"description,omitempty"`
	Type                 string             `yaml:"type,omitempty" json:"type,omitempty"`
	Format               string             `yaml:"format,omitempty" json:"format,omitempty"`
	Nullable             bool               `yaml:"nullable,omitempty" json:"nullable,omitempty"`
	Properties           map[string]*Schema `yaml:"properties,omitempty" json:"properties,omitempty"`
	Items                *Schema            `yaml:"items,omitempty" json:"items,omitempty"`
	AdditionalProperties *Schema            `yaml:"additionalProperties,omitempty" json:"additionalProperties,omitempty"`
	PreserveUnknown      bool               `yaml:"x-kubernetes-preserve-unknown-fields,omitempty" json:"x-kubernetes-preserve-unknown-fields,omitempty"`
	IntOrString          bool               `yaml:"x-kubernetes-int-or-string,omitempty" json:"x-kubernetes-int-or-string,omitempty"`
}

var (
	timeType          = reflect.TypeOf(time.Time{})
	jsonMarshaler     = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	jsonUnmarshaler   = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	textMarshaler     = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
	textUnmarshaler   = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
	emptyInterfaceTyp = reflect.TypeOf((*any)(nil)).Elem()
)

// implements reports whether t or *t implements iface: a method on the
// pointer still decides how encoding/json reads a field of type t.
func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

// FromType returns the schema of values of t as encoding/json writes and
// reads them. docs gives descriptions (nil: none). It refuses a type
// whose JSON form it cannot know from its shape: one with its own
// MarshalJSON or UnmarshalJSON (other than time.Time's), or a non-string
// kind with MarshalText or UnmarshalText; such a type needs a decision
// here, not a guess.
func FromType(t reflect.Type, docs Docs) (*Schema, error) {
	return fromType(t, docs, t.String())
}

func fromType(t reflect.Type, docs Docs, where string) (*Schema, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		// encoding/json writes a time.Time as RFC 3339 text, which the
		// API server checks as date-time.
		return &Schema{Type: "string", Format: "date-time"}, nil
	}
	if implements(t, jsonMarshaler) || implements(t, jsonUnmarshaler) {
		return nil, fmt.Errorf("%s: type %s has its own JSON encoding; declare its schema in crdgen", where, t)
	}
	if (implements(t, textMarshaler) || implements(t, textUnmarshaler)) && t.Kind() != reflect.String {
		return nil, fmt.Errorf("%s: type %s is written as text but is not a string kind; declare its schema in crdgen", where, t)
	}
	switch t.Kind() {
	case reflect.String:
		// A string kind with UnmarshalText (model.State) still takes and
		// gives a JSON string.
		return &Schema{Type: "string"}, nil
	case reflect.Bool:
		return &Schema{Type: "boolean"}, nil
	case reflect.Int, reflect.Uint, reflect.Uint64:
		return &Schema{Type: "integer"}, nil
	case reflect.Int64:
		return &Schema{Type: "integer", Format: "int64"}, nil
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return &Schema{Type: "integer", Format: "int32"}, nil
	case reflect.Float32, reflect.Float64:
		return &Schema{Type: "number"}, nil
	case reflect.Interface:
		if t != emptyInterfaceTyp {
			return nil, fmt.Errorf("%s: interface type %s; declare its schema in crdgen", where, t)
		}
		// Any JSON value: no type, kept as written.
		return &Schema{PreserveUnknown: true}, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return &Schema{Type: "string", Format: "byte"}, nil // encoding/json's base64
		}
		items, err := fromType(t.Elem(), docs, where+"[]")
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "array", Items: items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: map key %s is not a string", where, t.Key())
		}
		if t.Elem() == emptyInterfaceTyp {
			// Free-form JSON (metadata.custom, instance.storage): an
			// object whose members are kept as written.
			return &Schema{Type: "object", PreserveUnknown: true}, nil
		}
		v, err := fromType(t.Elem(), docs, where+"{}")
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "object", AdditionalProperties: v}, nil
	case reflect.Struct:
		s := &Schema{Type: "object", PreserveUnknown: true, Properties: map[string]*Schema{}}
		if err := addFields(s, t, docs, where); err != nil {
			return nil, err
		}
		if len(s.Properties) == 0 {
			s.Properties = nil
		}
		return s, nil
	}
	return nil, fmt.Errorf("%s: type %s has no JSON schema", where, t)
}

// addFields adds the JSON members of struct t to s, as encoding/json
// names them: the tag's name, else the field's; embedded structs without
// a name inline their fields.
func addFields(s *Schema, t reflect.Type, docs Docs, where string) error {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := addFields(s, ft, docs, where); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs, err := fromType(f.Type, docs, where+"."+name)
		if err != nil {
			return err
		}
		fs.Description = docs.field(t, f)
		// Without omitempty encoding/json writes a nil slice, map or
		// pointer as null; the schema must take what Anvil writes.
		switch f.Type.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface:
			if !hasOpt(opts, "omitempty") {
				fs.Nullable = true
			}
		}
		s.Properties[name] = fs
	}
	return nil
}

func hasOpt(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}
