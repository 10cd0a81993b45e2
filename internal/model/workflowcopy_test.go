package model

import (
	"reflect"
	"testing"
	"time"
)

// fill sets every field reachable from v to a non-zero value (slices and
// maps of two elements), so that a copy that forgets a field shows.
func fill(t *testing.T, v reflect.Value, depth int) {
	t.Helper()
	if depth > 16 {
		t.Fatalf("type nests too deep to fill: %s", v.Type())
	}
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), depth+1)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := 0; i < 2; i++ {
			fill(t, v.Index(i), depth+1)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for i := 0; i < 2; i++ {
			k := reflect.New(v.Type().Key()).Elem()
			k.SetString(string(rune('a' + i)))
			e := reflect.New(v.Type().Elem()).Elem()
			fill(t, e, depth+1)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	default:
		t.Fatalf("fill: no value for a %s: teach fill about it", v.Type())
	}
}

// sharesMemory reports the path of the first pointer, slice or map that a
// and b (equal values) have in common.
func sharesMemory(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return sharesMemory(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		if a.Type() == reflect.TypeOf(time.Time{}) {
			return "" // its *Location is shared on purpose
		}
		for i := 0; i < a.NumField(); i++ {
			if p := sharesMemory(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	case reflect.Slice:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
		for i := 0; i < a.Len(); i++ {
			if p := sharesMemory(a.Index(i), b.Index(i), path+"[]"); p != "" {
				return p
			}
		}
	case reflect.Map:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
	}
	return ""
}

func TestWorkflowStatusCopyIsDeep(t *testing.T) {
	var st WorkflowStatus
	fill(t, reflect.ValueOf(&st).Elem(), 0)
	cp := st.DeepCopy()
	if !reflect.DeepEqual(st, cp) {
		t.Fatalf("copy differs:\n%+v\n%+v", st, cp)
	}
	if p := sharesMemory(reflect.ValueOf(st), reflect.ValueOf(cp), "status"); p != "" {
		t.Fatalf("copy shares %s with the original: WorkflowStatus.DeepCopy misses a field", p)
	}
}

func TestWithPrivateStatus(t *testing.T) {
	var wf Workflow
	fill(t, reflect.ValueOf(&wf).Elem(), 0)
	cp := WithPrivateStatus(&wf)
	if !reflect.DeepEqual(&wf, cp) {
		t.Fatal("WithPrivateStatus changed the workflow")
	}
	if p := sharesMemory(reflect.ValueOf(wf.Status), reflect.ValueOf(cp.Status), "status"); p != "" {
		t.Fatalf("status shares %s with the original", p)
	}
	cp.Status.Tasks[0].Actions[0].State = StateFailed
	cp.Name = "other"
	if wf.Status.Tasks[0].Actions[0].State == StateFailed || wf.Name == "other" {
		t.Fatal("a change to the copy reached the original")
	}
}

func TestShallowCopy(t *testing.T) {
	hw := &Hardware{ObjectMeta: ObjectMeta{Name: "a", ResourceVersion: "1"}}
	cp := ShallowCopy(hw)
	cp.ResourceVersion = "2"
	if hw.ResourceVersion != "1" || cp.Name != "a" {
		t.Fatalf("ShallowCopy: original %+v, copy %+v", hw.ObjectMeta, cp.ObjectMeta)
	}
}
