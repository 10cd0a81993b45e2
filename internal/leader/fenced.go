package leader

import (
	"context"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Fenced returns st with its writes fenced: a write whose context belongs
// to a leadership term (the lead context, or one derived from it) is made
// only while that term's Fence holds; once it does not, the write fails
// with an error wrapping ErrNotLeader and the store is not touched. A
// write with any other context (an agent's report handled by this
// replica, an operator's apply) goes through as it is: those are valid on
// every replica, and made safe by their resourceVersion preconditions.
//
// So the leader's work (the workflow engine's reconciler, the BMC
// executor) is given the fenced store and runs under the lead context,
// and a deposed leader's late writes are refused here.
func Fenced(st store.Store) store.Store { return fenced{st} }

type fenced struct{ store.Store }

// Unwrap implements store.Unwrapper: reads are not fenced, so a live read
// may go to the store underneath.
func (f fenced) Unwrap() store.Store { return f.Store }

// check returns the error a write under ctx must fail with, if any.
func check(ctx context.Context) error {
	if ctx.Value(fenceKey{}) == nil {
		return nil
	}
	return FenceFrom(ctx).Check()
}

func (f fenced) Create(ctx context.Context, obj model.Object) (model.Object, error) {
	if err := check(ctx); err != nil {
		return nil, err
	}
	return f.Store.Create(ctx, obj)
}

func (f fenced) Update(ctx context.Context, obj model.Object) (model.Object, error) {
	if err := check(ctx); err != nil {
		return nil, err
	}
	return f.Store.Update(ctx, obj)
}

func (f fenced) Delete(ctx context.Context, kind, namespace, name, resourceVersion string) error {
	if err := check(ctx); err != nil {
		return err
	}
	return f.Store.Delete(ctx, kind, namespace, name, resourceVersion)
}

func (f fenced) Apply(ctx context.Context, objs []model.Object) ([]model.Object, error) {
	if err := check(ctx); err != nil {
		return nil, err
	}
	return f.Store.Apply(ctx, objs)
}
