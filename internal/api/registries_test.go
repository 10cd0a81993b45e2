package api_test

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-containerregistry/pkg/authn"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/oci"
)

// registryManifest: a Hardware whose annotation mirrors quay.io to its
// rack's registry (with that registry's credentials), and a workflow of
// one action asking for a container.
const registryManifest = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: node1
  annotations:
    anvil.dev/registries: '{"mirrors":{"quay.io":"https://rack7.lab:5000"},"auths":{"rack7.lab:5000":{"username":"rack","password":"rack-pw"}}}'
spec:
  interfaces:
    - dhcp: {mac: "3c:ec:ef:00:00:01"}
      netboot: {allowPXE: true, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: t1}
spec:
  data: |
    version: "0.1"
    name: t1
    tasks:
      - name: install
        worker: "{{.device_1}}"
        actions:
          - {name: oci, image: "quay.io/tinkerbell/actions/oci2disk:v1.0.0", runtime: container, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: wf1}
spec:
  templateRef: t1
  hardwareRef: node1
  hardwareMap: {device_1: "3c:ec:ef:00:00:01"}
`

// TestGetActionImageSources: the action comes with how to pull its image:
// the Hardware's mirror over the server's, that mirror's credentials and
// no other registry's, and its runtime.
func TestGetActionImageSources(t *testing.T) {
	server, err := oci.Settings{
		Mirrors: map[string]string{"quay.io": "http://10.0.0.2:5000"},
		CAs:     map[string]string{"rack7.lab:5000": testCAPEM(t)},
		Auths: map[string]authn.AuthConfig{
			"10.0.0.2:5000": {Username: "server", Password: "server-pw"},
			"quay.io":       {Username: "quay", Password: "quay-pw"},
		},
	}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{engine: true, configure: func(c *api.Config) { c.Registries = server }})
	if _, err := apply(e, registryManifest, false); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	a := firstAction(t, e, "3c:ec:ef:00:00:01")
	if a.GetRuntime() != "container" || len(a.GetImages()) != 1 {
		t.Fatalf("GetAction = %v; want runtime container and one image source", a)
	}
	src := a.GetImages()[0]
	if src.GetImage() != "quay.io/tinkerbell/actions/oci2disk:v1.0.0" || src.GetRef() != "rack7.lab:5000/tinkerbell/actions/oci2disk:v1.0.0" ||
		src.GetMirror() != "https://rack7.lab:5000" || src.GetPlainHttp() || src.GetCaPem() == "" || src.GetError() != "" {
		t.Errorf("image source %v; want the Hardware's mirror with the server's CA for it", src)
	}
	if c := src.GetCredentials(); c.GetUsername() != "rack" || c.GetPassword() != "rack-pw" {
		t.Errorf("credentials %v; want the rack mirror's", c)
	}
	// Only the registry asked gets its credentials: no other registry's
	// are anywhere in the response.
	text := a.String()
	for _, secret := range []string{"server-pw", "quay-pw"} {
		if strings.Contains(text, secret) {
			t.Errorf("the response carries %q, the credentials of a registry the image is not pulled from:\n%s", secret, text)
		}
	}
}

// firstAction waits for the engine to render the workflow and returns
// the agent's first action.
func firstAction(t *testing.T, e *env, agentID string) *v1.GetActionResponse {
	t.Helper()
	for range 20 { // the engine renders the workflow asynchronously
		r, err := e.ag.GetAction(context.Background(), connect.NewRequest(&v1.GetActionRequest{AgentId: agentID, Wait: durationpb.New(5 * time.Second)}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg
	}
	t.Fatal("no action")
	return nil
}

// TestGetActionWaitDaemonImage: a waitdaemon action comes with how to
// pull its IMAGE too, resolved by the same settings as its own image: the
// agent pulls IMAGE before it reports the action.
func TestGetActionWaitDaemonImage(t *testing.T) {
	server, err := oci.Settings{Mirrors: map[string]string{"quay.io": "http://10.0.0.2:5000"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{engine: true, configure: func(c *api.Config) { c.Registries = server }})
	manifest := strings.Replace(registryManifest,
		`{name: oci, image: "quay.io/tinkerbell/actions/oci2disk:v1.0.0", runtime: container, timeout: 60}`,
		`{name: kexec, image: "ghcr.io/jacobweinstock/waitdaemon:latest", timeout: 90, pid: host, environment: {IMAGE: "quay.io/tinkerbell/actions/kexec:v1.0.0", WAIT_SECONDS: "10"}}`, 1)
	if _, err := apply(e, manifest, false); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	a := firstAction(t, e, "3c:ec:ef:00:00:01")
	var got []string
	for _, src := range a.GetImages() {
		got = append(got, src.GetImage()+" -> "+src.GetRef()+" via "+src.GetMirror())
	}
	want := []string{
		"ghcr.io/jacobweinstock/waitdaemon:latest -> ghcr.io/jacobweinstock/waitdaemon:latest via ",
		"quay.io/tinkerbell/actions/kexec:v1.0.0 -> rack7.lab:5000/tinkerbell/actions/kexec:v1.0.0 via https://rack7.lab:5000",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("image sources:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c := a.GetImages()[1].GetCredentials(); c.GetUsername() != "rack" {
		t.Errorf("IMAGE's credentials %v; want the rack mirror's", c)
	}
}

// testCAPEM is a real certificate in PEM, for a CA setting.
func testCAPEM(t *testing.T) string {
	t.Helper()
	srv := httptest.NewTLSServer(nil)
	defer srv.Close()
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}

// TestGetActionServerRuntime: the server's ActionRuntime (anvil serve
// --action-runtime) is the runtime of an action whose template names
// none; one the template names wins.
func TestGetActionServerRuntime(t *testing.T) {
	for _, tc := range []struct{ action, want string }{
		{action: `{name: hostname, image: "quay.io/tinkerbell/actions/writefile:v1.0.0", timeout: 60}`, want: "container"},
		{action: `{name: hostname, image: "quay.io/tinkerbell/actions/writefile:v1.0.0", runtime: native, timeout: 60}`, want: "native"},
	} {
		e := newEnv(t, envOptions{engine: true, configure: func(c *api.Config) { c.ActionRuntime = "container" }})
		manifest := strings.Replace(registryManifest,
			`{name: oci, image: "quay.io/tinkerbell/actions/oci2disk:v1.0.0", runtime: container, timeout: 60}`, tc.action, 1)
		if _, err := apply(e, manifest, false); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if got := firstAction(t, e, "3c:ec:ef:00:00:01").GetRuntime(); got != tc.want {
			t.Errorf("%s: runtime %q; want %q", tc.action, got, tc.want)
		}
	}
}
