package enroll

import (
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

func ruleSet(ns, name string, prio int64, selector []string, rules ...string) *model.WorkflowRuleSet {
	return &model.WorkflowRuleSet{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindWorkflowRuleSet},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec: model.WorkflowRuleSetSpec{Rules: rules, Selector: selector, Priority: prio,
			Workflow: model.WorkflowRuleSetWorkflow{Template: model.WorkflowRuleSetTemplate{Ref: "install"}}},
	}
}

func dellHardware(ns, name string, lbls map[string]string) *model.Hardware {
	hw := &model.Hardware{
		TypeMeta:   model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindHardware},
		ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Spec:       model.HardwareSpec{Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: "52:54:00:00:00:07"}}}},
	}
	hw.Status.Attributes = &model.Attributes{
		Product:           &model.Product{Vendor: "Dell Inc.", Name: "PowerEdge R650", SerialNumber: "7B60007P"},
		BlockDevices:      []model.BlockDevice{{Name: "sda", Model: "MZ7LH960", DriveType: "SSD"}, {Name: "sdb", Model: "ST4000NM", DriveType: "HDD"}},
		NetworkInterfaces: []model.NetworkInterface{{Name: "eno1", MAC: "52:54:00:00:00:07"}},
		Anvil:             &model.AnvilAttributes{Firmware: "uefi", MemoryBytes: 64 << 30},
	}
	return hw
}

const (
	ruleDell    = `{"product": {"vendor": ["Dell Inc."]}}`
	ruleHPE     = `{"product": {"vendor": ["HPE"]}}`
	ruleUEFI    = `{"anvil": {"firmware": ["uefi"]}}`
	ruleHDD     = `{"blockDevices": {"driveType": ["HDD"], "model": [{"prefix": "ST"}]}}`
	ruleMixed   = `{"blockDevices": {"driveType": ["HDD"], "model": [{"prefix": "MZ"}]}}`
	ruleMemory  = `{"anvil": {"memoryBytes": [68719476736]}}`
	ruleNICMAC  = `{"networkInterfaces": {"mac": ["52:54:00:00:00:07"]}}`
	ruleNoSuchS = `{"product": {"serialNumber": ["nope"]}}`
)

