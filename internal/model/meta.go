// Package model owns Anvil's resource types — Hardware, Template and Workflow in
// Tinkerbell's tinkerbell.org/v1alpha1 shape, and BootProfile in Anvil's own
// anvil.dev/v1alpha1 group — and the parsing and validation of the manifests
// users apply: objects, lists of them (kubectl's kind: List, Tinkerbell's
// file-backend YAML lists), and Hardware and Workflow in Tinkerbell's
// tinkerbell.org/v1alpha2, converted to the one stored shape and back
// (v1alpha2.go; ToVersion).
//
// It must not touch storage, the network or the clock: everything here is a
// pure function of its input, so the same rules hold whichever transport or
// store carries an object. Our own additions to Tinkerbell's shapes live in
// extra, optional fields; an object written by Tinkerbell tooling decodes
// unchanged and encodes back to the same JSON.
package model

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// APIVersion is the group/version of Tinkerbell's kinds: Hardware, Template
// and Workflow.
const APIVersion = "tinkerbell.org/v1alpha1"

// AnvilAPIVersion is the group/version of Anvil's own kinds (BootProfile),
// which have no Tinkerbell counterpart.
const AnvilAPIVersion = "anvil.dev/v1alpha1"

// The kinds this package defines.
const (
	KindHardware    = "Hardware"
	KindTemplate    = "Template"
	KindWorkflow    = "Workflow"
	KindBootProfile = "BootProfile"
)

// APIVersionOf returns the apiVersion objects of kind carry: AnvilAPIVersion
// for Anvil's own kinds, else APIVersion.
func APIVersionOf(kind string) string {
	switch kind {
	case KindBootProfile:
		return AnvilAPIVersion
	case KindMachine, KindJob, KindTask:
		return BMCAPIVersion
	case KindSecret:
		return CoreAPIVersion
	}
	return APIVersion
}

// DefaultNamespace is the namespace of an object whose manifest names none.
const DefaultNamespace = "default"

// TypeMeta is the apiVersion/kind pair every manifest starts with.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// ObjectMeta is the Kubernetes-style metadata of a stored object. Name and
// Namespace identify it; UID, ResourceVersion, Generation and
// CreationTimestamp are set by the store and ignored on input.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// AnnotationCreatedAt holds, on an object moved from another store
// (`anvil export`, `anvil restore`), the creation time it had in the
// first store that held it (RFC 3339, UTC): every store stamps its own
// creationTimestamp on create, and the order of creation is history
// (CompareActive runs waiting workflows oldest first).
const AnnotationCreatedAt = "anvil.dev/created-at"

// CreatedAt returns when the object was first created: the time in
// AnnotationCreatedAt when it holds a valid one, else CreationTimestamp
// (nil when neither).
func (m *ObjectMeta) CreatedAt() *time.Time {
	if v, ok := m.Annotations[AnnotationCreatedAt]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return &t
		}
	}
	return m.CreationTimestamp
}

// Key returns "namespace/name", the identity of an object within its kind.
func (m *ObjectMeta) Key() string { return m.Namespace + "/" + m.Name }

// Object is implemented by every stored kind. The accessors return pointers
// into the object so stores can stamp versions without knowing the kind.
type Object interface {
	GetTypeMeta() *TypeMeta
	GetObjectMeta() *ObjectMeta
}

// GetTypeMeta implements Object.
func (t *TypeMeta) GetTypeMeta() *TypeMeta { return t }

// GetObjectMeta implements Object.
func (m *ObjectMeta) GetObjectMeta() *ObjectMeta { return m }

// Kinds lists every kind in the order an apply writes them: a Workflow may
// refer to a Hardware and a Template in the same file, a Job to a Machine
// and a Machine to a Secret, a WorkflowRuleSet to a Template.
var Kinds = []string{KindSecret, KindHardware, KindTemplate, KindWorkflowRuleSet, KindBootProfile, KindMachine, KindWorkflow, KindJob, KindTask}

// New returns an empty object of the kind with its TypeMeta set.
func New(kind string) (Object, error) {
	var o Object
	switch kind {
	case KindHardware:
		o = &Hardware{}
	case KindTemplate:
		o = &Template{}
	case KindWorkflow:
		o = &Workflow{}
	case KindBootProfile:
		o = &BootProfile{}
	case KindMachine:
		o = &Machine{}
	case KindJob:
		o = &Job{}
	case KindTask:
		o = &BMCTask{}
	case KindSecret:
		o = &Secret{}
	case KindWorkflowRuleSet:
		o = &WorkflowRuleSet{}
	default:
		return nil, fmt.Errorf("unknown kind %q (known kinds: Hardware, Template, Workflow, BootProfile, Machine, Job, Task, Secret, WorkflowRuleSet)", kind)
	}
	*o.GetTypeMeta() = TypeMeta{APIVersion: APIVersionOf(kind), Kind: kind}
	return o, nil
}

