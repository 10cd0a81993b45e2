package model

import (
	"strings"
	"testing"
)

// TestParseWorkflowRuleSet: Tinkerbell's shape decodes with its field
// names, Anvil's extras beside them.
func TestParseWorkflowRuleSet(t *testing.T) {
	const in = `apiVersion: tinkerbell.org/v1alpha1
kind: WorkflowRuleSet
metadata: {name: dell, namespace: lab}
spec:
  rules: ['{"product": {"vendor": ["Dell Inc."]}}']
  workflow:
    disabled: true
    namespace: lab
    addAttributes: true
    template: {ref: debian-raw, agentValue: worker, kvs: {os: debian}}
  selector: [site=lab]
  priority: 5
`
	res, err := ParseManifests("f.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("warnings: %q", res.Warnings)
	}
	r, ok := res.Docs[0].Object.(*WorkflowRuleSet)
	if !ok {
		t.Fatalf("document is %T; want *WorkflowRuleSet", res.Docs[0].Object)
	}
	w := r.Spec.Workflow
	if r.APIVersion != APIVersion || r.Spec.Priority != 5 || len(r.Spec.Rules) != 1 || !BoolValue(w.Disabled, false) ||
		!w.AddAttributes || w.Template.Ref != "debian-raw" || w.Template.KVs["os"] != "debian" || r.AgentKey() != "worker" {
		t.Errorf("decoded %+v", r)
	}
	if KindOf(r) != KindWorkflowRuleSet {
		t.Errorf("KindOf = %q", KindOf(r))
	}
	for _, s := range []string{"wrs", "workflowrulesets", "WorkflowRuleSet"} {
		if k, err := ParseKind(s); err != nil || k != KindWorkflowRuleSet {
			t.Errorf("ParseKind(%q) = %q, %v", s, k, err)
		}
	}
	if (&WorkflowRuleSet{}).AgentKey() != DefaultAgentValue {
		t.Error("an empty agentValue is not device_1")
	}
}

func TestWorkflowRuleSetErrors(t *testing.T) {
	const head = "apiVersion: tinkerbell.org/v1alpha1\nkind: WorkflowRuleSet\nmetadata: {name: r, namespace: lab}\nspec:\n"
	const tpl = "  workflow: {template: {ref: t}}\n"
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"nothing to match", head + tpl, []string{"spec.rules", "would match no machine"}},
		{"unknown attribute", head + tpl + "  rules: ['{\"chassis\": {\"manufacturer\": [\"Dell Inc.\"]}}']\n",
			[]string{"f.yaml:6:", "spec.rules[0]", `chassis.manufacturer: unknown attribute "manufacturer" (chassis has: serial, vendor)`}},
		{"second rule bad", head + tpl + "  rules: ['{\"product\": {\"vendor\": [\"x\"]}}', '{\"product\": {\"vendor\": [{\"regex\": \"x\"}]}}']\n",
			[]string{"spec.rules[1]", `unknown operator "regex"`}},
		{"not JSON", head + tpl + "  rules: ['product.vendor = Dell']\n", []string{"spec.rules[0]", "not JSON"}},
		{"bad selector", head + tpl + "  selector: ['site in (a']\n", []string{"spec.selector[0]"}},
		{"no template", head + "  rules: ['{\"product\": {\"vendor\": [\"x\"]}}']\n", []string{"spec.workflow.template.ref", "missing"}},
		{"bad template name", head + "  rules: ['{\"product\": {\"vendor\": [\"x\"]}}']\n  workflow: {template: {ref: Debian_Raw}}\n",
			[]string{"spec.workflow.template.ref", `"Debian_Raw"`}},
		{"other namespace", head + "  rules: ['{\"product\": {\"vendor\": [\"x\"]}}']\n  workflow: {namespace: prod, template: {ref: t}}\n",
			[]string{"spec.workflow.namespace", `"prod"`, "own namespace"}},
		{"agentValue not a key", head + "  rules: ['{\"product\": {\"vendor\": [\"x\"]}}']\n  workflow: {template: {ref: t, agentValue: \"{{.device_1}}\"}}\n",
			[]string{"spec.workflow.template.agentValue", "{{.device_1}}"}},
		{"kvs hide the machine", head + "  rules: ['{\"product\": {\"vendor\": [\"x\"]}}']\n  workflow: {template: {ref: t, kvs: {device_1: x}}}\n",
			[]string{"spec.workflow.template.kvs[device_1]", "agentValue"}},
		{"anvil group", "apiVersion: anvil.dev/v1alpha1\nkind: WorkflowRuleSet\nmetadata: {name: r}\nspec: {}\n", []string{"apiVersion", "tinkerbell.org/v1alpha1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifests("f.yaml", []byte(tc.in))
			if err == nil {
				t.Fatalf("ParseManifests succeeded; want an error containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
