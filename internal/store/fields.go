package store

import (
	"fmt"
	"strings"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
)

// FieldRequirement is one field-selector term: Field = Value, or != when Not.
type FieldRequirement struct {
	Field string
	Value string
	Not   bool
}

// ParseFieldSelector parses "a=b,c!=d" (also "a==b") into requirements and
// checks that each field is one FieldValue knows for kind.
func ParseFieldSelector(kind, s string) ([]FieldRequirement, error) {
	var out []FieldRequirement
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		var r FieldRequirement
		switch {
		case strings.Contains(term, "!="):
			f, v, _ := strings.Cut(term, "!=")
			r = FieldRequirement{Field: f, Value: v, Not: true}
		case strings.Contains(term, "=="):
			f, v, _ := strings.Cut(term, "==")
			r = FieldRequirement{Field: f, Value: v}
		case strings.Contains(term, "="):
			f, v, _ := strings.Cut(term, "=")
			r = FieldRequirement{Field: f, Value: v}
		default:
			return nil, fmt.Errorf("field selector %q: want field=value or field!=value", term)
		}
		r.Field, r.Value = strings.TrimSpace(r.Field), strings.TrimSpace(r.Value)
		if r.Field == fieldMAC {
			// The field's values are canonical (macaddr.MAC.String): so
			// is what they are compared with, however the user spells it.
			// A value that is no MAC stays as written and matches none.
			if m, err := macaddr.Parse(r.Value); err == nil {
				r.Value = m.String()
			}
		}
		if r.Field == fieldState {
			// Likewise for states: a Workflow's are normalised when it
			// is decoded, so STATE_RUNNING selects RUNNING.
			r.Value = string(model.ParseState(r.Value))
		}
		if _, ok := FieldValues(kind, nil, r.Field); !ok {
			return nil, fmt.Errorf("field selector %q: %s has no selectable field %q (have: %s)",
				term, kind, r.Field, strings.Join(SelectableFields(kind), ", "))
		}
		out = append(out, r)
	}
	return out, nil
}

// fieldMAC is the Hardware field selector of MACs.
const fieldMAC = "spec.interfaces.dhcp.mac"

// fieldState is the Workflow field selector of its state.
const fieldState = "status.state"

// selectable lists, per kind, the fields a field selector may name.
var selectable = map[string][]string{
	model.KindHardware: {"metadata.name", "metadata.namespace", fieldMAC,
		"spec.interfaces.dhcp.ip.address", "spec.metadata.instance.id", "spec.agentID", "spec.bootProfileRef.name"},
	model.KindTemplate:    {"metadata.name", "metadata.namespace"},
	model.KindBootProfile: {"metadata.name", "metadata.namespace"},
	model.KindWorkflow: {"metadata.name", "metadata.namespace", "spec.templateRef",
		"spec.hardwareRef", fieldState},
	model.KindMachine:         {"metadata.name", "metadata.namespace", "spec.connection.host"},
	model.KindJob:             {"metadata.name", "metadata.namespace", "spec.machineRef.name"},
	model.KindTask:            {"metadata.name", "metadata.namespace"},
	model.KindSecret:          {"metadata.name", "metadata.namespace"},
	model.KindWorkflowRuleSet: {"metadata.name", "metadata.namespace", "spec.workflow.template.ref"},
}

// SelectableFields lists the fields of kind a field selector may name.
func SelectableFields(kind string) []string { return selectable[kind] }

// FieldValues returns the values of a selectable field of obj (a list field
// may have several) and whether the field is selectable for kind at all. With
// obj nil it only answers the second question.
func FieldValues(kind string, obj model.Object, field string) ([]string, bool) {
	found := false
	for _, f := range selectable[kind] {
		if f == field {
			found = true
		}
	}
	if !found || obj == nil {
		return nil, found
	}
	meta := obj.GetObjectMeta()
	switch field {
	case "metadata.name":
		return []string{meta.Name}, true
	case "metadata.namespace":
		return []string{meta.Namespace}, true
	}
	switch o := obj.(type) {
	case *model.Hardware:
		switch field {
		case fieldMAC:
			return macStrings(o), true
		case "spec.interfaces.dhcp.ip.address":
			return o.IPs(), true
		case "spec.metadata.instance.id":
			return []string{o.InstanceID()}, true
		case "spec.agentID":
			return []string{o.Spec.AgentID}, true
		case "spec.bootProfileRef.name":
			if r := o.Spec.BootProfileRef; r != nil {
				return []string{r.Name}, true
			}
			return []string{""}, true
		}
	case *model.WorkflowRuleSet:
		if field == "spec.workflow.template.ref" {
			return []string{o.Spec.Workflow.Template.Ref}, true
		}
	case *model.Workflow:
		switch field {
		case "spec.templateRef":
			return []string{o.Spec.TemplateRef}, true
		case "spec.hardwareRef":
			return []string{o.Spec.HardwareRef}, true
		case fieldState:
			return []string{string(o.Status.State)}, true
		}
	case *model.Machine:
		if field == "spec.connection.host" {
			return []string{o.Spec.Connection.Host}, true
		}
	case *model.Job:
		if field == "spec.machineRef.name" {
			return []string{o.Spec.MachineRef.Name}, true
		}
	}
	return nil, true
}

// MatchFields reports whether obj satisfies every requirement. A list field
// matches "=" when any value equals, and "!=" when none does.
func MatchFields(kind string, obj model.Object, reqs []FieldRequirement) bool {
	for _, r := range reqs {
		vals, _ := FieldValues(kind, obj, r.Field)
		has := false
		for _, v := range vals {
			if v == r.Value {
				has = true
				break
			}
		}
		if has == r.Not {
			return false
		}
	}
	return true
}

// macStrings returns hw's MACs as the index and the field selector hold
// them: canonical text.
func macStrings(hw *model.Hardware) []string {
	macs := hw.MACs()
	out := make([]string, len(macs))
	for i, m := range macs {
		out[i] = m.String()
	}
	return out
}

// IndexValues returns the values obj holds in the named index, and whether
// the index exists for its kind. Store implementations maintain their
// indexes with it so that every store indexes the same way.
func IndexValues(obj model.Object, index string) ([]string, bool) {
	switch o := obj.(type) {
	case *model.Hardware:
		switch index {
		case IndexMAC:
			return macStrings(o), true
		case IndexIP:
			return o.IPs(), true
		case IndexAgentID:
			return o.AgentIDs(), true
		case IndexInstanceID:
			if id := o.InstanceID(); id != "" {
				return []string{id}, true
			}
			return nil, true
		}
	case *model.Workflow:
		switch index {
		case IndexHardwareRef:
			if o.Spec.HardwareRef != "" {
				return []string{o.Spec.HardwareRef}, true
			}
			return nil, true
		case IndexAgentID:
			var out []string
			seen := map[string]bool{}
			for _, t := range o.Status.Tasks {
				if t.AgentID != "" && !seen[t.AgentID] {
					seen[t.AgentID] = true
					out = append(out, t.AgentID)
				}
			}
			return out, true
		}
	}
	return nil, false
}

// Indexes lists the index names of kind.
func Indexes(kind string) []string {
	switch kind {
	case model.KindHardware:
		return []string{IndexMAC, IndexIP, IndexAgentID, IndexInstanceID}
	case model.KindWorkflow:
		return []string{IndexHardwareRef, IndexAgentID}
	}
	return nil
}
