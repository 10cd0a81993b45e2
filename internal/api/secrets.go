package api

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
)

// SecretStore is what the secret service reads. *secrets.Store implements
// it.
type SecretStore interface {
	List() []secrets.Info
	Get(namespace, name string) (string, secrets.Info, error)
}

// secretService shows generated secrets to admins only.
type secretService struct{ s *Services }

// adminOnly refuses anyone but an admin: authorize with no organisation
// is exactly that.
func adminOnly(ctx context.Context) error { return authorize(ctx, auth.Write, "") }

func (a secretService) store() (SecretStore, error) {
	if a.s.cfg.Secrets == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the secret store is not open"))
	}
	return a.s.cfg.Secrets, nil
}

func (a secretService) List(ctx context.Context, _ *connect.Request[v1.ListSecretsRequest]) (*connect.Response[v1.ListSecretsResponse], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	st, err := a.store()
	if err != nil {
		return nil, err
	}
	out := &v1.ListSecretsResponse{}
	for _, i := range st.List() {
		out.Secrets = append(out.Secrets, secretInfo(i))
	}
	return connect.NewResponse(out), nil
}

func (a secretService) Get(ctx context.Context, req *connect.Request[v1.GetSecretRequest]) (*connect.Response[v1.GetSecretResponse], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	st, err := a.store()
	if err != nil {
		return nil, err
	}
	ns := req.Msg.GetNamespace()
	if ns == "" {
		ns = model.DefaultNamespace
	}
	if req.Msg.GetName() == "" {
		return nil, invalid("missing name")
	}
	v, info, err := st.Get(ns, req.Msg.GetName())
	if errors.Is(err, secrets.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("secret %s/%s not found: a template makes it on first use", ns, req.Msg.GetName()))
	}
	if err != nil {
		return nil, a.s.toConnect(err)
	}
	return connect.NewResponse(&v1.GetSecretResponse{Info: secretInfo(info), Value: v}), nil
}

func secretInfo(i secrets.Info) *v1.SecretInfo {
	return &v1.SecretInfo{Namespace: i.Namespace, Name: i.Name, Kind: i.Kind, Created: timestamppb.New(i.Created)}
}
