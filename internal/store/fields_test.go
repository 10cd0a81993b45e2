package store

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

func TestParseFieldSelector(t *testing.T) {
	for _, tc := range []struct {
		kind, in string
		want     []FieldRequirement
	}{
		{model.KindHardware, "", nil},
		{model.KindHardware, "  ", nil},
		{model.KindHardware, "metadata.name=m1", []FieldRequirement{{Field: "metadata.name", Value: "m1"}}},
		{model.KindHardware, "metadata.name==m1", []FieldRequirement{{Field: "metadata.name", Value: "m1"}}},
		{model.KindHardware, " metadata.name != m1 ", []FieldRequirement{{Field: "metadata.name", Value: "m1", Not: true}}},
		{model.KindHardware, "metadata.namespace=", []FieldRequirement{{Field: "metadata.namespace"}}},
		{model.KindHardware, "spec.interfaces.dhcp.mac=aa:bb:cc:dd:ee:ff,spec.agentID!=x", []FieldRequirement{
			{Field: "spec.interfaces.dhcp.mac", Value: "aa:bb:cc:dd:ee:ff"},
			{Field: "spec.agentID", Value: "x", Not: true},
		}},
		{model.KindWorkflow, "status.state=RUNNING,spec.hardwareRef=m1,spec.templateRef!=t", []FieldRequirement{
			{Field: "status.state", Value: "RUNNING"},
			{Field: "spec.hardwareRef", Value: "m1"},
			{Field: "spec.templateRef", Value: "t", Not: true},
		}},
		{model.KindTemplate, "metadata.name=t", []FieldRequirement{{Field: "metadata.name", Value: "t"}}},
		// Values are read as the field's values are held: a MAC in any
		// spelling, a state in Tinkerbell's older one.
		{model.KindHardware, "spec.interfaces.dhcp.mac=AA-BB-CC-DD-EE-FF", []FieldRequirement{
			{Field: "spec.interfaces.dhcp.mac", Value: "aa:bb:cc:dd:ee:ff"}}},
		{model.KindWorkflow, "status.state=STATE_RUNNING", []FieldRequirement{{Field: "status.state", Value: "RUNNING"}}},
	} {
		got, err := ParseFieldSelector(tc.kind, tc.in)
		if err != nil {
			t.Errorf("ParseFieldSelector(%s, %q): %v", tc.kind, tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFieldSelector(%s, %q) = %+v, want %+v", tc.kind, tc.in, got, tc.want)
		}
	}
}

func TestParseFieldSelectorErrors(t *testing.T) {
	for _, tc := range []struct{ kind, in, wantInErr string }{
		{model.KindHardware, "metadata.name", "want field=value"},
		{model.KindHardware, "metadata.name=a,", "want field=value"},
		{model.KindHardware, "spec.nope=a", "no selectable field"},
		{model.KindTemplate, "spec.hardwareRef=m1", "no selectable field"},
		{model.KindHardware, "status.state=x", "no selectable field"},
		{"Unknown", "metadata.name=a", "no selectable field"},
		{model.KindWorkflow, "=x", "no selectable field"},
	} {
		_, err := ParseFieldSelector(tc.kind, tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("ParseFieldSelector(%s, %q) error %v, want one containing %q", tc.kind, tc.in, err, tc.wantInErr)
		}
	}
	_, err := ParseFieldSelector(model.KindHardware, "bogus=1")
	for _, f := range SelectableFields(model.KindHardware) {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v does not list selectable field %s", err, f)
		}
	}
}

func testHardware() *model.Hardware {
	h := &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: "ns", Name: "m1"}}
	h.Spec.AgentID = "agent-1"
	h.Spec.Interfaces = []model.Interface{
		{DHCP: &model.DHCP{MAC: "AA:BB:CC:DD:EE:01", IP: &model.IP{Address: "10.0.0.1"}}},
		{DHCP: &model.DHCP{MAC: "aabb.ccdd.ee02"}},
		{Netboot: &model.Netboot{}},
	}
	h.Spec.Metadata = &model.HardwareMetadata{Instance: &model.MetadataInstance{ID: "inst-1"}}
	return h
}

func testWorkflow() *model.Workflow {
	w := &model.Workflow{ObjectMeta: model.ObjectMeta{Namespace: "ns", Name: "w1"}}
	w.Spec.HardwareRef = "m1"
	w.Spec.TemplateRef = "t1"
	w.Status.State = model.StateRunning
	w.Status.Tasks = []model.Task{{AgentID: "a1"}, {AgentID: ""}, {AgentID: "a2"}, {AgentID: "a1"}}
	return w
}

