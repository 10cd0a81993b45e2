package model

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/rulepattern"
)

// KindWorkflowRuleSet is Tinkerbell's auto-enrolment rule kind.
const KindWorkflowRuleSet = "WorkflowRuleSet"

// LabelDiscovered marks a Hardware that Anvil created for a machine it did
// not know (discovery): such a Hardware, once its agent has reported
// attributes and while it has no workflow, is what a WorkflowRuleSet
// enrols.
const LabelDiscovered = "anvil.io/discovered"

// AnnotationEnrolledBy, on a Workflow an enrolment created and on its
// Hardware, names the rule that matched: "<namespace>/<rule set>#rules[<i>]"
// ("#selector" when the rule set has no rules and its selector matched).
const AnnotationEnrolledBy = "anvil.dev/enrolled-by"

// DefaultAgentValue is the hardware map key that gets the machine's first
// MAC when a rule set's spec.workflow.template.agentValue is empty: the
// worker of Tinkerbell's example templates ({{.device_1}}).
const DefaultAgentValue = "device_1"

// WorkflowRuleSet (tinkerbell.org/v1alpha1) creates a Workflow for a machine
// whose agent attributes match one of its rules. The fields are
// Tinkerbell's; Selector and Priority are Anvil's.
type WorkflowRuleSet struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       WorkflowRuleSetSpec   `json:"spec,omitempty"`
	Status     WorkflowRuleSetStatus `json:"status,omitempty"`
}

// WorkflowRuleSetSpec is the rules and the workflow they create.
type WorkflowRuleSetSpec struct {
	// Rules are JSON patterns (internal/rulepattern) tested against the
	// Hardware's status.attributes; any one matching is enough (OR).
	Rules []string `json:"rules,omitempty"`
	// Workflow is the Workflow created on a match.
	Workflow WorkflowRuleSetWorkflow `json:"workflow,omitempty"`

	// Selector is a list of label selector terms (BootProfile's syntax)
	// the Hardware's labels must also match: any term (OR); AND with the
	// rules. Empty: no label condition. Anvil's.
	Selector []string `json:"selector,omitempty"`
	// Priority orders the rule sets of a namespace: the highest is tried
	// first; equal priorities go by name. Anvil's (Tinkerbell has no
	// order).
	Priority int64 `json:"priority,omitempty"`
}

// WorkflowRuleSetWorkflow configures the created Workflow.
type WorkflowRuleSetWorkflow struct {
	// Disabled creates the Workflow disabled (spec.disabled), for an
	// operator to look at the machine first.
	Disabled *bool `json:"disabled,omitempty"`
	// Namespace must be empty or the rule set's own: Workflows are made in
	// the rule set's namespace (Tinkerbell deprecates the field).
	Namespace string `json:"namespace,omitempty"`
	// AddAttributes copies the machine's attributes onto the Workflow as
	// the AgentAttributesAnnotation.
	AddAttributes bool `json:"addAttributes,omitempty"`
	// Template names the Template and the hardware map.
	Template WorkflowRuleSetTemplate `json:"template,omitempty"`
}

// WorkflowRuleSetTemplate is Tinkerbell's TemplateConfig.
type WorkflowRuleSetTemplate struct {
	// AgentValue is the hardware map key whose value is the machine (its
	// first MAC, Anvil's worker id). Empty: DefaultAgentValue.
	AgentValue string `json:"agentValue,omitempty"`
	// KVs are more hardware map entries, for the template's use.
	KVs map[string]string `json:"kvs,omitempty"`
	// Ref is the name of the Template, in the rule set's namespace.
	Ref string `json:"ref,omitempty"`
}

// WorkflowRuleSetStatus is empty, as Tinkerbell's.
type WorkflowRuleSetStatus struct{}

// AgentKey returns the hardware map key of the machine's MAC.
func (r *WorkflowRuleSet) AgentKey() string {
	if r.Spec.Workflow.Template.AgentValue == "" {
		return DefaultAgentValue
	}
	return r.Spec.Workflow.Template.AgentValue
}

// attributesType is the schema rules are checked against.
var attributesType = reflect.TypeOf(Attributes{})

// CompiledRules parses the rule set's rules against the Attributes schema,
// in order. The error names the first rule that does not parse.
func (r *WorkflowRuleSet) CompiledRules() ([]*rulepattern.Pattern, error) {
	out := make([]*rulepattern.Pattern, 0, len(r.Spec.Rules))
	for i, src := range r.Spec.Rules {
		p, err := rulepattern.Parse(src, attributesType)
		if err != nil {
			return nil, fmt.Errorf("spec.rules[%d]: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// SelectorTerms parses the rule set's selector terms, in order.
func (r *WorkflowRuleSet) SelectorTerms() ([]labels.Selector, error) {
	out := make([]labels.Selector, 0, len(r.Spec.Selector))
	for i, t := range r.Spec.Selector {
		s, err := parseSelectorTerm(t)
		if err != nil {
			return nil, fmt.Errorf("spec.selector[%d]: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// mapKeyRE is a hardware map key a template can name as {{.key}}.
var mapKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validateWorkflowRuleSet(r *WorkflowRuleSet, add addFunc) {
	s := &r.Spec
	if len(s.Rules) == 0 && len(s.Selector) == 0 {
		add("spec.rules", "no rules and no selector: the rule set would match no machine; add a rule such as '{\"product\": {\"vendor\": [\"Dell Inc.\"]}}'")
	}
	for i, src := range s.Rules {
		if _, err := rulepattern.Parse(src, attributesType); err != nil {
			add(fmt.Sprintf("spec.rules[%d]", i), "%v", err)
		}
	}
	for i, t := range s.Selector {
		if _, err := parseSelectorTerm(t); err != nil {
			add(fmt.Sprintf("spec.selector[%d]", i), "%v", err)
		}
	}
	w := &s.Workflow
	if w.Namespace != "" && r.Namespace != "" && w.Namespace != r.Namespace {
		add("spec.workflow.namespace", "%q: workflows are created in the rule set's own namespace (%q); leave it empty", w.Namespace, r.Namespace)
	}
	if w.Template.Ref == "" {
		add("spec.workflow.template.ref", "missing: the name of the Template the created workflow runs")
	} else if msg := checkDNSSubdomain(w.Template.Ref); msg != "" {
		add("spec.workflow.template.ref", "%q: %s", w.Template.Ref, msg)
	}
	agent := r.AgentKey()
	if !mapKeyRE.MatchString(agent) {
		add("spec.workflow.template.agentValue", "%q: a hardware map key is letters, digits and '_', not starting with a digit (templates name it as {{.%s}})", agent, strings.Trim(agent, "{}. "))
	}
	for _, k := range sortedKeys(w.Template.KVs) {
		p := "spec.workflow.template.kvs[" + k + "]"
		switch {
		case !mapKeyRE.MatchString(k):
			add(p, "%q: a hardware map key is letters, digits and '_', not starting with a digit", k)
		case k == agent:
			add(p, "%q is the agentValue key, which holds the machine's MAC; choose another key", k)
		}
	}
}
