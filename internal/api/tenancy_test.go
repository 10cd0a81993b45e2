package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/auth/authtest"
	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
)

// acme's secrets, as twoOrgs writes them: no refusal made to globex (or
// by a check of globex's write) may carry them; and globex's, for
// refusals made to acme.
var (
	acmeSecrets   = []string{"acme/n1", `"n1"`, "acme-secret-host", "acme/w1"}
	globexSecrets = []string{"globex/g1", `"g1"`, "globex-host", "globex"}
)

func leaks(t *testing.T, what string, err error, secrets []string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%s: the refusal names %s: %v", what, s, err)
		}
	}
}

func hardwareYAML(ns, name, spec string) string {
	return "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n" + spec
}

func iface(mac, ip string) string {
	s := "  - dhcp: {mac: \"" + mac + "\""
	if ip != "" {
		s += ", ip: {address: " + ip + ", netmask: 255.255.255.0}"
	}
	return s + "}\n"
}

// TestHardwareClaims: a MAC, a reserved IP or an agent ID names one
// machine to DHCP, metadata and agents, which cannot tell organisations
// apart: a Hardware that claims one another Hardware has is refused,
// without naming the other organisation's object, and the refused write
// (one document of a manifest, too) changes nothing.
func TestHardwareClaims(t *testing.T) {
	e, _ := newAuthEnv(t)
	ctx := context.Background()
	applyAs := func(who, content string) error {
		_, err := e.man.Apply(ctx, as(who, &v1.ApplyRequest{Source: "claims.yaml", Content: content}))
		return err
	}
	exists := func(ns, name string) bool {
		_, err := e.st.Get(ctx, model.KindHardware, ns, name)
		return err == nil
	}
	for _, tc := range []struct {
		name, ns, spec, want string
		secrets              []string
	}{
		{name: "acme's MAC, another spelling", ns: "globex", spec: "  interfaces:\n" + iface("52-54-00-0A-00-01", ""),
			want: "MAC 52:54:00:0a:00:01 is already claimed by another organisation's Hardware", secrets: acmeSecrets},
		{name: "acme's IP", ns: "globex", spec: "  interfaces:\n" + iface("52:54:00:0b:00:09", "10.0.1.11"),
			want: "IP address 10.0.1.11 is already reserved by another organisation's Hardware", secrets: acmeSecrets},
		{name: "acme's MAC as agent ID", ns: "globex", spec: "  agentID: \"52:54:00:0a:00:01\"\n  interfaces:\n" + iface("52:54:00:0b:00:09", ""),
			want: "agent ID 52:54:00:0a:00:01 is already used by another organisation's Hardware", secrets: acmeSecrets},
		{name: "same organisation, same MAC", ns: "acme", spec: "  interfaces:\n" + iface("52:54:00:0a:00:01", ""),
			want: "MAC 52:54:00:0a:00:01 is already claimed by Hardware acme/n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Alone through Create, and in a manifest next to a good one.
			_, err := e.hw.Create(ctx, as("admin", &v1.CreateHardwareRequest{Hardware: &v1.Hardware{
				Metadata: &v1.ObjectMeta{Namespace: tc.ns, Name: "dup"}, Spec: specOf(t, tc.spec)}}))
			wantCode(t, "Create", err, connect.CodeInvalidArgument)
			if err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Create: %v; want %q", err, tc.want)
			}
			leaks(t, "Create", err, tc.secrets)
			good := hardwareYAML(tc.ns, "fine", "  interfaces:\n"+iface("52:54:00:0c:00:01", ""))
			err = applyAs("admin", good+"---\n"+hardwareYAML(tc.ns, "dup", tc.spec))
			wantCode(t, "Apply", err, connect.CodeInvalidArgument)
			if err != nil && !strings.Contains(err.Error(), "claims.yaml:") {
				t.Errorf("Apply: %v; want the refusal located in the file", err)
			}
			leaks(t, "Apply", err, tc.secrets)
			if exists(tc.ns, "dup") || exists(tc.ns, "fine") {
				t.Error("a refused write stored something")
			}
		})
	}

	// An update that takes acme's MAC is refused; g1 keeps its own.
	g1, err := e.hw.Get(ctx, as("admin", &v1.GetRequest{Namespace: "globex", Name: "g1"}))
	if err != nil {
		t.Fatal(err)
	}
	g1.Msg.Spec = specOf(t, "  interfaces:\n"+iface("52:54:00:0b:00:01", "")+iface("52:54:00:0a:00:01", ""))
	_, err = e.hw.Update(ctx, as("admin", &v1.UpdateHardwareRequest{Hardware: g1.Msg}))
	wantCode(t, "Update taking acme's MAC", err, connect.CodeInvalidArgument)
	leaks(t, "Update", err, acmeSecrets)

	// Moving a MAC from one Hardware to another in one manifest is fine,
	// and so is applying the same manifest again.
	move := hardwareYAML("acme", "n1", "  interfaces:\n"+iface("52:54:00:0a:00:02", "10.0.1.11")) + "---\n" +
		hardwareYAML("acme", "n2", "  interfaces:\n"+iface("52:54:00:0a:00:01", ""))
	for i := range 2 {
		if err := applyAs("admin", move); err != nil {
			t.Fatalf("apply %d of a MAC moved within acme: %v", i+1, err)
		}
	}
	if err := applyAs("admin", orgDocs("globex")); err != nil {
		t.Errorf("re-applying globex's objects as they are: %v", err)
	}
}