func TestMatchFields(t *testing.T) {
	h, w := testHardware(), testWorkflow()
	tpl := &model.Template{ObjectMeta: model.ObjectMeta{Namespace: "ns", Name: "t1"}}
	for _, tc := range []struct {
		kind string
		obj  model.Object
		sel  string
		want bool
	}{
		{model.KindHardware, h, "", true},
		{model.KindHardware, h, "metadata.name=m1", true},
		{model.KindHardware, h, "metadata.name=m2", false},
		{model.KindHardware, h, "metadata.name!=m2", true},
		{model.KindHardware, h, "metadata.namespace=ns,metadata.name=m1", true},
		{model.KindHardware, h, "metadata.namespace=ns,metadata.name=m2", false},
		// List fields: = if any value equals, != if none does.
		{model.KindHardware, h, "spec.interfaces.dhcp.mac=aa:bb:cc:dd:ee:01", true}, // lower-cased
		// The selector's MAC is canonicalised too, in any spelling.
		{model.KindHardware, h, "spec.interfaces.dhcp.mac=AA-BB-CC-DD-EE-01", true},
		{model.KindHardware, h, "spec.interfaces.dhcp.mac=aabb.ccdd.ee02", true},
		{model.KindHardware, h, "spec.interfaces.dhcp.mac!=AABB.CCDD.EE02", false},
		{model.KindHardware, h, "spec.interfaces.dhcp.mac=aa:bb:cc:dd:ee:02", true},
		{model.KindHardware, h, "spec.interfaces.dhcp.mac!=aa:bb:cc:dd:ee:02", false},
		{model.KindHardware, h, "spec.interfaces.dhcp.mac!=ff:ff:ff:ff:ff:ff", true},
		{model.KindHardware, h, "spec.interfaces.dhcp.ip.address=10.0.0.1", true},
		{model.KindHardware, h, "spec.interfaces.dhcp.ip.address=10.0.0.2", false},
		{model.KindHardware, h, "spec.metadata.instance.id=inst-1", true},
		{model.KindHardware, h, "spec.agentID=agent-1", true},
		{model.KindHardware, &model.Hardware{}, "spec.metadata.instance.id=", true},
		{model.KindHardware, &model.Hardware{}, "spec.interfaces.dhcp.mac!=x", true},
		{model.KindHardware, &model.Hardware{}, "spec.interfaces.dhcp.mac=", false},
		{model.KindWorkflow, w, "spec.hardwareRef=m1,spec.templateRef=t1,status.state=RUNNING", true},
		{model.KindWorkflow, w, "status.state!=RUNNING", false},
		{model.KindTemplate, tpl, "metadata.name=t1", true},
	} {
		reqs, err := ParseFieldSelector(tc.kind, tc.sel)
		if err != nil {
			t.Fatalf("ParseFieldSelector(%q): %v", tc.sel, err)
		}
		if got := MatchFields(tc.kind, tc.obj, reqs); got != tc.want {
			t.Errorf("MatchFields(%s, %q) = %v, want %v", tc.kind, tc.sel, got, tc.want)
		}
	}
}

func TestFieldValues(t *testing.T) {
	if _, ok := FieldValues(model.KindHardware, nil, "spec.agentID"); !ok {
		t.Error("spec.agentID not selectable for Hardware")
	}
	if _, ok := FieldValues(model.KindTemplate, nil, "spec.agentID"); ok {
		t.Error("spec.agentID selectable for Template")
	}
	// Every selectable field answers for an object of its kind.
	objs := map[string]model.Object{
		model.KindHardware: testHardware(),
		model.KindWorkflow: testWorkflow(),
		model.KindTemplate: &model.Template{ObjectMeta: model.ObjectMeta{Name: "t"}},
	}
	for kind, obj := range objs {
		for _, f := range SelectableFields(kind) {
			vals, ok := FieldValues(kind, obj, f)
			if !ok || len(vals) == 0 {
				t.Errorf("FieldValues(%s, %s) = %v, %v", kind, f, vals, ok)
			}
		}
	}
}

func TestIndexValues(t *testing.T) {
	h, w := testHardware(), testWorkflow()
	for _, tc := range []struct {
		obj   model.Object
		index string
		want  []string
		ok    bool
	}{
		{h, IndexMAC, []string{"aa:bb:cc:dd:ee:01", "aa:bb:cc:dd:ee:02"}, true},
		{h, IndexIP, []string{"10.0.0.1"}, true},
		{h, IndexAgentID, []string{"agent-1", "aa:bb:cc:dd:ee:01"}, true},
		{h, IndexInstanceID, []string{"inst-1"}, true},
		{h, IndexHardwareRef, nil, false},
		{&model.Hardware{}, IndexInstanceID, nil, true},
		{&model.Hardware{}, IndexMAC, nil, true},
		{w, IndexHardwareRef, []string{"m1"}, true},
		{w, IndexAgentID, []string{"a1", "a2"}, true}, // deduplicated, empty skipped, in order
		{w, IndexMAC, nil, false},
		{&model.Workflow{}, IndexHardwareRef, nil, true},
		{&model.Template{}, IndexAgentID, nil, false},
	} {
		got, ok := IndexValues(tc.obj, tc.index)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("IndexValues(%T, %s) = %q, %v; want %q, %v", tc.obj, tc.index, got, ok, tc.want, tc.ok)
		}
	}
	// AgentIDs does not repeat the MAC when it is also spec.agentID.
	h2 := testHardware()
	h2.Spec.AgentID = "aa:bb:cc:dd:ee:01"
	if got, _ := IndexValues(h2, IndexAgentID); !slices.Equal(got, []string{"aa:bb:cc:dd:ee:01"}) {
		t.Errorf("agentID index with agentID = first MAC: %q", got)
	}
	// Every index Indexes names exists, for objects of that kind.
	for kind, obj := range map[string]model.Object{model.KindHardware: h, model.KindWorkflow: w, model.KindTemplate: &model.Template{}} {
		for _, ix := range Indexes(kind) {
			if _, ok := IndexValues(obj, ix); !ok {
				t.Errorf("Indexes(%s) names %s, which IndexValues does not know", kind, ix)
			}
		}
	}
	if len(Indexes(model.KindTemplate)) != 0 {
		t.Errorf("Template has indexes %v", Indexes(model.KindTemplate))
	}
}