func TestDecide(t *testing.T) {
	lab := map[string]string{model.LabelDiscovered: "true", "site": "lab"}
	for _, tc := range []struct {
		name   string
		sets   []*model.WorkflowRuleSet
		hw     *model.Hardware
		want   string   // the winning rule, "" for none
		also   []string // the others that matched
		broken int
	}{
		{name: "product vendor", sets: []*model.WorkflowRuleSet{ruleSet("default", "dell", 0, nil, ruleDell)},
			hw: dellHardware("default", "m1", lab), want: "default/dell#rules[0]"},
		{name: "no rule matches", sets: []*model.WorkflowRuleSet{ruleSet("default", "hpe", 0, nil, ruleHPE, ruleNoSuchS)},
			hw: dellHardware("default", "m1", lab), want: ""},
		{name: "no rule sets", hw: dellHardware("default", "m1", lab), want: ""},
		{name: "second rule of a set", sets: []*model.WorkflowRuleSet{ruleSet("default", "s", 0, nil, ruleHPE, ruleMemory)},
			hw: dellHardware("default", "m1", lab), want: "default/s#rules[1]"},
		{name: "disk of one element", sets: []*model.WorkflowRuleSet{ruleSet("default", "s", 0, nil, ruleMixed, ruleHDD)},
			hw: dellHardware("default", "m1", lab), want: "default/s#rules[1]"},
		{name: "nic mac", sets: []*model.WorkflowRuleSet{ruleSet("default", "s", 0, nil, ruleNICMAC)},
			hw: dellHardware("default", "m1", lab), want: "default/s#rules[0]"},
		{name: "other namespace's rule sets do not apply", sets: []*model.WorkflowRuleSet{ruleSet("other", "dell", 0, nil, ruleDell)},
			hw: dellHardware("default", "m1", lab), want: ""},
		{name: "selector matches", sets: []*model.WorkflowRuleSet{ruleSet("default", "dell", 0, []string{"site=lab"}, ruleDell)},
			hw: dellHardware("default", "m1", lab), want: "default/dell#rules[0]"},
		{name: "selector does not match", sets: []*model.WorkflowRuleSet{ruleSet("default", "dell", 0, []string{"site=dc2"}, ruleDell)},
			hw: dellHardware("default", "m1", lab), want: ""},
		{name: "selector alone", sets: []*model.WorkflowRuleSet{ruleSet("default", "lab", 0, []string{"site in (lab,dc2)"})},
			hw: dellHardware("default", "m1", lab), want: "default/lab#selector"},
		{name: "selector terms are OR", sets: []*model.WorkflowRuleSet{ruleSet("default", "lab", 0, []string{"site=dc2", "site=lab"}, ruleDell)},
			hw: dellHardware("default", "m1", lab), want: "default/lab#rules[0]"},
		{name: "higher priority first", sets: []*model.WorkflowRuleSet{
			ruleSet("default", "a-generic", 0, nil, ruleUEFI), ruleSet("default", "z-dell", 10, nil, ruleDell)},
			hw: dellHardware("default", "m1", lab), want: "default/z-dell#rules[0]", also: []string{"default/a-generic#rules[0]"}},
		{name: "equal priority: by name", sets: []*model.WorkflowRuleSet{
			ruleSet("default", "b", 5, nil, ruleDell), ruleSet("default", "a", 5, nil, ruleUEFI)},
			hw: dellHardware("default", "m1", lab), want: "default/a#rules[0]", also: []string{"default/b#rules[0]"}},
		{name: "two rules of one set", sets: []*model.WorkflowRuleSet{ruleSet("default", "s", 0, nil, ruleUEFI, ruleHPE, ruleDell)},
			hw: dellHardware("default", "m1", lab), want: "default/s#rules[0]", also: []string{"default/s#rules[2]"}},
		{name: "broken rule set skipped and reported", sets: []*model.WorkflowRuleSet{
			ruleSet("default", "a", 0, nil, `{"chassis": {"manufacturer": ["Dell Inc."]}}`), ruleSet("default", "b", 0, nil, ruleDell)},
			hw: dellHardware("default", "m1", lab), want: "default/b#rules[0]", broken: 1},
		{name: "no attributes: patterns do not match", sets: []*model.WorkflowRuleSet{ruleSet("default", "s", 0, nil, `{"anvil": {"tpm": [{"exists": false}]}}`)},
			hw: func() *model.Hardware { h := dellHardware("default", "m1", lab); h.Status.Attributes = nil; return h }(), want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The order of the input never matters.
			for _, sets := range [][]*model.WorkflowRuleSet{tc.sets, reversed(tc.sets)} {
				d, err := NewBook(sets).Decide(tc.hw)
				if err != nil {
					t.Fatal(err)
				}
				got := ""
				if d.Match != nil {
					got = d.Match.String()
				}
				var also []string
				for _, r := range d.Also {
					also = append(also, r.String())
				}
				if got != tc.want || !slices.Equal(also, tc.also) {
					t.Fatalf("Decide = %q also %q; want %q also %q", got, also, tc.want, tc.also)
				}
				if len(d.Broken) != tc.broken {
					t.Fatalf("Broken = %q; want %d", d.Broken, tc.broken)
				}
				if tc.broken > 0 && !strings.Contains(d.Broken[0], `unknown attribute "manufacturer"`) {
					t.Errorf("Broken[0] = %q; want it to name the unknown attribute", d.Broken[0])
				}
			}
		})
	}
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

func TestWorkflowName(t *testing.T) {
	hw := &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "discovery-4c4c4544"}}
	if got := WorkflowName(hw); got != "enroll-discovery-4c4c4544" {
		t.Errorf("WorkflowName = %q", got)
	}
	long := strings.Repeat("a", 240) + "." + strings.Repeat("b", 12)
	hw.Name = long
	a := WorkflowName(hw)
	hw.Name = long[:len(long)-1] + "c"
	b := WorkflowName(hw)
	if len(a) > 253 || a == b {
		t.Errorf("long names: %q (%d) and %q: want ≤253 and distinct", a, len(a), b)
	}
	if err := model.Validate(&model.Workflow{ObjectMeta: model.ObjectMeta{Name: a},
		Spec: model.WorkflowSpec{TemplateRef: "t", HardwareRef: "h"}}); err != nil && strings.Contains(err.Error(), "metadata.name") {
		t.Errorf("WorkflowName %q is not a valid name: %v", a, err)
	}
}
