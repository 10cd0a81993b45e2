package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/secrets"
)

// principals stand in for verified tokens: "Authorization: Bearer NAME".
// (Token verification itself is internal/auth's, tested there and end to
// end in internal/server.)
var principals = map[string]*auth.Principal{
	"admin":       {Subject: "admin", Roles: []string{auth.RoleAdmin}},
	"acme-viewer": {Subject: "acme-viewer", Org: "acme", Roles: []string{auth.RoleViewer}},
	"acme-op":     {Subject: "acme-op", Org: "acme", Roles: []string{auth.RoleOperator}},
	"globex-op":   {Subject: "globex-op", Org: "globex", Roles: []string{auth.RoleOperator}},
}

func testAuthenticate(_ context.Context, h http.Header) (*auth.Principal, error) {
	name, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, errors.New("no bearer token")
	}
	p, ok := principals[name]
	if !ok {
		return nil, errors.New("unknown token")
	}
	return p, nil
}

// as returns a request carrying who's credentials.
func as[T any](who string, m *T) *connect.Request[T] {
	r := connect.NewRequest(m)
	r.Header().Set("Authorization", "Bearer "+who)
	return r
}

// twoOrgs is one machine, template and workflow in each of two
// organisations.
const twoOrgs = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: n1, namespace: acme}
spec:
  interfaces:
  - dhcp: {mac: "52:54:00:0a:00:01", hostname: acme-secret-host, ip: {address: 10.0.1.11, netmask: 255.255.255.0}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: t1, namespace: acme}
spec:
  data: |
    version: "0.1"
    name: t1
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - {name: write, image: writefile, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w1, namespace: acme}
spec: {templateRef: t1, hardwareRef: n1, hardwareMap: {device_1: "52:54:00:0a:00:01"}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: g1, namespace: globex}
spec:
  interfaces:
  - dhcp: {mac: "52:54:00:0b:00:01", hostname: globex-host, ip: {address: 10.0.2.11, netmask: 255.255.255.0}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: t1, namespace: globex}