// specOf turns the spec lines of hardwareYAML into the API's Struct.
func specOf(t *testing.T, spec string) *structpb.Struct {
	t.Helper()
	res, err := model.ParseManifests("spec", []byte(hardwareYAML("x", "x", spec)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res.Docs[0].Object.(*model.Hardware).Spec)
	if err != nil {
		t.Fatal(err)
	}
	return mustStruct(t, string(b))
}

// orgDocs is the documents of twoOrgs in namespace ns.
func orgDocs(ns string) string {
	var out []string
	for _, d := range strings.Split(twoOrgs, "---\n") {
		if strings.Contains(d, "namespace: "+ns+"}") {
			out = append(out, d)
		}
	}
	return strings.Join(out, "---\n")
}

// TestForeignWorker: acme's operator cannot make globex's machine the
// worker of a workflow — through its hardwareMap, a template, or a status
// written by hand — at Apply, Create, Update or ProvisionDevice; the
// refusal names only what acme sent and acme's own namespace, and nothing
// is stored.
func TestForeignWorker(t *testing.T) {
	e, _ := newAuthEnv(t)
	ctx := context.Background()
	const op = "acme-op"
	const want = `worker "52:54:00:0b:00:01" is not a MAC or agent ID of any Hardware in namespace acme`
	refused := func(what string, err error) {
		t.Helper()
		wantCode(t, what, err, connect.CodeInvalidArgument)
		if err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", what, err, want)
		}
		leaks(t, what, err, globexSecrets)
	}
	stored := func(name string) bool {
		_, err := e.st.Get(ctx, model.KindWorkflow, "acme", name)
		return err == nil
	}

	evil := `apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: evil, namespace: acme}
spec:
  templateRef: t1
  hardwareRef: n1
  hardwareMap:
    device_1: "52:54:00:0B:00:01"
`
	_, err := e.man.Apply(ctx, as(op, &v1.ApplyRequest{Source: "evil.yaml", Content: evil}))
	refused("Apply", err)
	if err != nil && !strings.Contains(err.Error(), "evil.yaml:8: ") {
		t.Errorf("Apply: %v; want the hardwareMap line (8) named", err)
	}
	_, err = e.wf.Create(ctx, as(op, &v1.CreateWorkflowRequest{Workflow: &v1.Workflow{
		Metadata: &v1.ObjectMeta{Namespace: "acme", Name: "evil"},
		Spec:     mustStruct(t, `{"templateRef":"t1","hardwareRef":"n1","hardwareMap":{"device_1":"52:54:00:0b:00:01"}}`)}}))
	refused("Create", err)
	if stored("evil") {
		t.Error("a refused workflow was stored")
	}

	// A status written by hand names the worker directly.
	w1, err := e.wf.Get(ctx, as(op, &v1.GetRequest{Namespace: "acme", Name: "w1"}))
	if err != nil {
		t.Fatal(err)
	}
	w1.Msg.Status = mustStruct(t, `{"state":"PENDING","tasks":[{"name":"os","agentID":"52:54:00:0b:00:01","actions":[{"name":"write","image":"writefile","timeout":60}]}]}`)
	_, err = e.wf.Update(ctx, as(op, &v1.UpdateWorkflowRequest{Workflow: w1.Msg}))
	refused("Update", err)

	// A template of acme's own that names globex's machine outright.
	hard := `apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: hard, namespace: acme}
spec:
  data: |
    version: "0.1"
    name: hard
    tasks:
    - name: os
      worker: "52:54:00:0b:00:01"
      actions:
      - {name: write, image: writefile, timeout: 60}
---
` + hardwareYAML("acme", "n3", "  interfaces:\n"+iface("52:54:00:0a:00:03", "")) // a machine with no workflow yet
	if _, err := e.man.Apply(ctx, as("admin", &v1.ApplyRequest{Content: hard})); err != nil {
		t.Fatal(err)
	}
	_, err = e.jobs.ProvisionDevice(ctx, as(op, &v1.ProvisionDeviceRequest{Namespace: "acme", DeviceId: "n3", Template: "hard"}))
	refused("ProvisionDevice", err)
	_, err = e.wf.Reprovision(ctx, as(op, &v1.ReprovisionRequest{Namespace: "acme", Hardware: "n3", Template: "hard", Workflow: "again"}))
	refused("Reprovision", err)
	if stored("again") {
		t.Error("a refused reprovision stored its workflow")
	}

	// acme's own machine is acme's to provision.
	own := strings.Replace(strings.Replace(evil, "52:54:00:0B:00:01", "52:54:00:0a:00:01", 1), "name: evil", "name: own", 1)
	if _, err := e.man.Apply(ctx, as(op, &v1.ApplyRequest{Content: own})); err != nil {
		t.Errorf("acme's workflow for its own machine: %v", err)
	}
}

