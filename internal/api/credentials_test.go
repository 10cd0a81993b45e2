package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
)

// bmcPassword is the password of the Rufio-shaped manifests below; no
// answer, store file, log or audit record may hold it.
const bmcPassword = "Tr0ub4dor-bmc-pw"

func rufioManifests(password string) string {
	return `apiVersion: v1
kind: Secret
metadata: {name: bm-auth, namespace: acme}
type: kubernetes.io/basic-auth
data:
  username: ` + base64.StdEncoding.EncodeToString([]byte("admin")) + `
  password: ` + base64.StdEncoding.EncodeToString([]byte(password)) + `
---
apiVersion: bmc.tinkerbell.org/v1alpha1
kind: Machine
metadata: {name: bmc-n1, namespace: acme}
spec:
  connection:
    host: 10.9.9.9
    port: 623
    authSecretRef: {name: bm-auth, namespace: acme}
    insecureTLS: false
---
apiVersion: bmc.tinkerbell.org/v1alpha1
kind: Job
metadata: {name: off-then-pxe, namespace: acme}
spec:
  machineRef: {name: bmc-n1, namespace: acme}
  tasks:
  - powerAction: "off"
  - oneTimeBootDeviceAction: {device: [pxe], efiBoot: true}
  - powerAction: "on"
`
}

