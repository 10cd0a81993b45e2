package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/wire"
)

// Credentials: the core v1 Secrets a Machine's authSecretRef names.
//
// They come in only through ManifestService.Apply, which seals them
// (Config.Sealer) before the store sees them, and go out only as
// CredentialSecret messages: metadata, type and key names, never a value.
// Every call that touches them is for admins of every organisation
// (adminOnly): a BMC password powers machines off.

// credentialService lists, shows and deletes Secrets, redacted.
type credentialService struct{ s *Services }

func redacted(x *model.Secret) *v1.CredentialSecret {
	keys := x.Keys
	if len(keys) == 0 { // unsealed input never reaches the store; be safe anyway
		plain, _ := x.Plain()
		keys = sortedKeys(plain)
	}
	return &v1.CredentialSecret{
		ApiVersion: model.CoreAPIVersion, Kind: model.KindSecret, Metadata: wire.MetaToProto(&x.ObjectMeta),
		Type: x.Type, Keys: keys, Redacted: true,
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func (c credentialService) Get(ctx context.Context, req *connect.Request[v1.GetRequest]) (*connect.Response[v1.CredentialSecret], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	ns, name := req.Msg.GetNamespace(), req.Msg.GetName()
	if ns == "" {
		ns = model.DefaultNamespace
	}
	if name == "" {
		return nil, invalid("Secret: missing name")
	}
	o, err := c.s.cfg.Store.Get(ctx, model.KindSecret, ns, name)
	if err != nil {
		return nil, c.s.toConnect(err)
	}
	return connect.NewResponse(redacted(o.(*model.Secret))), nil
}

func (c credentialService) List(ctx context.Context, req *connect.Request[v1.ListRequest]) (*connect.Response[v1.CredentialSecretList], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	objs, _, err := c.s.cfg.Store.List(ctx, model.KindSecret, store.ListOptions{Namespace: req.Msg.GetNamespace()})
	if err != nil {
		return nil, c.s.toConnect(err)
	}
	out := &v1.CredentialSecretList{}
	for _, o := range objs {
		out.Items = append(out.Items, redacted(o.(*model.Secret)))
	}
	return connect.NewResponse(out), nil
}

func (c credentialService) Delete(ctx context.Context, req *connect.Request[v1.DeleteRequest]) (*connect.Response[v1.DeleteResponse], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	ns := req.Msg.GetNamespace()
	if ns == "" {
		ns = model.DefaultNamespace
	}
	if req.Msg.GetName() == "" {
		return nil, invalid("Secret: missing name")
	}
	if err := c.s.cfg.Store.Delete(ctx, model.KindSecret, ns, req.Msg.GetName(), req.Msg.GetResourceVersion()); err != nil {
		return nil, c.s.toConnect(err)
	}
	return connect.NewResponse(&v1.DeleteResponse{}), nil
}

// sealForApply checks a Secret from a manifest and compares it with the
// stored one, by value: it returns the apply's action (created,
// configured, unchanged), and seals x in place, so the write stores
// ciphertext only.
func (s *Services) sealForApply(ctx context.Context, x *model.Secret) (action string, err error) {
	if s.cfg.Sealer == nil {
		return "", connect.NewError(connect.CodeFailedPrecondition,
			errors.New("this server has no seal key, so it stores no Secret (credentials are never stored in the clear)"))
	}
	if x.Sealed != "" {
		return "", invalid("Secret %s/%s: sealed is written by the server; give data or stringData", x.Namespace, x.Name)
	}
	plain, err := x.Plain()
	if err != nil {
		return "", invalid("Secret %s/%s: %v", x.Namespace, x.Name, err)
	}
	action = actionCreated
	cur, err := s.cfg.Store.Get(ctx, model.KindSecret, x.Namespace, x.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return "", s.toConnect(err)
	default:
		action = actionConfigured
		c := cur.(*model.Secret)
		old, err := s.cfg.Sealer.Open(c)
		if err != nil {
			// The stored one cannot be read back (another key): replace it.
			s.log.Warn("stored Secret cannot be unsealed; the apply replaces it", "namespace", x.Namespace, "name", x.Name)
		} else if c.Type == x.Type && maps.Equal(c.Labels, x.Labels) && maps.Equal(c.Annotations, x.Annotations) &&
			maps.EqualFunc(old, plain, bytes.Equal) {
			action = actionUnchanged
		}
	}
	if err := s.cfg.Sealer.Seal(x); err != nil {
		return "", s.toConnect(fmt.Errorf("seal: %w", err))
	}
	return action, nil
}