spec:
  data: |
    version: "0.1"
    name: t1
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - {name: write, image: writefile, timeout: 60}
`

// newAuthEnv is an API with the test principals, an audit log and
// twoOrgs applied; more, if given, change its configuration further.
func newAuthEnv(t *testing.T, more ...func(*api.Config)) (*env, *audit.Log) {
	t.Helper()
	al, err := audit.Open(filepath.Join(t.TempDir(), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	e := newEnv(t, envOptions{configure: func(c *api.Config) {
		c.Authenticate = testAuthenticate
		c.Audit = al
		for _, f := range more {
			f(c)
		}
	}})
	if _, err := e.man.Apply(context.Background(), as("admin", &v1.ApplyRequest{Source: "orgs.yaml", Content: twoOrgs})); err != nil {
		t.Fatalf("Apply as admin: %v", err)
	}
	return e, al
}

// denied checks that err is PERMISSION_DENIED (or another refusal) and
// leaks none of the other organisation's data.
func denied(t *testing.T, what string, err error, want connect.Code) {
	t.Helper()
	wantCode(t, what, err, want)
	if err != nil {
		for _, secret := range []string{"acme-secret-host", "10.0.1.11", "52:54:00:0a:00:01"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the refusal leaks %q: %v", what, secret, err)
			}
		}
	}
}

func TestCrossOrganisation(t *testing.T) {
	e, _ := newAuthEnv(t)
	ctx := context.Background()
	const bob = "globex-op"
	pd := connect.CodePermissionDenied

	_, err := e.hw.Get(ctx, as(bob, &v1.GetRequest{Namespace: "acme", Name: "n1"}))
	denied(t, "get acme's hardware", err, pd)
	_, err = e.wf.Get(ctx, as(bob, &v1.GetRequest{Namespace: "acme", Name: "w1"}))
	denied(t, "get acme's workflow", err, pd)
	_, err = e.hw.List(ctx, as(bob, &v1.ListRequest{Namespace: "acme"}))
	denied(t, "list acme's hardware", err, pd)
	_, err = e.wf.Delete(ctx, as(bob, &v1.DeleteRequest{Namespace: "acme", Name: "w1"}))
	denied(t, "delete acme's workflow", err, pd)
	_, err = e.wf.Reprovision(ctx, as(bob, &v1.ReprovisionRequest{Namespace: "acme", Hardware: "n1", Template: "t1"}))
	denied(t, "reprovision acme's hardware", err, pd)
	_, err = e.man.Apply(ctx, as(bob, &v1.ApplyRequest{Content: strings.Replace(twoOrgs[:strings.Index(twoOrgs, "---")], "hostname: acme-secret-host", "hostname: pwned", 1)}))
	denied(t, "apply over acme's hardware", err, pd)
	_, err = e.logs.GetLogs(ctx, as(bob, &v1.GetLogsRequest{Mac: "52:54:00:0A:00:01"}))
	denied(t, "logs of acme's machine by MAC", err, pd)
	_, err = e.logs.GetLogs(ctx, as(bob, &v1.GetLogsRequest{Ip: "10.0.1.11"}))
	denied(t, "logs of acme's machine by IP", err, pd)
	_, err = e.logs.GetLogs(ctx, as(bob, &v1.GetLogsRequest{WorkflowId: "acme/w1"}))
	denied(t, "logs of acme's workflow", err, pd)
	_, err = e.logs.ListUnknownMachines(ctx, as(bob, &v1.ListUnknownMachinesRequest{}))
	denied(t, "unknown machines (no organisation's)", err, pd)
	// A workflow created in acme's namespace by globex is refused before
	// it is stored.
	_, err = e.wf.Create(ctx, as(bob, &v1.CreateWorkflowRequest{Workflow: &v1.Workflow{
		Metadata: &v1.ObjectMeta{Namespace: "acme", Name: "evil"},
		Spec:     mustStruct(t, `{"templateRef":"t1","hardwareRef":"n1"}`)}}))
	denied(t, "create a workflow in acme", err, pd)
	if _, err := e.st.Get(ctx, "Workflow", "acme", "evil"); err == nil {
		t.Error("the refused workflow was stored")
	}

	// Watch: refused at once.
	ws, err := e.hw.Watch(ctx, as(bob, &v1.WatchRequest{Namespace: "acme"}))
	if err == nil {
		ws.Receive()
		err = ws.Err()
		ws.Close()
	}
	denied(t, "watch acme's hardware", err, pd)

	// An unscoped list is the caller's organisation, never everyone's.
	l, err := e.hw.List(ctx, as(bob, &v1.ListRequest{}))
	if err != nil {
		t.Fatalf("unscoped list: %v", err)
	}
	if n := len(l.Msg.GetItems()); n != 1 || l.Msg.GetItems()[0].GetMetadata().GetNamespace() != "globex" {
		t.Errorf("globex's unscoped list = %d items %v; want only globex/g1", n, l.Msg.GetItems())
	}
	// Its own organisation's objects it reads and provisions.
	if _, err := e.hw.Get(ctx, as(bob, &v1.GetRequest{Namespace: "globex", Name: "g1"})); err != nil {
		t.Errorf("get own hardware: %v", err)
	}
	if _, err := e.wf.Reprovision(ctx, as(bob, &v1.ReprovisionRequest{Namespace: "globex", Hardware: "g1", Template: "t1"})); err != nil {
		t.Errorf("reprovision own hardware: %v", err)
	}
	// The admin sees both.
	l, err = e.hw.List(ctx, as("admin", &v1.ListRequest{}))
	if err != nil || len(l.Msg.GetItems()) != 2 {
		t.Errorf("admin's list: %v, %v; want both organisations' hardware", l, err)
	}
}

func TestRoles(t *testing.T) {
	e, _ := newAuthEnv(t)
	ctx := context.Background()
	_, err := e.wf.Reprovision(ctx, as("acme-viewer", &v1.ReprovisionRequest{Namespace: "acme", Hardware: "n1", Template: "t1"}))
	denied(t, "viewer reprovisions", err, connect.CodePermissionDenied)
	if err != nil && !strings.Contains(err.Error(), `"provision"`) {
		t.Errorf("the refusal does not name the missing permission: %v", err)
	}
	if _, err := e.hw.Get(ctx, as("acme-viewer", &v1.GetRequest{Namespace: "acme", Name: "n1"})); err != nil {
		t.Errorf("viewer reads: %v", err)
	}
	_, err = e.hw.Delete(ctx, as("acme-op", &v1.DeleteRequest{Namespace: "acme", Name: "n1"}))
	denied(t, "operator deletes hardware", err, connect.CodePermissionDenied)
	_, err = e.hw.List(ctx, as("acme-op", &v1.ListRequest{Namespace: "acme"}))
	if err != nil {
		t.Errorf("operator lists: %v", err)
	}
	// Operators may cancel work they started: deleting a workflow is
	// admin's; reprovisioning is theirs.
	if _, err := e.wf.Reprovision(ctx, as("acme-op", &v1.ReprovisionRequest{Namespace: "acme", Hardware: "n1", Template: "t1", Workflow: "w2"})); err == nil {
		t.Error("reprovision while w1 is unfinished was accepted")
	}

	for _, c := range []struct{ name, header string }{
		{"no header", ""},
		{"not bearer", "Basic YWRtaW46YWRtaW4="},
		{"unknown token", "Bearer mallory"},
	} {
		r := connect.NewRequest(&v1.ListRequest{})
		if c.header != "" {
			r.Header().Set("Authorization", c.header)
		}
		_, err := e.hw.List(ctx, r)
		wantCode(t, c.name, err, connect.CodeUnauthenticated)
	}
}

func TestAuditLog(t *testing.T) {
	e, al := newAuthEnv(t)
	ctx := context.Background()
	_, _ = e.hw.Delete(ctx, as("globex-op", &v1.DeleteRequest{Namespace: "acme", Name: "n1"}))
	_, _ = e.wf.Reprovision(ctx, as("globex-op", &v1.ReprovisionRequest{Namespace: "globex", Hardware: "g1", Template: "t1", Workflow: "g1-again"}))
	_, _ = e.hw.List(ctx, as("globex-op", &v1.ListRequest{})) // not mutating: not audited
	r := connect.NewRequest(&v1.DeleteRequest{Namespace: "acme", Name: "n1"})
	_, _ = e.hw.Delete(ctx, r) // no credentials

	recs, err := al.List(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s %s %s ns=%s %s", r.Subject, r.Procedure, r.Outcome, r.Namespace, r.Object))
		if r.ClientIP != "127.0.0.1" {
			t.Errorf("record %+v: client IP %q, want 127.0.0.1", r, r.ClientIP)
		}
	}
	want := []string{
		"admin /anvil.v1.ManifestService/Apply ok ns= source=orgs.yaml",
		"globex-op /anvil.v1.HardwareService/Delete permission_denied ns=acme name=n1",
		"globex-op /anvil.v1.WorkflowService/Reprovision ok ns=globex hardware=g1 template=t1 workflow=g1-again",
		// Refused before its body was read (gate.go): the object it
		// named is not known, and no organisation's viewer sees it.
		" /anvil.v1.HardwareService/Delete unauthenticated ns= ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Through the API: an organisation's viewer sees what touched it; the
	// admin everything.
	list := func(who string) []string {
		resp, err := e.aud.List(ctx, as(who, &v1.ListAuditRequest{}))
		if err != nil {
			t.Fatalf("audit list as %s: %v", who, err)
		}
		var out []string
		for _, r := range resp.Msg.GetRecords() {
			out = append(out, r.GetSubject()+" "+r.GetProcedure()+" "+r.GetOutcome())
		}
		return out
	}
	if got := list("acme-viewer"); len(got) != 1 {
		t.Errorf("acme's viewer sees %d records %q; want the one naming acme", len(got), got)
	}
	if got := list("admin"); len(got) != 4 {
		t.Errorf("admin sees %d records; want 4", len(got))
	}
	_, err = e.aud.List(ctx, as("acme-viewer", &v1.ListAuditRequest{Namespace: "globex"}))
	wantCode(t, "acme lists globex's audit", err, connect.CodePermissionDenied)
}

// agentFixture: two machines of one organisation, each with a workflow; the
// test's agent calls from 127.0.0.1, which only m1's Hardware lists.
const agentFixture = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m1}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:00:00:01", ip: {address: 127.0.0.1, netmask: 255.0.0.0}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m2}
spec:
  interfaces:
  - dhcp: {mac: "3c:ec:ef:00:00:02", ip: {address: 10.9.9.9, netmask: 255.0.0.0}}
    netboot: {allowPXE: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: t}
spec:
  data: |
    version: "0.1"
    name: t
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - {name: write, image: writefile, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w1}
spec: {templateRef: t, hardwareRef: m1, hardwareMap: {device_1: "3c:ec:ef:00:00:01"}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: w2}
spec: {templateRef: t, hardwareRef: m2, hardwareMap: {device_1: "3c:ec:ef:00:00:02"}}
`

