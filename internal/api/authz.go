package api

import (
	"context"

	"connectrpc.com/connect"

	"github.com/anvilproj/anvil/internal/auth"
)

// authorize returns nil when the caller may use perm on the objects of
// namespace (its organisation), else a PERMISSION_DENIED error naming the
// missing permission. A nil principal is only possible when no
// authentication interceptor is mounted on the services, and is allowed.
func authorize(ctx context.Context, perm auth.Permission, namespace string) error {
	p := auth.FromContext(ctx)
	if p == nil {
		return nil
	}
	if err := p.Allow(perm, namespace); err != nil {
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	return nil
}

// sees reports whether the caller may read the objects of namespace, for
// filtering lists without an error per object. Like authorize, it allows a
// nil principal.
func sees(ctx context.Context, namespace string) bool {
	p := auth.FromContext(ctx)
	return p == nil || p.Sees(namespace)
}

// scope is the namespace a request naming ns covers for the caller: the
// caller's organisation when ns is empty and the caller is bound to one,
// else ns (see auth.Principal.Scope).
func scope(ctx context.Context, ns string) string {
	return auth.FromContext(ctx).Scope(ns)
}
