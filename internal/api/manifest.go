package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// Apply actions reported per object.
const (
	actionCreated    = "created"
	actionConfigured = "configured"
	actionUnchanged  = "unchanged"
)

type manifestService struct{ s *Services }

// Apply parses and validates every document, checks the Workflows'
// references against the file and the store and what the write may not do
// to other objects (admit), and stores every changed object in one atomic
// store.Apply. Any problem in any document stores
// nothing; the error lists every problem with its line. Warnings (fields
// ignored, images no machine could pull, boot modes needing a missing
// BMC) are returned with the result; under strict any warning refuses the
// whole request, storing nothing.
//
// The created/configured/unchanged report is computed from a read before the
// write; a concurrent writer between the two can make it stale, never the
// write itself partial.
func (m manifestService) Apply(ctx context.Context, req *connect.Request[v1.ApplyRequest]) (*connect.Response[v1.ApplyResponse], error) {
	s := m.s
	source := req.Msg.GetSource()
	if source == "" {
		source = "request"
	}
	res, err := model.ParseManifests(source, []byte(req.Msg.GetContent()))
	if err != nil {
		return nil, s.toConnect(err)
	}

	// Every document is authorized before anything is looked at: a
	// manifest naming another organisation's object is refused whole.
	for _, d := range res.Docs {
		kind, meta := model.KindOf(d.Object), d.Object.GetObjectMeta()
		if err := authorize(ctx, writePermission(kind), meta.Namespace); err != nil {
			return nil, err
		}
		if kind == model.KindSecret {
			if err := adminOnly(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := checkTemplates(res.Docs); err != nil {
		return nil, s.toConnect(err)
	}

	var lookupErr error
	exists := func(kind, ns, name string) bool {
		_, err := s.cfg.Store.Get(ctx, kind, ns, name)
		if err != nil && !errors.Is(err, store.ErrNotFound) && lookupErr == nil {
			lookupErr = err
		}
		return err == nil
	}
	refErr := model.CheckReferences(res.Docs, exists)
	if lookupErr != nil {
		return nil, s.toConnect(fmt.Errorf("check references: %w", lookupErr))
	}
	if refErr != nil {
		return nil, s.toConnect(refErr)
	}
	if err := s.checkISOBoot(ctx, res.Docs); err != nil {
		return nil, s.toConnect(err)
	}
	warnings := append(res.Warnings, s.applyWarnings(ctx, res.Docs)...)
	if req.Msg.GetStrict() && len(warnings) > 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: refused (strict): %d warning(s), nothing applied:\n%s",
			source, len(warnings), strings.Join(warnings, "\n")))
	}
	unlock, err := s.admit(ctx, res.Docs)
	if err != nil {
		return nil, s.toConnect(err)
	}
	defer unlock()

	out := &v1.ApplyResponse{Warnings: warnings}
	var write []model.Object
	for i := range res.Docs {
		obj := res.Docs[i].Object
		kind, meta := model.KindOf(obj), obj.GetObjectMeta()
		action := actionCreated
		if sec, ok := obj.(*model.Secret); ok {
			// Compared by value, then sealed: the store never sees it plain.
			if action, err = s.sealForApply(ctx, sec); err != nil {
				return nil, err
			}
			if action != actionUnchanged {
				write = append(write, obj)
			}
			out.Objects = append(out.Objects, &v1.AppliedObject{Kind: kind, Namespace: meta.Namespace, Name: meta.Name, Action: action})
			continue
		}
		cur, err := s.cfg.Store.Get(ctx, kind, meta.Namespace, meta.Name)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, s.toConnect(err)
		default:
			same, err := sameDesired(cur, obj)
			if err != nil {
				return nil, s.toConnect(err)
			}
			action = actionConfigured
			if same {
				action = actionUnchanged
			}
		}
		if action != actionUnchanged {
			write = append(write, obj)
		}
		out.Objects = append(out.Objects, &v1.AppliedObject{
			Kind: kind, Namespace: meta.Namespace, Name: meta.Name, Action: action,
		})
	}
	if !req.Msg.GetDryRun() && len(write) > 0 {
		if _, err := s.cfg.Store.Apply(ctx, write); err != nil {
			return nil, s.toConnect(fmt.Errorf("apply %s: %w", source, err))
		}
	}
	return connect.NewResponse(out), nil
}

// sameDesired reports whether a and b have equal spec, labels and
// annotations: what a manifest sets. Status and server-set metadata do not
// count.
func sameDesired(a, b model.Object) (bool, error) {
	am, bm := a.GetObjectMeta(), b.GetObjectMeta()
	if !maps.Equal(am.Labels, bm.Labels) || !maps.Equal(am.Annotations, bm.Annotations) {
		return false, nil
	}
	as, err := specJSON(a)
	if err != nil {
		return false, err
	}
	bs, err := specJSON(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(as, bs), nil
}

// specJSON returns the canonical JSON of obj's spec (encoding/json sorts map
// keys and keeps struct field order, so equal specs give equal bytes).
func specJSON(obj model.Object) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var raw struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	return raw.Spec, nil
}

// checkTemplates runs the static check on every Template's data, so that
// duplicate task or action names are refused at apply time with their line
// in the file, not discovered when a workflow first renders.
func checkTemplates(docs []model.Document) error {
	var errs model.ErrorList
	for i := range docs {
		d := &docs[i]
		t, ok := d.Object.(*model.Template)
		if !ok || t.Spec.Data == nil {
			continue
		}
		// A block scalar's first line is the one after "data:".
		base := d.FieldLine("spec.data")
		for _, e := range workflow.CheckTemplateStatic(*t.Spec.Data) {
			fe := &model.FieldError{Source: d.Source, Line: base, Doc: d.Describe(), Path: "spec.data", Msg: e.Error()}
			var se *workflow.StaticError
			if errors.As(e, &se) {
				fe.Line, fe.Msg = base+se.Line, se.Msg
			}
			errs = append(errs, fe)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}
