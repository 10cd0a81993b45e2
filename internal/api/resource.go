package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/wire"
)

// resource is the one implementation of the Hardware, Template and Workflow
// services. M is the kind's message, C and U its Create and Update requests,
// L its list and E its watch event; the kind adapter (see kinds.go) supplies
// the few kind-specific constructors and accessors.
type resource[T any, M wirePtr[T], C, U, L, E any] struct {
	s *Services
	kindAdapter[T, M, C, U, L, E]
}

// wirePtr is the pointer to a kind's message struct T.
type wirePtr[T any] interface {
	*T
	wire.Message
}

// kindAdapter holds what differs between the resource services: how to
// build the kind's messages and where the object sits in its requests.
type kindAdapter[T any, M wirePtr[T], C, U, L, E any] struct {
	kind      string
	message   func(wire.Parts) M
	createArg func(*C) M
	updateArg func(*U) M
	list      func(items []M, resourceVersion string) *L
	event     func(t v1.EventType, m M) *E
}

func (r *resource[T, M, C, U, L, E]) encode(obj model.Object) (M, error) {
	p, err := wire.ToParts(obj)
	if err != nil {
		var zero M
		return zero, r.s.toConnect(err)
	}
	return r.message(p), nil
}

// decode converts and validates a request's object.
func (r *resource[T, M, C, U, L, E]) decode(m M) (model.Object, error) {
	if m == nil {
		return nil, invalid("the request carries no %s", r.kind)
	}
	obj, err := wire.Decode(r.kind, m)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := model.Validate(obj); err != nil {
		meta := obj.GetObjectMeta()
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("%s %s/%s is invalid:\n%w", r.kind, meta.Namespace, meta.Name, err))
	}
	return obj, nil
}

func (r *resource[T, M, C, U, L, E]) Create(ctx context.Context, req *connect.Request[C]) (*connect.Response[T], error) {
	obj, err := r.decode(r.createArg(req.Msg))
	if err != nil {
		return nil, err
	}
	if err := authorize(ctx, writePermission(r.kind), obj.GetObjectMeta().Namespace); err != nil {
		return nil, err
	}
	unlock, err := r.s.admitOne(ctx, obj)
	if err != nil {
		return nil, r.s.toConnect(err)
	}
	defer unlock()
	stored, err := r.s.cfg.Store.Create(ctx, obj)
	if err != nil {
		return nil, r.s.toConnect(err)
	}
	return r.respond(stored)
}

func (r *resource[T, M, C, U, L, E]) Update(ctx context.Context, req *connect.Request[U]) (*connect.Response[T], error) {
	obj, err := r.decode(r.updateArg(req.Msg))
	if err != nil {
		return nil, err
	}
	// An update names the namespace it writes: the stored object's, as
	// the key is namespace and name.
	if err := authorize(ctx, writePermission(r.kind), obj.GetObjectMeta().Namespace); err != nil {
		return nil, err
	}
	unlock, err := r.s.admitOne(ctx, obj)
	if err != nil {
		return nil, r.s.toConnect(err)
	}
	defer unlock()
	stored, err := r.s.cfg.Store.Update(ctx, obj)
	if err != nil {
		return nil, r.s.toConnect(err)
	}
	return r.respond(stored)
}