// KindOf returns the kind of o from its Go type, whatever its TypeMeta says.
func KindOf(o Object) string {
	switch o.(type) {
	case *Hardware:
		return KindHardware
	case *Template:
		return KindTemplate
	case *Workflow:
		return KindWorkflow
	case *BootProfile:
		return KindBootProfile
	case *Machine:
		return KindMachine
	case *Job:
		return KindJob
	case *BMCTask:
		return KindTask
	case *Secret:
		return KindSecret
	case *WorkflowRuleSet:
		return KindWorkflowRuleSet
	}
	return ""
}

// ParseKind maps the names users type on the command line ("hw", "workflows",
// "Template") to a kind.
func ParseKind(s string) (string, error) {
	switch s {
	case "hardware", "hardwares", "hw", "Hardware":
		return KindHardware, nil
	case "template", "templates", "tpl", "Template":
		return KindTemplate, nil
	case "workflow", "workflows", "wf", "Workflow":
		return KindWorkflow, nil
	case "bootprofile", "bootprofiles", "bp", "BootProfile", "BootProfiles":
		return KindBootProfile, nil
	case "machine", "machines", "Machine":
		return KindMachine, nil
	case "job", "jobs", "Job":
		return KindJob, nil
	case "task", "tasks", "Task":
		return KindTask, nil
	case "secret", "secrets", "Secret":
		return KindSecret, nil
	case "workflowruleset", "workflowrulesets", "wrs", "WorkflowRuleSet", "WorkflowRuleSets":
		return KindWorkflowRuleSet, nil
	}
	return "", fmt.Errorf("unknown kind %q (want hardware, template, workflow, bootprofile, machine, job, task, secret or workflowruleset)", s)
}

// DeepCopy returns an independent copy of o: no pointer, slice or map is
// shared with it (strings are, being immutable). It walks the value by
// reflection rather than round-tripping JSON — stores hand out a copy on every
// read, and parsing dominated the server's CPU at fleet scale — and, being
// generic over the type, it cannot forget a field added later.
func DeepCopy[T Object](o T) T {
	return deepCopyValue(reflect.ValueOf(o)).Interface().(T)
}

var timeType = reflect.TypeOf(time.Time{})

// flatTypes caches, per type, whether a plain assignment already copies a
// value of it fully (no pointer, slice, map or interface inside, strings
// aside), so the walk can stop there.
var flatTypes sync.Map // reflect.Type -> bool

func isFlat(t reflect.Type) bool {
	if f, ok := flatTypes.Load(t); ok {
		return f.(bool)
	}
	flat := true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		flat = false
	case reflect.Array:
		flat = isFlat(t.Elem())
	case reflect.Struct:
		if t != timeType { // time.Time's *Location is shared on purpose
			for i := 0; i < t.NumField(); i++ {
				if !isFlat(t.Field(i).Type) {
					flat = false
					break
				}
			}
		}
	}
	flatTypes.Store(t, flat)
	return flat
}

func deepCopyValue(v reflect.Value) reflect.Value {
	if isFlat(v.Type()) {
		return v
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(deepCopyValue(v.Elem()))
		return n
	case reflect.Struct:
		n := reflect.New(v.Type()).Elem()
		n.Set(v) // copies every field, unexported ones included
		for i := 0; i < v.NumField(); i++ {
			if f := n.Field(i); f.CanSet() && !isFlat(f.Type()) {
				f.Set(deepCopyValue(v.Field(i)))
			}
		}
		return n
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := 0; i < v.Len(); i++ {
			n.Index(i).Set(deepCopyValue(v.Index(i)))
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		n := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			n.SetMapIndex(it.Key(), deepCopyValue(it.Value()))
		}
		return n
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type()).Elem()
		n.Set(deepCopyValue(v.Elem()))
		return n
	}
	return v
}

// Decode builds an object of the given kind from its JSON encoding.
func Decode(kind string, b []byte) (Object, error) {
	o, err := New(kind)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, o); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kind, err)
	}
	*o.GetTypeMeta() = TypeMeta{APIVersion: APIVersionOf(kind), Kind: kind}
	return o, nil
}

// Bool returns a pointer to b, for the optional booleans of the spec types.
func Bool(b bool) *bool { return &b }

// BoolValue returns *p, or def when p is nil.
func BoolValue(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}