func TestForgedAgentReports(t *testing.T) {
	key, err := auth.NewAgentKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{engine: true, configure: func(c *api.Config) { c.AgentKey = key }})
	ctx := context.Background()
	if _, err := apply(e, agentFixture, false); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		obj, err := e.st.Get(ctx, "Workflow", "default", name)
		if err != nil {
			t.Fatal(err)
		}
		return key.Token("default/"+name, obj.GetObjectMeta().UID)
	}
	withToken := func(tok string, r interface{ Header() http.Header }) {
		if tok != "" {
			r.Header().Set(v1.AgentTokenHeader, tok)
		}
	}
	getAction := func(agent, tok string) (*v1.GetActionResponse, error) {
		for range 20 {
			r := connect.NewRequest(&v1.GetActionRequest{AgentId: agent, Wait: durationpb.New(5 * time.Second)})
			withToken(tok, r)
			resp, err := e.ag.GetAction(ctx, r)
			if connect.CodeOf(err) == connect.CodeNotFound {
				continue // not rendered yet
			}
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		}
		t.Fatal("no action after 20 polls")
		return nil, nil
	}
	var a *v1.GetActionResponse // m1's first action; its IDs serve every report
	report := func(wf, agent, tok string) error {
		r := connect.NewRequest(&v1.ReportActionStatusRequest{WorkflowId: wf, AgentId: agent, TaskId: a.GetTaskId(), ActionId: a.GetActionId(),
			ActionName: "write", ActionState: v1.ActionState_ACTION_STATE_RUNNING})
		withToken(tok, r)
		_, err := e.ag.ReportActionStatus(ctx, r)
		return err
	}
	t1, t2 := token("w1"), token("w2")

	a, err = getAction("3c:ec:ef:00:00:01", t1)
	if err != nil || a.GetWorkflowId() != "default/w1" {
		t.Fatalf("m1's agent with its token: %v, %v", a, err)
	}
	_, err = getAction("3c:ec:ef:00:00:01", "")
	wantCode(t, "GetAction without a token", err, connect.CodeUnauthenticated)
	// A refusal names no workflow: GetAction's is the engine's choice, and
	// none is the caller's to learn.
	refused := func(what string, err error) {
		t.Helper()
		wantCode(t, what, err, connect.CodePermissionDenied)
		if err != nil && (strings.Contains(err.Error(), "default/") || strings.Contains(err.Error(), "w2")) {
			t.Errorf("%s: the refusal names a workflow: %v", what, err)
		}
	}
	_, err = getAction("3c:ec:ef:00:00:02", t1)
	refused("GetAction for m2 with m1's token", err)
	refused("report on w2 with w1's token", report("default/w2", "3c:ec:ef:00:00:02", t1))
	refused("report on w2 as m1's agent with w2's token", report("default/w2", "3c:ec:ef:00:00:01", t2))
	refused("report on w2 with its token from m1's address", report("default/w2", "3c:ec:ef:00:00:02", t2))
	refused("report on an unknown workflow", report("default/nope", "3c:ec:ef:00:00:01", t1))
	refused("report with a malformed token", report("default/w1", "3c:ec:ef:00:00:01", "v1.AAAA"))

	// Log lines for another workflow are refused; none is stored.
	stream := e.ag.StreamLogs(ctx)
	stream.RequestHeader().Set(v1.AgentTokenHeader, t1)
	_ = stream.Send(&v1.LogLine{WorkflowId: "default/w2", AgentId: "3c:ec:ef:00:00:02", Line: "forged"})
	_, err = stream.CloseAndReceive()
	wantCode(t, "log lines for w2 with w1's token", err, connect.CodePermissionDenied)
	if lines, err := e.ls.Read("default/w2", "", 0); err != nil || len(lines) != 0 {
		t.Errorf("w2's log after the forged stream: %v, %v; want none", lines, err)
	}

	// The forged reports changed nothing: w2 has not started.
	obj, err := e.st.Get(ctx, "Workflow", "default", "w2")
	if err != nil {
		t.Fatal(err)
	}
	if b := fmt.Sprint(obj); strings.Contains(b, "RUNNING") {
		t.Errorf("w2 after forged reports: %s; want not started", b)
	}
	// m1's own report and lines pass.
	if err := report("default/w1", "3c:ec:ef:00:00:01", t1); err != nil {
		t.Errorf("m1's own report: %v", err)
	}
	stream = e.ag.StreamLogs(ctx)
	stream.RequestHeader().Set(v1.AgentTokenHeader, t1)
	_ = stream.Send(&v1.LogLine{AgentId: "3c:ec:ef:00:00:01", Stream: "agent", Line: "agent up"})
	_ = stream.Send(&v1.LogLine{WorkflowId: "default/w1", AgentId: "3c:ec:ef:00:00:01", Line: "writing"})
	resp, err := stream.CloseAndReceive()
	if err != nil || resp.Msg.GetLinesAccepted() != 2 {
		t.Errorf("m1's own lines: %v, %v; want 2 accepted", resp, err)
	}
}

