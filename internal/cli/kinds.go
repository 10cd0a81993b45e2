package cli

import (
	"context"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/wire"
)

// kindOps reads and deletes objects of one kind, whichever service holds it.
type kindOps struct {
	get  func(ctx context.Context, ns, name string) (model.Object, error)
	list func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error)
	del  func(ctx context.Context, ns, name string) error
}

// msgOf returns the response's message, or nil for the nil response that
// comes with an error (proto getters are nil-safe; r.Msg is not).
func msgOf[T any](r *connect.Response[T]) *T {
	if r == nil {
		return nil
	}
	return r.Msg
}

func decodeOne[M wire.Message](kind string, m M, err error) (model.Object, error) {
	if err != nil {
		return nil, err
	}
	return wire.Decode(kind, m)
}

func decodeAll[M wire.Message](kind string, items []M, err error) ([]model.Object, error) {
	if err != nil {
		return nil, err
	}
	out := make([]model.Object, 0, len(items))
	for _, m := range items {
		o, err := wire.Decode(kind, m)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// ops returns the operations for kind (one of model.Kinds).
func (c *clients) ops(kind string) kindOps {
	get := func(ns, name string) *connect.Request[v1.GetRequest] {
		return connect.NewRequest(&v1.GetRequest{Namespace: ns, Name: name})
	}
	del := func(ns, name string) *connect.Request[v1.DeleteRequest] {
		return connect.NewRequest(&v1.DeleteRequest{Namespace: ns, Name: name})
	}
	switch kind {
	case model.KindHardware:
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.hardware.Get(ctx, get(ns, name))
				return decodeOne(kind, msgOf(r), err)
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.hardware.List(ctx, connect.NewRequest(req))
				return decodeAll(kind, msgOf(r).GetItems(), err)
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.hardware.Delete(ctx, del(ns, name))
				return err
			},
		}
	case model.KindTemplate:
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.templates.Get(ctx, get(ns, name))
				return decodeOne(kind, msgOf(r), err)
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.templates.List(ctx, connect.NewRequest(req))
				return decodeAll(kind, msgOf(r).GetItems(), err)
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.templates.Delete(ctx, del(ns, name))
				return err
			},
		}
	case model.KindMachine:
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.machines.Get(ctx, get(ns, name))
				return decodeOne(kind, msgOf(r), err)
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.machines.List(ctx, connect.NewRequest(req))
				return decodeAll(kind, msgOf(r).GetItems(), err)
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.machines.Delete(ctx, del(ns, name))
				return err
			},
		}
	case model.KindJob:
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.bmcJobs.Get(ctx, get(ns, name))
				return decodeOne(kind, msgOf(r), err)
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.bmcJobs.List(ctx, connect.NewRequest(req))
				return decodeAll(kind, msgOf(r).GetItems(), err)
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.bmcJobs.Delete(ctx, del(ns, name))
				return err
			},
		}
	case model.KindTask:
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.bmcTasks.Get(ctx, get(ns, name))
				return decodeOne(kind, msgOf(r), err)
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.bmcTasks.List(ctx, connect.NewRequest(req))
				return decodeAll(kind, msgOf(r).GetItems(), err)
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.bmcTasks.Delete(ctx, del(ns, name))
				return err
			},
		}
	case model.KindSecret:
		// Never a value: the service shows key names only.
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.creds.Get(ctx, get(ns, name))
				if err != nil {
					return nil, err
				}
				return secretFromWire(r.Msg), nil
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.creds.List(ctx, connect.NewRequest(req))
				if err != nil {
					return nil, err
				}
				var out []model.Object
				for _, m := range r.Msg.GetItems() {
					out = append(out, secretFromWire(m))
				}
				return out, nil
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.creds.Delete(ctx, del(ns, name))
				return err
			},
		}
	case model.KindBootProfile:
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.profiles.Get(ctx, get(ns, name))
				return decodeOne(kind, msgOf(r), err)
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.profiles.List(ctx, connect.NewRequest(req))
				return decodeAll(kind, msgOf(r).GetItems(), err)
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.profiles.Delete(ctx, del(ns, name))
				return err
			},
		}
	case model.KindWorkflowRuleSet:
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.ruleSets.Get(ctx, get(ns, name))
				return decodeOne(kind, msgOf(r), err)
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.ruleSets.List(ctx, connect.NewRequest(req))
				return decodeAll(kind, msgOf(r).GetItems(), err)
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.ruleSets.Delete(ctx, del(ns, name))
				return err
			},
		}
	default:
		return kindOps{
			get: func(ctx context.Context, ns, name string) (model.Object, error) {
				r, err := c.workflows.Get(ctx, get(ns, name))
				return decodeOne(kind, msgOf(r), err)
			},
			list: func(ctx context.Context, req *v1.ListRequest) ([]model.Object, error) {
				r, err := c.workflows.List(ctx, connect.NewRequest(req))
				return decodeAll(kind, msgOf(r).GetItems(), err)
			},
			del: func(ctx context.Context, ns, name string) error {
				_, err := c.workflows.Delete(ctx, del(ns, name))
				return err
			},
		}
	}
}

// secretFromWire is a Secret as the API shows it: metadata, type and the
// names of its keys.
func secretFromWire(m *v1.CredentialSecret) *model.Secret {
	return &model.Secret{
		TypeMeta:   model.TypeMeta{APIVersion: model.CoreAPIVersion, Kind: model.KindSecret},
		ObjectMeta: wire.MetaFromProto(m.GetMetadata()),
		Type:       m.GetType(),
		Keys:       m.GetKeys(),
	}
}
