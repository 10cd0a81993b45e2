package api_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/model"
)

const profileSpec = `{"selector":["role=worker"],"kernel":"/assets/flatcar/vmlinuz","initrds":["/assets/flatcar/initrd"],` +
	`"kernelArgs":["ignition.config.url={{ .ConfigURL \"ignition\" }}"],"configs":{"ignition":{"format":"butane","template":"variant: flatcar\nversion: 1.0.0\n"}}}`

func bootProfileClient(e *env) anvilv1connect.BootProfileServiceClient {
	return anvilv1connect.NewBootProfileServiceClient(e.http, e.url, connect.WithGRPC())
}

func TestBootProfileRoundTrip(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := bootProfileClient(e)
	roundTrip(t, crud[*v1.BootProfile]{
		create: func(ctx context.Context, m *v1.BootProfile) (*v1.BootProfile, error) {
			return msgOf(c.Create(ctx, connect.NewRequest(&v1.CreateBootProfileRequest{BootProfile: m})))
		},
		get: func(ctx context.Context, name string) (*v1.BootProfile, error) {
			return msgOf(c.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: name})))
		},
		update: func(ctx context.Context, m *v1.BootProfile) (*v1.BootProfile, error) {
			return msgOf(c.Update(ctx, connect.NewRequest(&v1.UpdateBootProfileRequest{BootProfile: m})))
		},
		list: func(ctx context.Context, fs string) ([]*v1.BootProfile, error) {
			r, err := c.List(ctx, connect.NewRequest(&v1.ListRequest{FieldSelector: fieldSel(fs)}))
			if err != nil {
				return nil, err
			}
			return r.Msg.GetItems(), nil
		},
		del: func(ctx context.Context, name, rv string) error {
			_, err := c.Delete(ctx, connect.NewRequest(&v1.DeleteRequest{Name: name, ResourceVersion: rv}))
			return err
		},
		obj: func(name string) *v1.BootProfile {
			return &v1.BootProfile{Metadata: &v1.ObjectMeta{Name: name}, Spec: mustStruct(t, profileSpec)}
		},
		changed: func(m *v1.BootProfile) *v1.BootProfile {
			return &v1.BootProfile{Metadata: m.GetMetadata(), Spec: mustStruct(t, strings.ReplaceAll(profileSpec, "role=worker", "role=storage"))}
		},
	})

	ctx := context.Background()
	got, err := c.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: "two"}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Msg.GetApiVersion() != model.AnvilAPIVersion || got.Msg.GetKind() != model.KindBootProfile {
		t.Errorf("Get = %s %s; want %s %s", got.Msg.GetApiVersion(), got.Msg.GetKind(), model.AnvilAPIVersion, model.KindBootProfile)
	}

	// Tinkerbell's group is not this kind's.
	_, err = c.Create(ctx, connect.NewRequest(&v1.CreateBootProfileRequest{BootProfile: &v1.BootProfile{
		ApiVersion: model.APIVersion, Metadata: &v1.ObjectMeta{Name: "x"}, Spec: mustStruct(t, profileSpec)}}))
	wantCode(t, "Create with apiVersion tinkerbell.org/v1alpha1", err, connect.CodeInvalidArgument)

	// Validation: a bad format is refused, naming the field.
	bad := strings.ReplaceAll(profileSpec, `"butane"`, `"json"`)
	_, err = c.Create(ctx, connect.NewRequest(&v1.CreateBootProfileRequest{BootProfile: &v1.BootProfile{
		Metadata: &v1.ObjectMeta{Name: "bad"}, Spec: mustStruct(t, bad)}}))
	wantCode(t, "Create with a bad config format", err, connect.CodeInvalidArgument)
	if err != nil && !strings.Contains(err.Error(), "spec.configs.ignition.format") {
		t.Errorf("error %q does not name spec.configs.ignition.format", err)
	}
	// An unknown spec field is an error through the API.
	_, err = c.Create(ctx, connect.NewRequest(&v1.CreateBootProfileRequest{BootProfile: &v1.BootProfile{
		Metadata: &v1.ObjectMeta{Name: "typo"}, Spec: mustStruct(t, `{"kernel":"/k","initrd":"/i"}`)}}))
	wantCode(t, "Create with an unknown field", err, connect.CodeInvalidArgument)
}