func (r *resource[T, M, C, U, L, E]) Get(ctx context.Context, req *connect.Request[v1.GetRequest]) (*connect.Response[T], error) {
	ns, name, err := r.key(req.Msg.GetNamespace(), req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	if err := authorize(ctx, auth.Read, ns); err != nil {
		return nil, err
	}
	obj, err := r.s.cfg.Store.Get(ctx, r.kind, ns, name)
	if err != nil {
		return nil, r.s.toConnect(err)
	}
	return r.respond(obj)
}

func (r *resource[T, M, C, U, L, E]) Delete(ctx context.Context, req *connect.Request[v1.DeleteRequest]) (*connect.Response[v1.DeleteResponse], error) {
	ns, name, err := r.key(req.Msg.GetNamespace(), req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	if err := authorize(ctx, auth.Write, ns); err != nil {
		return nil, err
	}
	if err := r.s.cfg.Store.Delete(ctx, r.kind, ns, name, req.Msg.GetResourceVersion()); err != nil {
		return nil, r.s.toConnect(err)
	}
	return connect.NewResponse(&v1.DeleteResponse{}), nil
}

func (r *resource[T, M, C, U, L, E]) List(ctx context.Context, req *connect.Request[v1.ListRequest]) (*connect.Response[L], error) {
	sel, fields, err := r.selectors(req.Msg.GetLabelSelector(), req.Msg.GetFieldSelector())
	if err != nil {
		return nil, err
	}
	ns, err := scope(ctx, req.Msg.GetNamespace())
	if err != nil {
		return nil, err
	}
	objs, rv, err := r.s.cfg.Store.List(ctx, r.kind, store.ListOptions{
		Namespace: ns, Labels: sel, Fields: fields,
	})
	if err != nil {
		return nil, r.s.toConnect(err)
	}
	items := make([]M, 0, len(objs))
	for _, o := range objs {
		m, err := r.encode(o)
		if err != nil {
			return nil, err
		}
		items = append(items, m)
	}
	return connect.NewResponse(r.list(items, rv)), nil
}

// Watch streams changes until the client goes away (nil), the store ends the
// watch (OUT_OF_RANGE when the client fell behind) or the store closes
// (UNAVAILABLE).
func (r *resource[T, M, C, U, L, E]) Watch(ctx context.Context, req *connect.Request[v1.WatchRequest], stream *connect.ServerStream[E]) error {
	sel, fields, err := r.selectors(req.Msg.GetLabelSelector(), req.Msg.GetFieldSelector())
	if err != nil {
		return err
	}
	ns, err := scope(ctx, req.Msg.GetNamespace())
	if err != nil {
		return err
	}
	ctx, cancel := r.s.longLived(ctx)
	defer cancel()
	ch, err := r.s.cfg.Store.Watch(ctx, r.kind, store.WatchOptions{
		Namespace: ns, Labels: sel, Fields: fields,
		ResourceVersion: req.Msg.GetResourceVersion(),
	})
	if err != nil {
		return r.s.toConnect(err)
	}
	// Send the response headers now: a client's call returns only when it
	// has them, and the first event may be long in coming.
	if err := stream.Send(nil); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return r.watchEnded()
		case ev, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return r.watchEnded()
				}
				return connect.NewError(connect.CodeUnavailable, fmt.Errorf("watch of %s ended: the server is shutting down; watch again", r.kind))
			}
			var t v1.EventType
			switch ev.Type {
			case store.Added:
				t = v1.EventType_EVENT_TYPE_ADDED
			case store.Modified:
				t = v1.EventType_EVENT_TYPE_MODIFIED
			case store.Deleted:
				t = v1.EventType_EVENT_TYPE_DELETED
			case store.Error:
				return r.s.toConnect(fmt.Errorf("watch of %s: %w", r.kind, ev.Err))
			default:
				continue
			}
			m, err := r.encode(ev.Object)
			if err != nil {
				return err
			}
			if err := stream.Send(r.event(t, m)); err != nil {
				return err
			}
		}
	}
}

// watchEnded is Watch's answer when its context ends: nil when the client
// went away, UNAVAILABLE when the server is stopping.
func (r *resource[T, M, C, U, L, E]) watchEnded() error {
	if r.s.stopped() {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("watch of %s ended: the server is shutting down; watch again", r.kind))
	}
	return nil
}

func (r *resource[T, M, C, U, L, E]) respond(obj model.Object) (*connect.Response[T], error) {
	m, err := r.encode(obj)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse((*T)(m)), nil
}

// key defaults the namespace and requires a name.
func (r *resource[T, M, C, U, L, E]) key(ns, name string) (string, string, error) {
	if ns == "" {
		ns = model.DefaultNamespace
	}
	if name == "" {
		return "", "", invalid("%s: missing name", r.kind)
	}
	return ns, name, nil
}

func (r *resource[T, M, C, U, L, E]) selectors(labelSel, fieldSel string) (labels.Selector, []store.FieldRequirement, error) {
	sel, err := labels.Parse(labelSel)
	if err != nil {
		return nil, nil, invalid("label selector: %v", err)
	}
	fields, err := store.ParseFieldSelector(r.kind, fieldSel)
	if err != nil {
		return nil, nil, invalid("%v", err)
	}
	return sel, fields, nil
}
