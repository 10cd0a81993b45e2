// Package auth owns who a caller is and what it may do: the Principal a
// verified token (or the explicit "no authentication" mode) yields, the
// roles and the permissions they grant, and the organisation check that
// keeps one tenant out of another's objects.
//
// It decides; it does not serve. Token verification (verify.go, JWKS and key
// files) turns a bearer token into a Principal; internal/api asks Allow
// before it touches the store. It must not read the store, log requests or
// know about HTTP routes beyond the bearer header.
package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Role names, as they appear in a token's roles claim.
const (
	RoleViewer   = "viewer"   // read its organisation's objects, logs and jobs
	RoleOperator = "operator" // viewer, plus provision, reprovision, cancel
	RoleAdmin    = "admin"    // everything, in every organisation
)

// Permission is one kind of access a call needs.
type Permission string

// The permissions, from least to most.
const (
	// Read: get, list and watch objects; logs; job status; the audit log
	// of the caller's organisation.
	Read Permission = "read"
	// Provision: create workflows and jobs, reprovision, cancel, allow or
	// deny netboot (SetNetboot).
	Provision Permission = "provision"
	// Write: create, update and delete Hardware and Templates, apply
	// manifests, delete workflows.
	Write Permission = "write"
)

// grants is what each role may do, within its organisation (admin: in all).
var grants = map[string][]Permission{
	RoleViewer:   {Read},
	RoleOperator: {Read, Provision},
	RoleAdmin:    {Read, Provision, Write},
}

// Principal is an authenticated caller.
type Principal struct {
	// Subject names the caller (the token's sub, or "anonymous").
	Subject string
	// Org is the caller's organisation: the namespace of every object it
	// may see. Empty only for admins and the anonymous principal.
	Org string
	// Roles are the caller's role names; unknown names grant nothing.
	Roles []string
	// Unauthenticated is set for the principal of the "no authentication"
	// mode: it may do everything, and the audit log says so.
	Unauthenticated bool
	// ExpiresAt is when the token it came from expires (zero: never, for
	// Anonymous).
	ExpiresAt time.Time
	// TokenID is the jti of the token it came from, if any: what a
	// revocation names.
	TokenID string
}

// Anonymous is the principal of every call when authentication is switched
// off (anvil serve --insecure-no-auth).
var Anonymous = &Principal{Subject: "anonymous", Roles: []string{RoleAdmin}, Unauthenticated: true}

// IsAdmin reports whether p holds the admin role.
func (p *Principal) IsAdmin() bool { return p != nil && slices.Contains(p.Roles, RoleAdmin) }

// has reports whether one of p's roles grants perm.
func (p *Principal) has(perm Permission) bool {
	for _, r := range p.Roles {
		if slices.Contains(grants[r], perm) {
			return true
		}
	}
	return false
}

// DeniedError is a refused call. Its message names the missing permission
// and the caller's own organisation, never anything of the other one's.
type DeniedError struct {
	Subject    string
	Permission Permission
	// Reason is why, in a few words: "no role grants it" or
	// "outside organisation \"acme\"".
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("permission denied: %s needs %q: %s", e.Subject, e.Permission, e.Reason)
}

// Allow returns nil when p may use perm on objects of organisation org
// (an object's namespace; "" for calls that span organisations, such as a
// list of every namespace, which only admins may make), else a
// *DeniedError.
func (p *Principal) Allow(perm Permission, org string) error {
	if p == nil {
		return &DeniedError{Subject: "unauthenticated caller", Permission: perm, Reason: "no credentials"}
	}
	if !p.has(perm) {
		return &DeniedError{Subject: p.Subject, Permission: perm,
			Reason: fmt.Sprintf("no role grants it (roles: %s)", rolesString(p.Roles))}
	}
	if p.IsAdmin() || p.Unauthenticated {
		return nil
	}
	if org == "" {
		return &DeniedError{Subject: p.Subject, Permission: perm,
			Reason: fmt.Sprintf("only admins act across organisations; name your organisation's namespace %q", p.Org)}
	}
	if org != p.Org {
		return &DeniedError{Subject: p.Subject, Permission: perm,
			Reason: fmt.Sprintf("objects outside organisation %q", p.Org)}
	}
	return nil
}

// Sees reports whether p may read objects of organisation org, for
// filtering lists and watches without an error per object.
func (p *Principal) Sees(org string) bool {
	return p != nil && p.has(Read) && (p.IsAdmin() || p.Unauthenticated || org == p.Org)
}

// Scope is the namespace a list or watch by p should cover when the request
// names ns: p's organisation when p is bound to one and ns is empty,
// otherwise ns unchanged (Allow then decides).
func (p *Principal) Scope(ns string) string {
	if ns == "" && p != nil && !p.IsAdmin() && !p.Unauthenticated {
		return p.Org
	}
	return ns
}

func rolesString(r []string) string {
	if len(r) == 0 {
		return "none"
	}
	return strings.Join(r, ",")
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal ctx carries, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