const profileManifest = `apiVersion: anvil.dev/v1alpha1
kind: BootProfile
metadata: {name: flatcar-worker}
spec:
  selector: ["role=worker"]
  kernel: /assets/flatcar/vmlinuz
  kernelArgs: ["ignition.config.url={{ .ConfigURL \"ignition\" }}"]
  configs:
    ignition: {format: butane, template: "variant: flatcar\nversion: 1.0.0\n"}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: n1, labels: {role: worker}}
spec:
  bootProfileRef: {name: flatcar-worker}
  interfaces:
  - dhcp: {mac: "52:54:00:0c:00:01"}
    netboot: {allowPXE: true}
`

func TestApplyBootProfileWithHardware(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	for i, want := range []string{"created", "unchanged"} {
		r, err := e.man.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{Source: "p.yaml", Content: profileManifest}))
		if err != nil {
			t.Fatalf("Apply %d: %v", i, err)
		}
		if objs := r.Msg.GetObjects(); len(objs) != 2 || objs[0].GetKind() != model.KindBootProfile ||
			objs[0].GetAction() != want || objs[1].GetAction() != want {
			t.Errorf("Apply %d = %v; want BootProfile and Hardware %s", i, objs, want)
		}
	}
	o, err := e.st.Get(ctx, model.KindBootProfile, "default", "flatcar-worker")
	if err != nil {
		t.Fatal(err)
	}
	if p := o.(*model.BootProfile); p.Spec.Configs["ignition"].Format != model.ConfigButane {
		t.Errorf("stored profile %+v", p.Spec)
	}
	_, err = e.man.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{Source: "p.yaml",
		Content: strings.Replace(profileManifest, "kernel: /assets", "kernel: assets", 1)}))
	wantCode(t, "Apply with a relative kernel path", err, connect.CodeInvalidArgument)
	if err != nil && !strings.Contains(err.Error(), "p.yaml:6:") {
		t.Errorf("error %q does not name p.yaml:6", err)
	}
}

// TestBootProfileAuthorization: profiles are read like Templates (viewers
// of the organisation) and written like them (admins only).
func TestBootProfileAuthorization(t *testing.T) {
	e, _ := newAuthEnv(t)
	c := bootProfileClient(e)
	ctx := context.Background()
	prof := func(ns, name string) *v1.BootProfile {
		return &v1.BootProfile{Metadata: &v1.ObjectMeta{Namespace: ns, Name: name}, Spec: mustStruct(t, profileSpec)}
	}
	if _, err := c.Create(ctx, as("admin", &v1.CreateBootProfileRequest{BootProfile: prof("acme", "p1")})); err != nil {
		t.Fatalf("Create as admin: %v", err)
	}
	pd := connect.CodePermissionDenied
	_, err := c.Create(ctx, as("acme-op", &v1.CreateBootProfileRequest{BootProfile: prof("acme", "p2")}))
	wantCode(t, "Create as an operator", err, pd)
	_, err = c.Update(ctx, as("acme-op", &v1.UpdateBootProfileRequest{BootProfile: prof("acme", "p1")}))
	wantCode(t, "Update as an operator", err, pd)
	_, err = c.Delete(ctx, as("acme-op", &v1.DeleteRequest{Namespace: "acme", Name: "p1"}))
	wantCode(t, "Delete as an operator", err, pd)
	_, err = e.man.Apply(ctx, as("acme-op", &v1.ApplyRequest{Source: "p.yaml",
		Content: strings.Replace(profileManifest, "{name: flatcar-worker}", "{name: flatcar-worker, namespace: acme}", 1)}))
	wantCode(t, "Apply of a profile as an operator", err, pd)

	if _, err := c.Get(ctx, as("acme-viewer", &v1.GetRequest{Namespace: "acme", Name: "p1"})); err != nil {
		t.Errorf("Get as the organisation's viewer: %v", err)
	}
	_, err = c.Get(ctx, as("globex-op", &v1.GetRequest{Namespace: "acme", Name: "p1"}))
	wantCode(t, "Get of another organisation's profile", err, pd)
	r, err := c.List(ctx, as("globex-op", &v1.ListRequest{}))
	if err != nil || len(r.Msg.GetItems()) != 0 {
		t.Errorf("List as globex = %v, %v; want nothing of acme's", r, err)
	}
	// No credentials: refused before anything is read.
	_, err = c.Get(ctx, connect.NewRequest(&v1.GetRequest{Namespace: "acme", Name: "p1"}))
	wantCode(t, "Get without credentials", err, connect.CodeUnauthenticated)
}
