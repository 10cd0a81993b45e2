package api

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"

	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/model"
)

// authorize returns nil when the call's principal may use perm on objects
// in namespace ns (its organisation; "" for a call across every
// namespace), else PERMISSION_DENIED naming the missing permission.
//
// Every management handler reached through Mount has a principal: the
// gate puts one in the context (auth.Anonymous when authentication is
// off), so a missing one means a handler was called around the gate, and
// is refused.
func authorize(ctx context.Context, perm auth.Permission, ns string) error {
	p := auth.FromContext(ctx)
	if p == nil {
		return connect.NewError(connect.CodePermissionDenied,
			errors.New("permission denied: the call carries no principal (it did not pass the gate that authenticates)"))
	}
	if err := p.Allow(perm, ns); err != nil {
		authRefused.WithLabelValues("permission").Inc()
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	return nil
}

// scope is the namespace a list or watch covers for the caller (its
// organisation when the request names none) and the authorization to
// read it.
func scope(ctx context.Context, ns string) (string, error) {
	ns = auth.FromContext(ctx).Scope(ns)
	return ns, authorize(ctx, auth.Read, ns)
}

// writePermission is what creating or changing an object of kind needs:
// a Workflow or a BMC Job is provisioning (operators may power and boot
// machines), Hardware, Templates and Machines describe the fleet (admins
// only). Deleting anything is Write. Secrets are further limited to
// admins of every organisation (adminOnly).
func writePermission(kind string) auth.Permission {
	if kind == model.KindWorkflow || kind == model.KindJob {
		return auth.Provision
	}
	return auth.Write
}

// workflowNamespace is the namespace part of a workflow ID
// ("namespace/name"), or "" when it has none.
func workflowNamespace(id string) string {
	ns, _, ok := strings.Cut(id, "/")
	if !ok {
		return ""
	}
	return ns
}

// sees reports whether the caller may read the objects of namespace, for
// filtering lists without an error per object.
func sees(ctx context.Context, namespace string) bool {
	return auth.FromContext(ctx).Sees(namespace)
}
