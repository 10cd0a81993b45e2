// Package wire converts between the model's objects and the anvil.v1
// messages that carry them (typed metadata, spec and status as JSON
// objects), and the fields other messages share with the model (optional
// times, an action's progress). The server (internal/api) reads requests
// and writes answers with it, and the client commands (internal/cli)
// build requests and read answers with the same rules, without linking
// the server.
//
// It owns only the conversion. It must not import the store, the engine
// or any server package (internal/cli's dependency test holds it to that
// through the CLI), and it does not choose connect codes: its errors are
// plain, and internal/api answers them as INVALID_ARGUMENT.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

// Parts is an object in the wire's shape: the fields every resource
// message has, for building a kind's message.
type Parts struct {
	APIVersion string
	Kind       string
	Meta       *v1.ObjectMeta
	Spec       *structpb.Struct
	Status     *structpb.Struct
}

// Message is what the resource messages (Hardware, Template, Workflow,
// BootProfile, Machine, BmcJob, BmcTask) have in common, so that one
// function reads them all.
type Message interface {
	GetApiVersion() string
	GetKind() string
	GetMetadata() *v1.ObjectMeta
	GetSpec() *structpb.Struct
	GetStatus() *structpb.Struct
}

// ToParts converts a model object to its wire parts through its JSON
// encoding, so spec and status carry exactly the manifest's field names.
// Numbers travel as JSON numbers (float64): integers above 2^53 lose
// precision, which no field of the model holds in practice.
func ToParts(obj model.Object) (Parts, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return Parts{}, fmt.Errorf("encode %s: %w", model.KindOf(obj), err)
	}
	var raw struct {
		Spec   map[string]any `json:"spec"`
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Parts{}, fmt.Errorf("encode %s: %w", model.KindOf(obj), err)
	}
	p := Parts{
		APIVersion: model.APIVersionOf(model.KindOf(obj)),
		Kind:       model.KindOf(obj),
		Meta:       MetaToProto(obj.GetObjectMeta()),
	}
	if p.Spec, err = structpb.NewStruct(orEmpty(raw.Spec)); err != nil {
		return Parts{}, fmt.Errorf("encode %s spec: %w", p.Kind, err)
	}
	if len(raw.Status) > 0 {
		if p.Status, err = structpb.NewStruct(raw.Status); err != nil {
			return Parts{}, fmt.Errorf("encode %s status: %w", p.Kind, err)
		}
	}
	return p, nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// Decode converts a wire message to a model object of kind; an empty
// namespace becomes model.DefaultNamespace. It does not validate the
// object (model.Validate does). Unknown fields in spec or status are an
// error naming the field: unlike a manifest (where they are warnings), an
// API call has no channel for warnings, and silently dropping a field
// would lose what the caller meant.
func Decode(kind string, m Message) (model.Object, error) {
	if m == nil {
		return nil, fmt.Errorf("missing %s", kind)
	}
	if k := m.GetKind(); k != "" && k != kind {
		return nil, fmt.Errorf("kind %q in a %s request", k, kind)
	}
	if av := m.GetApiVersion(); av != "" && av != model.APIVersionOf(kind) {
		return nil, fmt.Errorf("apiVersion %q is not %q (the group of %s)", av, model.APIVersionOf(kind), kind)
	}
	obj, err := model.New(kind)
	if err != nil {
		return nil, err
	}
	*obj.GetObjectMeta() = MetaFromProto(m.GetMetadata())
	meta := obj.GetObjectMeta()
	if meta.Namespace == "" {
		meta.Namespace = model.DefaultNamespace
	}
	name := fmt.Sprintf("%s %s/%s", kind, meta.Namespace, meta.Name)
	for _, part := range []struct {
		field string
		s     *structpb.Struct
	}{{"spec", m.GetSpec()}, {"status", m.GetStatus()}} {
		if part.s == nil {
			continue
		}
		b, err := json.Marshal(map[string]any{part.field: part.s.AsMap()})
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", name, part.field, err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			return nil, fmt.Errorf("%s: %s: %v", name, part.field, err)
		}
	}
	// Decoding may not touch metadata, but keep TypeMeta authoritative.
	*obj.GetTypeMeta() = model.TypeMeta{APIVersion: model.APIVersionOf(kind), Kind: kind}
	return obj, nil
}

// MetaToProto converts an object's metadata to the wire's.
func MetaToProto(m *model.ObjectMeta) *v1.ObjectMeta {
	p := &v1.ObjectMeta{
		Name:            m.Name,
		Namespace:       m.Namespace,
		Uid:             m.UID,
		ResourceVersion: m.ResourceVersion,
		Generation:      m.Generation,
		Labels:          m.Labels,
		Annotations:     m.Annotations,
	}
	p.CreationTimestamp = TimeToProto(m.CreationTimestamp)
	return p
}

// MetaFromProto converts the wire's metadata to an object's; nil is the
// zero metadata, and empty label and annotation maps become nil.
func MetaFromProto(p *v1.ObjectMeta) model.ObjectMeta {
	if p == nil {
		return model.ObjectMeta{}
	}
	m := model.ObjectMeta{
		Name:            p.GetName(),
		Namespace:       p.GetNamespace(),
		UID:             p.GetUid(),
		ResourceVersion: p.GetResourceVersion(),
		Generation:      p.GetGeneration(),
	}
	if len(p.GetLabels()) > 0 {
		m.Labels = p.GetLabels()
	}
	if len(p.GetAnnotations()) > 0 {
		m.Annotations = p.GetAnnotations()
	}
	m.CreationTimestamp = TimeFromProto(p.GetCreationTimestamp())
	return m
}

// TimeToProto converts an optional time of the model to the wire's; nil
// stays nil.
func TimeToProto(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// TimeFromProto converts an optional time of the wire to the model's (in
// UTC); nil stays nil.
func TimeFromProto(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

// ProgressToProto converts an action's progress to the wire's; nil stays
// nil.
func ProgressToProto(p *model.Progress) *v1.Progress {
	if p == nil {
		return nil
	}
	return &v1.Progress{Bytes: p.Bytes, TotalBytes: p.TotalBytes, BytesPerSec: p.BytesPerSec, Percent: p.Percent}
}

// ProgressFromProto converts the wire's progress of an action to the
// model's; nil stays nil.
func ProgressFromProto(p *v1.Progress) *model.Progress {
	if p == nil {
		return nil
	}
	return &model.Progress{Bytes: p.GetBytes(), TotalBytes: p.GetTotalBytes(), BytesPerSec: p.GetBytesPerSec(), Percent: p.GetPercent()}
}