// fleetOfTwo is one machine and template in each of two organisations.
// The test's agents call from 127.0.0.1, which is globex's machine's
// address.
const fleetOfTwo = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: n1, namespace: acme}
spec:
  interfaces:
  - dhcp: {mac: "52:54:00:0a:00:01", hostname: acme-secret-host, ip: {address: 10.0.1.11, netmask: 255.255.255.0}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: g1, namespace: globex}
spec:
  interfaces:
  - dhcp: {mac: "52:54:00:0b:00:01", hostname: globex-host, ip: {address: 127.0.0.1, netmask: 255.0.0.0}}
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

// TestTwoOrganisations puts the holes a probe of a running server found
// through the real connect handlers, with real tokens of two
// organisations (the local issuer's, checked by auth.Verifier as the
// server checks them) and real agent tokens, the engine running:
//   - acme's operator cannot make globex's machine its worker, and a
//     workflow that names it anyway (stored before the check) neither
//     gets globex's agent nor keeps it from globex's own workflow;
//   - tokens signed by the trusted key under another kid, or changed after
//     signing, are refused for what they are;
//   - a revoked token is refused;
//   - no Hardware claims another organisation's MAC;
//
// and no refusal tells one organisation the other's object names.
func TestTwoOrganisations(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	li, err := auth.EnsureLocalIssuer(auth.LocalIssuerDir(data))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	v, err := auth.NewVerifier(ctx, auth.Config{KeyFiles: []string{li.PublicKeyFile()}, Issuer: auth.LocalIssuerName,
		Audience: auth.LocalAudience, RevocationFile: auth.RevocationFile(data), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	cv := auth.NewCachingVerifier(v, 0, 0)
	agentKey, err := auth.NewAgentKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{engine: true, configure: func(c *api.Config) {
		c.AgentKey = agentKey
		c.Authenticate = func(ctx context.Context, h http.Header) (*auth.Principal, error) {
			tok, err := auth.BearerToken(h)
			if err != nil {
				return nil, err
			}
			return cv.Verify(ctx, tok)
		}
	}})
	mint := func(sub, org, role string) string {
		t.Helper()
		tok, err := li.Mint(sub, org, []string{role}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	admin, acme, globex := mint("root", "", auth.RoleAdmin), mint("olga", "acme", auth.RoleOperator), mint("gus", "globex", auth.RoleOperator)
	with := func(tok string, r interface{ Header() http.Header }) {
		r.Header().Set("Authorization", "Bearer "+tok)
	}
	applyAs := func(tok, content string) error {
		r := connect.NewRequest(&v1.ApplyRequest{Source: "t.yaml", Content: content})
		with(tok, r)
		_, err := e.man.Apply(ctx, r)
		return err
	}
	if err := applyAs(admin, fleetOfTwo); err != nil {
		t.Fatalf("the admin applies the fleet: %v", err)
	}

	t.Run("a worker of another organisation", func(t *testing.T) {
		// acme names globex's machine as its worker: refused, naming
		// nothing of globex's.
		evil := `apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: evil, namespace: acme}
spec: {templateRef: t1, hardwareRef: n1, hardwareMap: {device_1: "52:54:00:0b:00:01"}}
`
		err := applyAs(acme, evil)
		wantCode(t, "acme's workflow on globex's machine", err, connect.CodeInvalidArgument)
		leaks(t, "acme's workflow on globex's machine", err, globexSecrets)

		// A workflow stored before that check (straight into the store),
		// older than globex's own: globex's agent gets its own work, not
		// a refusal naming acme's workflow.
		legacy := &model.Workflow{ObjectMeta: model.ObjectMeta{Namespace: "acme", Name: "legacy"},
			Spec: model.WorkflowSpec{TemplateRef: "t1", HardwareRef: "n1", HardwareMap: map[string]string{"device_1": "52:54:00:0b:00:01"}},
			Status: model.WorkflowStatus{State: model.StatePending, Tasks: []model.Task{{ID: "t1", Name: "os", AgentID: "52:54:00:0b:00:01",
				Actions: []model.Action{{ID: "t1a1", Name: "steal", Image: "writefile", State: model.StatePending}}}}}}
		if _, err := e.st.Create(ctx, legacy); err != nil {
			t.Fatal(err)
		}
		mine := `apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: mine, namespace: globex}
spec: {templateRef: t1, hardwareRef: g1, hardwareMap: {device_1: "52:54:00:0b:00:01"}}
`
		if err := applyAs(globex, mine); err != nil {
			t.Fatalf("globex's own workflow: %v", err)
		}
		obj, err := e.st.Get(ctx, model.KindWorkflow, "globex", "mine")
		if err != nil {
			t.Fatal(err)
		}
		var got *v1.GetActionResponse
		for range 20 { // until the engine has rendered globex/mine
			r := connect.NewRequest(&v1.GetActionRequest{AgentId: "52:54:00:0b:00:01", Wait: durationpb.New(5 * time.Second)})
			r.Header().Set(v1.AgentTokenHeader, agentKey.Token("globex/mine", obj.GetObjectMeta().UID))
			resp, err := e.ag.GetAction(ctx, r)
			if connect.CodeOf(err) == connect.CodeNotFound {
				continue
			}
			leaks(t, "globex's agent asks for work", err, []string{"acme", "legacy", "steal"})
			if err != nil {
				t.Fatalf("globex's agent asks for work: %v", err)
			}
			got = resp.Msg
			break
		}
		if got == nil || got.GetWorkflowId() != "globex/mine" || got.GetName() != "write" {
			t.Fatalf("globex's agent got %v; want globex/mine's write", got)
		}
	})
	t.Run("tokens the trusted key did not make", func(t *testing.T) {
		// Signed by the trusted key under another kid, or changed since.
		adminClaims := strings.Split(mint("root", "", auth.RoleAdmin), ".")[1]
		foreignKID := signLocal(t, data, "not-"+li.KeyID(), adminClaims)
		// The same signing under the key's own kid passes: the kid is what
		// the first is refused for.
		r0 := connect.NewRequest(&v1.ListRequest{Namespace: "globex"})
		with(signLocal(t, data, li.KeyID(), adminClaims), r0)
		if _, err := e.hw.List(ctx, r0); err != nil {
			t.Fatalf("the local key's own signing, by hand: %v", err)
		}
		acmeAsGlobex := strings.Split(acme, ".")
		payload, err := base64.RawURLEncoding.DecodeString(acmeAsGlobex[1])
		if err != nil {
			t.Fatal(err)
		}
		acmeAsGlobex[1] = authtest.Segment([]byte(strings.Replace(string(payload), `"org_id":"acme"`, `"org_id":"globex"`, 1)))
		for _, tc := range []struct {
			name, token, want string
		}{
			{"unknown kid", foreignKID, "unknown key"},
			{"acme's token made globex's", strings.Join(acmeAsGlobex, "."), "bad signature"},
		} {
			r := connect.NewRequest(&v1.ListRequest{Namespace: "globex"})
			with(tc.token, r)
			_, err := e.hw.List(ctx, r)
			wantCode(t, tc.name, err, connect.CodeUnauthenticated)
			if err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
			}
		}
	})
	t.Run("claims on another organisation's MAC", func(t *testing.T) {
		err := applyAs(admin, hardwareYAML("globex", "g2", "  interfaces:\n"+iface("52:54:00:0A:00:01", "")))
		wantCode(t, "globex's Hardware with acme's MAC", err, connect.CodeInvalidArgument)
		leaks(t, "globex's Hardware with acme's MAC", err, acmeSecrets)
	})
	t.Run("a revoked token", func(t *testing.T) {
		// Refused once the list is read again (a second later).
		r, err := auth.RevocationOf(acme)
		if err != nil {
			t.Fatal(err)
		}
		if err := auth.Revoke(auth.RevocationFile(data), r, time.Now()); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second)
		lr := connect.NewRequest(&v1.ListRequest{Namespace: "acme"})
		with(acme, lr)
		_, err = e.hw.List(ctx, lr)
		wantCode(t, "acme's revoked token", err, connect.CodeUnauthenticated)
		if err != nil && !strings.Contains(err.Error(), "revoked") {
			t.Errorf("acme's revoked token: %v; want it called revoked", err)
		}
	})
}

// signLocal signs payload (a base64url segment) with the local issuer's
// key in dataDir under kid: a token the issuer would never make.
func signLocal(t *testing.T, dataDir, kid, payload string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(auth.LocalIssuerDir(dataDir), "signing-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("signing key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := json.Marshal(map[string]string{"alg": "ES256", "kid": kid, "typ": "JWT"})
	if err != nil {
		t.Fatal(err)
	}
	input := authtest.Segment(hdr) + "." + payload
	sum := sha256.Sum256([]byte(input))
	r, sig, err := ecdsa.Sign(rand.Reader, k.(*ecdsa.PrivateKey), sum[:])
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 64) // RFC 7518 section 3.4: R and S, 32 bytes each
	r.FillBytes(raw[:32])
	sig.FillBytes(raw[32:])
	return authtest.Join(input, raw)
}