func TestSecretsAdminOnly(t *testing.T) {
	st, err := secrets.Open(secrets.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	token, err := st.Secret("acme", "kubeadm-token", secrets.KindKubeadmToken)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{configure: func(c *api.Config) {
		c.Authenticate = testAuthenticate
		c.Secrets = st
	}})
	ctx := context.Background()
	svc := anvilv1connect.NewSecretServiceClient(e.http, e.url, connect.WithGRPC())
	// Even the organisation's own operator may not read its secrets.
	_, err = svc.Get(ctx, as("acme-op", &v1.GetSecretRequest{Namespace: "acme", Name: "kubeadm-token"}))
	denied(t, "operator reads a secret", err, connect.CodePermissionDenied)
	if err != nil && strings.Contains(err.Error(), token) {
		t.Error("the refusal carries the secret")
	}
	_, err = svc.List(ctx, as("acme-viewer", &v1.ListSecretsRequest{}))
	denied(t, "viewer lists secrets", err, connect.CodePermissionDenied)
	l, err := svc.List(ctx, as("admin", &v1.ListSecretsRequest{}))
	if err != nil || len(l.Msg.GetSecrets()) != 1 || l.Msg.GetSecrets()[0].GetKind() != secrets.KindKubeadmToken {
		t.Fatalf("admin's list: %v, %v; want the one kubeadm token", l, err)
	}
	g, err := svc.Get(ctx, as("admin", &v1.GetSecretRequest{Namespace: "acme", Name: "kubeadm-token"}))
	if err != nil || g.Msg.GetValue() != token {
		t.Errorf("admin's get: %v, %v; want the token", g, err)
	}
	_, err = svc.Get(ctx, as("admin", &v1.GetSecretRequest{Namespace: "acme", Name: "nope"}))
	wantCode(t, "get an unknown secret", err, connect.CodeNotFound)
}