// TestCredentialSecrets: an applied v1 Secret is stored sealed (the store
// file does not hold the password, in any encoding), shown redacted, never
// logged or audited, and only admins may apply, read or list Secrets.
func TestCredentialSecrets(t *testing.T) {
	sealer, err := secrets.OpenSealer(filepath.Join(t.TempDir(), secrets.KeyFileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(filepath.Join(t.TempDir(), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	var logs bytes.Buffer
	e := newEnv(t, envOptions{configure: func(c *api.Config) {
		c.Authenticate = testAuthenticate
		c.Audit = al
		c.Sealer = sealer
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	ctx := context.Background()
	creds := anvilv1connect.NewCredentialSecretServiceClient(e.http, e.url, connect.WithGRPC())
	machines := anvilv1connect.NewMachineServiceClient(e.http, e.url, connect.WithGRPC())

	// The organisation's own operator may not apply a Secret.
	_, err = e.man.Apply(ctx, as("acme-op", &v1.ApplyRequest{Source: "rufio.yaml", Content: rufioManifests(bmcPassword)}))
	denied(t, "operator applies a Secret", err, connect.CodePermissionDenied)

	res, err := e.man.Apply(ctx, as("admin", &v1.ApplyRequest{Source: "rufio.yaml", Content: rufioManifests(bmcPassword)}))
	if err != nil {
		t.Fatalf("admin applies Rufio's manifests: %v", err)
	}
	var actions []string
	for _, o := range res.Msg.GetObjects() {
		actions = append(actions, o.GetKind()+"="+o.GetAction())
	}
	if got, want := strings.Join(actions, ","), "Secret=created,Machine=created,Job=created"; got != want {
		t.Errorf("apply: %s, want %s", got, want)
	}
	// Applied again: unchanged, compared by value under the seal; a new
	// password: configured.
	res, err = e.man.Apply(ctx, as("admin", &v1.ApplyRequest{Source: "rufio.yaml", Content: rufioManifests(bmcPassword)}))
	if err != nil || res.Msg.GetObjects()[0].GetAction() != "unchanged" {
		t.Errorf("re-apply: %v, %v; want the Secret unchanged", res, err)
	}
	res, err = e.man.Apply(ctx, as("admin", &v1.ApplyRequest{Source: "rufio.yaml", Content: rufioManifests(bmcPassword + "2")}))
	if err != nil || res.Msg.GetObjects()[0].GetAction() != "configured" {
		t.Errorf("apply of a new password: %v, %v; want configured", res, err)
	}
	if _, err := e.man.Apply(ctx, as("admin", &v1.ApplyRequest{Source: "rufio.yaml", Content: rufioManifests(bmcPassword)})); err != nil {
		t.Fatal(err)
	}

	// Read back: keys only.
	g, err := creds.Get(ctx, as("admin", &v1.GetRequest{Namespace: "acme", Name: "bm-auth"}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(g.Msg.GetKeys(), ",") != "password,username" || !g.Msg.GetRedacted() || g.Msg.GetType() != "kubernetes.io/basic-auth" {
		t.Errorf("get = %v", g.Msg)
	}
	l, err := creds.List(ctx, as("admin", &v1.ListRequest{}))
	if err != nil || len(l.Msg.GetItems()) != 1 {
		t.Fatalf("list: %v, %v", l, err)
	}
	shown, _ := protojson.Marshal(l.Msg)
	assertNoPassword(t, "the API's list", shown)

	for _, who := range []string{"acme-op", "acme-viewer"} {
		_, err := creds.Get(ctx, as(who, &v1.GetRequest{Namespace: "acme", Name: "bm-auth"}))
		denied(t, who+" reads a Secret", err, connect.CodePermissionDenied)
		_, err = creds.List(ctx, as(who, &v1.ListRequest{Namespace: "acme"}))
		denied(t, who+" lists Secrets", err, connect.CodePermissionDenied)
	}
	// The Machine naming it is an ordinary object its organisation reads.
	m, err := machines.Get(ctx, as("acme-viewer", &v1.GetRequest{Namespace: "acme", Name: "bmc-n1"}))
	if err != nil || m.Msg.GetSpec().GetFields()["connection"].GetStructValue().GetFields()["host"].GetStringValue() != "10.9.9.9" {
		t.Errorf("viewer gets the Machine: %v, %v", m, err)
	}

	// Nothing at rest, in the logs or the audit holds the password.
	db, err := os.ReadFile(e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	assertNoPassword(t, "the store file", db)
	assertNoPassword(t, "the server log", logs.Bytes())
	recs, err := al.List(audit.Filter{})
	if err != nil || len(recs) == 0 {
		t.Fatalf("audit: %v, %v", recs, err)
	}
	for _, r := range recs {
		assertNoPassword(t, "the audit log", []byte(r.Message+r.Object))
	}
	// The sealed value in the store opens to the password: sealed, not lost.
	o, err := e.st.Get(ctx, model.KindSecret, "acme", "bm-auth")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := sealer.Open(o.(*model.Secret))
	if err != nil || string(plain["password"]) != bmcPassword {
		t.Errorf("unseal: %q, %v", plain["password"], err)
	}

	// Bad input: named by key, value not repeated.
	bad := "apiVersion: v1\nkind: Secret\nmetadata: {name: bad, namespace: acme}\ndata: {password: \"" + bmcPassword + "!\"}\n"
	_, err = e.man.Apply(ctx, as("admin", &v1.ApplyRequest{Source: "bad.yaml", Content: bad}))
	wantCode(t, "a Secret that is not base64", err, connect.CodeInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "data.password: not valid base64") || strings.Contains(err.Error(), bmcPassword) {
		t.Errorf("error %v: want data.password named and no value", err)
	}
	// Deleting is for admins too.
	_, err = creds.Delete(ctx, as("acme-op", &v1.DeleteRequest{Namespace: "acme", Name: "bm-auth"}))
	denied(t, "operator deletes a Secret", err, connect.CodePermissionDenied)
	if _, err := creds.Delete(ctx, as("admin", &v1.DeleteRequest{Namespace: "acme", Name: "bm-auth"})); err != nil {
		t.Errorf("admin deletes: %v", err)
	}
}

// TestSecretNeedsSealer: a server without a seal key refuses Secrets
// rather than store them plain.
func TestSecretNeedsSealer(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, err := e.man.Apply(context.Background(), connect.NewRequest(&v1.ApplyRequest{Source: "rufio.yaml", Content: rufioManifests(bmcPassword)}))
	wantCode(t, "apply without a seal key", err, connect.CodeFailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "no seal key") {
		t.Errorf("error %v; want it to say there is no seal key", err)
	}
}

func assertNoPassword(t *testing.T, where string, b []byte) {
	t.Helper()
	for _, enc := range []string{bmcPassword, base64.StdEncoding.EncodeToString([]byte(bmcPassword)),
		base64.StdEncoding.EncodeToString([]byte(`{"password":"` + bmcPassword))} {
		if bytes.Contains(b, []byte(enc)) {
			t.Errorf("%s holds the password (as %q)", where, enc)
		}
	}
}

// TestBMCPermissions: an operator may create Jobs (power is provisioning)
// in its organisation only; Machines, like Hardware, need an admin; a
// viewer reads both.
func TestBMCPermissions(t *testing.T) {
	e := newEnv(t, envOptions{configure: func(c *api.Config) { c.Authenticate = testAuthenticate }})
	ctx := context.Background()
	jobs := anvilv1connect.NewBmcJobServiceClient(e.http, e.url, connect.WithGRPC())
	machines := anvilv1connect.NewMachineServiceClient(e.http, e.url, connect.WithGRPC())
	jobMsg := func(ns string) *v1.BmcJob {
		return &v1.BmcJob{Metadata: &v1.ObjectMeta{Name: "on", Namespace: ns},
			Spec: mustStruct(t, `{"machineRef":{"name":"m"},"tasks":[{"powerAction":"on"}]}`)}
	}
	machineMsg := &v1.Machine{Metadata: &v1.ObjectMeta{Name: "m", Namespace: "acme"},
		Spec: mustStruct(t, `{"connection":{"host":"10.0.0.9","authSecretRef":{"name":"s"}}}`)}

	_, err := machines.Create(ctx, as("acme-op", &v1.CreateMachineRequest{Machine: machineMsg}))
	denied(t, "operator creates a Machine", err, connect.CodePermissionDenied)
	if _, err := machines.Create(ctx, as("admin", &v1.CreateMachineRequest{Machine: machineMsg})); err != nil {
		t.Fatalf("admin creates a Machine: %v", err)
	}
	if _, err := jobs.Create(ctx, as("acme-op", &v1.CreateBmcJobRequest{Job: jobMsg("acme")})); err != nil {
		t.Errorf("operator creates a Job in its organisation: %v", err)
	}
	_, err = jobs.Create(ctx, as("globex-op", &v1.CreateBmcJobRequest{Job: jobMsg("acme")}))
	denied(t, "operator creates a Job in another organisation", err, connect.CodePermissionDenied)
	_, err = jobs.Create(ctx, as("acme-viewer", &v1.CreateBmcJobRequest{Job: jobMsg("acme")}))
	denied(t, "viewer creates a Job", err, connect.CodePermissionDenied)
	if _, err := machines.Get(ctx, as("acme-viewer", &v1.GetRequest{Namespace: "acme", Name: "m"})); err != nil {
		t.Errorf("viewer reads the Machine: %v", err)
	}
	// A Job that is not Rufio's shape is refused with the field named.
	bad := &v1.BmcJob{Metadata: &v1.ObjectMeta{Name: "bad", Namespace: "acme"},
		Spec: mustStruct(t, `{"machineRef":{"name":"m"},"tasks":[{"powerAction":"sideways"}]}`)}
	_, err = jobs.Create(ctx, as("acme-op", &v1.CreateBmcJobRequest{Job: bad}))
	wantCode(t, "a Job with an unknown power action", err, connect.CodeInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), `spec.tasks[0].powerAction: "sideways" is not a power action`) {
		t.Errorf("error %v; want the field and value named", err)
	}
	// A Job may not reach into another organisation's Machines.
	cross := &v1.BmcJob{Metadata: &v1.ObjectMeta{Name: "cross", Namespace: "acme"},
		Spec: mustStruct(t, `{"machineRef":{"name":"g1","namespace":"globex"},"tasks":[{"powerAction":"off"}]}`)}
	_, err = jobs.Create(ctx, as("acme-op", &v1.CreateBmcJobRequest{Job: cross}))
	wantCode(t, "a Job naming another organisation's Machine", err, connect.CodeInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "spec.machineRef.namespace") {
		t.Errorf("error %v; want spec.machineRef.namespace named", err)
	}
}
