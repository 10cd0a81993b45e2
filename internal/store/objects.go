package store

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
)

// This file holds the decisions about objects that every implementation
// makes the same way: which kinds and keys are valid, what an empty status
// is, and whether an object matches a list's or watch's filters.

// Matches reports whether obj (of kind) is in namespace ns (empty: any),
// matches sel (nil: any) and every field requirement.
func Matches(kind string, obj model.Object, ns string, sel labels.Selector, fields []FieldRequirement) bool {
	m := obj.GetObjectMeta()
	if ns != "" && m.Namespace != ns {
		return false
	}
	if sel != nil && !sel.Matches(m.Labels) {
		return false
	}
	return len(fields) == 0 || MatchFields(kind, obj, fields)
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && c != '-' && c != '.' {
			return false
		}
		if (i == 0 || i == len(s)-1) && !alnum {
			return false
		}
	}
	return true
}

func validNamespace(s string) bool {
	return len(s) <= 63 && validName(s) && !strings.Contains(s, ".")
}

// CheckKind returns an error wrapping ErrInvalid unless kind is a stored kind.
func CheckKind(kind string) error {
	switch kind {
	case model.KindHardware, model.KindTemplate, model.KindWorkflow, model.KindBootProfile,
		model.KindMachine, model.KindJob, model.KindTask, model.KindSecret, model.KindWorkflowRuleSet:
		return nil
	}
	return fmt.Errorf("unknown kind %q: %w", kind, ErrInvalid)
}

// CheckKey checks a key's kind, namespace (a DNS-1123 label) and name (a
// DNS-1123 subdomain), as Kubernetes does, with an error wrapping ErrInvalid.
func CheckKey(kind, namespace, name string) error {
	if err := CheckKind(kind); err != nil {
		return err
	}
	if !validNamespace(namespace) {
		return fmt.Errorf("%s %s/%s: namespace %q is not a DNS-1123 label: %w", kind, namespace, name, namespace, ErrInvalid)
	}
	if !validName(name) {
		return fmt.Errorf("%s %s/%s: name %q is not a DNS-1123 subdomain: %w", kind, namespace, name, name, ErrInvalid)
	}
	return nil
}

// StatusIsZero reports whether obj's status encodes to an empty JSON object.
func StatusIsZero(obj model.Object) bool {
	var st any
	switch o := obj.(type) {
	case *model.Hardware:
		st = &o.Status
	case *model.Template:
		st = &o.Status
	case *model.Workflow:
		st = &o.Status
	case *model.BootProfile:
		st = &o.Status
	case *model.Machine:
		st = &o.Status
	case *model.Job:
		st = &o.Status
	case *model.BMCTask:
		st = &o.Status
	case *model.WorkflowRuleSet:
		st = &o.Status
	case *model.Secret:
		return true // no status to keep
	}
	b, err := json.Marshal(st)
	return err == nil && string(b) == "{}"
}

// CopyStatus sets dst's status to src's (both of the same kind). The status
// is shared with src, which is a cached object nobody modifies.
func CopyStatus(dst, src model.Object) {
	switch d := dst.(type) {
	case *model.Hardware:
		d.Status = src.(*model.Hardware).Status
	case *model.Template:
		d.Status = src.(*model.Template).Status
	case *model.Workflow:
		d.Status = src.(*model.Workflow).Status
	case *model.BootProfile:
		d.Status = src.(*model.BootProfile).Status
	case *model.Machine:
		d.Status = src.(*model.Machine).Status
	case *model.Job:
		d.Status = src.(*model.Job).Status
	case *model.BMCTask:
		d.Status = src.(*model.BMCTask).Status
	case *model.WorkflowRuleSet:
		d.Status = src.(*model.WorkflowRuleSet).Status
	}
}

// ParseResourceVersion reads a resourceVersion: a decimal revision that
// grows with every write (a bbolt revision, an etcd revision), or an error
// wrapping ErrInvalid.
func ParseResourceVersion(rv string) (uint64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not a decimal revision: %w", rv, ErrInvalid)
	}
	return n, nil
}
