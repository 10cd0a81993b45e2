package bolt

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// fill sets every settable field of v, recursively, to a non-zero value, so
// that an encoding test sees every field a kind has, including ones added
// later.
func fill(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x\u0026<y>")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 28, 1, 2, 3, 4, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf("any"))
	}
}

// TestStoredBytesAreMarshal: the JSON the committer writes, joined from
// the metadata it stamps and the rest the caller encoded, is byte for byte
// json.Marshal of the stored object, for every kind, create and update.
func TestStoredBytesAreMarshal(t *testing.T) {
	s := openTest(t, "", Options{})
	now := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	for _, kind := range model.Kinds {
		obj, err := model.New(kind)
		if err != nil {
			t.Fatal(err)
		}
		fill(reflect.ValueOf(obj).Elem(), 0)
		*obj.GetTypeMeta() = model.TypeMeta{}
		m := obj.GetObjectMeta()
		m.Namespace, m.Name, m.ResourceVersion = "ns", "n1", ""
		var cur *entry
		for _, v := range []verb{verbCreate, verbUpdate} {
			o, err := s.prepare(v, obj, false)
			if err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			if o.body == nil {
				t.Errorf("%s: the caller did not encode the body; the committer would encode it all", kind)
			}
			e, err := s.stamp(o, cur, 42, now)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(e.obj)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(e.raw, want) {
				t.Errorf("%s, verb %d: stored\n%s\nwant\n%s", kind, v, e.raw, want)
			}
			cur = e
		}
	}
}
