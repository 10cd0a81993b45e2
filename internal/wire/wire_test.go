package wire

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

// msg is a resource message built from parts, as internal/api's kind
// adapters build the real ones.
type msg struct{ Parts }

func (m msg) GetApiVersion() string       { return m.APIVersion }
func (m msg) GetKind() string             { return m.Kind }
func (m msg) GetMetadata() *v1.ObjectMeta { return m.Meta }
func (m msg) GetSpec() *structpb.Struct   { return m.Spec }
func (m msg) GetStatus() *structpb.Struct { return m.Status }

func toJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return string(b)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRoundTrip sends the model's sample manifests (every kind a
// resource message carries) through ToParts and Decode, with metadata the
// store sets and a status, and wants them back unchanged.
func TestRoundTrip(t *testing.T) {
	files, err := filepath.Glob("../model/testdata/*.yaml")
	must(t, err)
	more, err := filepath.Glob("../model/testdata/rufio/*.yaml")
	must(t, err)
	kinds := map[string]bool{}
	created := time.Date(2026, 11, 27, 20, 0, 0, 123456789, time.UTC)
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		must(t, err)
		res, err := model.ParseManifests(f, data)
		must(t, err)
		for _, d := range res.Docs {
			obj := d.Object
			kind := model.KindOf(obj)
			if kind == model.KindSecret {
				continue // Secrets travel as CredentialSecret, redacted
			}
			kinds[kind] = true
			meta := obj.GetObjectMeta()
			meta.UID, meta.ResourceVersion, meta.Generation, meta.CreationTimestamp = "u-1", "42", 3, &created
			if wf, ok := obj.(*model.Workflow); ok {
				wf.Status.State = model.StateRunning
				wf.Status.Conditions = []model.Condition{{Type: model.WorkflowConditionWaiting, Status: "True", Message: "wf-a is active"}}
			}
			p, err := ToParts(obj)
			must(t, err)
			if p.Kind != kind || p.APIVersion != model.APIVersionOf(kind) {
				t.Errorf("%s: parts say %s %s", f, p.APIVersion, p.Kind)
			}
			back, err := Decode(kind, msg{p})
			must(t, err)
			if got, want := toJSON(t, back), toJSON(t, obj); got != want {
				t.Errorf("%s %s/%s changed on the wire:\n got %s\nwant %s", kind, meta.Namespace, meta.Name, got, want)
			}
		}
	}
	for _, k := range []string{model.KindHardware, model.KindWorkflow, model.KindMachine, model.KindJob} {
		if !kinds[k] {
			t.Errorf("no sample %s in the model's testdata", k)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	spec := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		must(t, err)
		return s
	}
	meta := &v1.ObjectMeta{Name: "n1"}
	for _, tc := range []struct {
		name, kind string
		m          Message
		want       string
	}{
		{"no message", model.KindHardware, nil, "missing Hardware"},
		{"other kind", model.KindHardware, msg{Parts{Kind: model.KindWorkflow, Meta: meta}}, `kind "Workflow" in a Hardware request`},
		{"other group", model.KindHardware, msg{Parts{APIVersion: "bmc.tinkerbell.org/v1alpha1", Meta: meta}}, `apiVersion "bmc.tinkerbell.org/v1alpha1" is not "tinkerbell.org/v1alpha1"`},
		{"unknown kind", "Gadget", msg{Parts{Meta: meta}}, `unknown kind "Gadget"`},
		{"unknown spec field", model.KindHardware, msg{Parts{Meta: meta, Spec: spec(map[string]any{"colour": "red"})}}, `Hardware default/n1: spec: json: unknown field "colour"`},
		{"unknown status field", model.KindWorkflow, msg{Parts{Meta: meta, Status: spec(map[string]any{"mood": "calm"})}}, `Workflow default/n1: status: json: unknown field "mood"`},
		{"wrong type", model.KindWorkflow, msg{Parts{Meta: meta, Spec: spec(map[string]any{"hardwareRef": 7.0})}}, "Workflow default/n1: spec: json: cannot unmarshal number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.kind, tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestDecodeDefaults: an empty namespace is the default one, TypeMeta is
// the kind's whatever the message said, and a message without spec or
// status decodes to the zero ones.
func TestDecodeDefaults(t *testing.T) {
	o, err := Decode(model.KindHardware, msg{Parts{Meta: &v1.ObjectMeta{Name: "n1", Labels: map[string]string{}}}})
	must(t, err)
	hw := o.(*model.Hardware)
	if hw.Namespace != model.DefaultNamespace || hw.Name != "n1" {
		t.Errorf("metadata = %+v", hw.ObjectMeta)
	}
	if hw.Kind != model.KindHardware || hw.APIVersion != model.APIVersionOf(model.KindHardware) {
		t.Errorf("type = %+v", hw.TypeMeta)
	}
	if hw.Labels != nil {
		t.Errorf("empty labels decoded to %#v; want nil", hw.Labels)
	}
	if got := MetaFromProto(nil); got.Name != "" || got.CreationTimestamp != nil {
		t.Errorf("MetaFromProto(nil) = %+v", got)
	}
}

// FuzzDecode feeds Decode arbitrary spec and status objects for each
// kind: it must not panic, and what it accepts must survive ToParts and
// Decode again unchanged (the server answers with what it read).
func FuzzDecode(f *testing.F) {
	f.Add(uint8(0), []byte(`{"interfaces":[{"dhcp":{"mac":"3c:ec:ef:12:34:07","ip":{"address":"10.0.0.7"}}}]}`), []byte(`{}`))
	f.Add(uint8(2), []byte(`{"templateRef":"t","hardwareRef":"h","hardwareMap":{"device_1":"x"}}`), []byte(`{"state":"STATE_RUNNING","conditions":[{"type":"Waiting","status":"True"}]}`))
	f.Add(uint8(5), []byte(`{"machineRef":{"name":"m"},"tasks":[{"powerAction":"off"}]}`), []byte(`{"conditions":[{"type":"Running","status":"True"}]}`))
	f.Add(uint8(1), []byte(`{"data":"version: \"0.1\""}`), []byte(`null`))
	kinds := []string{}
	for _, k := range model.Kinds {
		if k != model.KindSecret {
			kinds = append(kinds, k)
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, specJSON, statusJSON []byte) {
		kind := kinds[int(k)%len(kinds)]
		var p Parts
		for _, part := range []struct {
			in  []byte
			out **structpb.Struct
		}{{specJSON, &p.Spec}, {statusJSON, &p.Status}} {
			var m map[string]any
			if json.Unmarshal(part.in, &m) != nil || m == nil {
				continue
			}
			s, err := structpb.NewStruct(m)
			if err != nil {
				return
			}
			*part.out = s
		}
		p.Meta = &v1.ObjectMeta{Name: "n1"}
		obj, err := Decode(kind, msg{p})
		if err != nil {
			return
		}
		again, err := ToParts(obj)
		if err != nil {
			t.Fatalf("Decode accepted %s spec %s status %s, ToParts refused it: %v", kind, specJSON, statusJSON, err)
		}
		back, err := Decode(kind, msg{again})
		if err != nil {
			t.Fatalf("Decode accepted %s spec %s status %s, not its own encoding: %v", kind, specJSON, statusJSON, err)
		}
		if got, want := toJSON(t, back), toJSON(t, obj); got != want {
			t.Fatalf("%s changed on the second trip:\n got %s\nwant %s", kind, got, want)
		}
	})
}

// TestOptionalFields: times and progress cross the wire both ways, and
// an absent one stays absent rather than becoming a zero value (the CLI
// prints "-" for a time that is not there, not 1970).
func TestOptionalFields(t *testing.T) {
	if TimeToProto(nil) != nil || TimeFromProto(nil) != nil || ProgressToProto(nil) != nil || ProgressFromProto(nil) != nil {
		t.Error("nil did not stay nil")
	}
	at := time.Date(2026, 11, 27, 20, 0, 0, 5, time.UTC)
	if got := TimeFromProto(TimeToProto(&at)); got == nil || !got.Equal(at) {
		t.Errorf("time came back as %v; want %v", got, at)
	}
	p := &model.Progress{Bytes: 1 << 40, TotalBytes: 3 << 40, BytesPerSec: 125_000_000, Percent: 33.3}
	if got := ProgressFromProto(ProgressToProto(p)); got == nil || *got != *p {
		t.Errorf("progress came back as %+v; want %+v", got, p)
	}
}
