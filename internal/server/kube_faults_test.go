package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/test/redfishsim"
)

// Kubernetes mode without its API server: at start, and mid-run. See
// docs/kubernetes.md, "When the API server is away".

// call calls an API method with Connect's JSON protocol (callJSON,
// without a token) and returns the HTTP status and body, whatever they
// are.
func call(t *testing.T, base, method string, msg any) (int, string) {
	t.Helper()
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	return callJSON(t, base, "/anvil.v1."+method, "", string(b))
}

func applyYAML(t *testing.T, base, doc string) (int, string) {
	t.Helper()
	return call(t, base, "ManifestService/Apply", map[string]string{"source": "faults.yaml", "content": doc})
}

// TestKubernetesAPIServerAwayAtStart: `anvil serve --store kubernetes`
// started while its API server is down is alive (/healthz ok, so a
// liveness probe does not restart it) and not ready (/readyz 503 saying
// what it waits for and why: the connection refused); it logs each
// failed attempt with the URL it tried, backing off; and once the API
// server is up it becomes ready and serves the API.
func TestKubernetesAPIServerAwayAtStart(t *testing.T) {
	c, kubeconfig := kubeCluster(t)
	c.KillAPIServer(t)
	base, _, _, _, logs := startUntil(t, "/healthz", func(cfg *Config) {
		cfg.Store = backend.Config{Kind: backend.Kubernetes, Kubeconfig: kubeconfig}
	})

	var body string
	testtool.WaitFor(t, "/readyz to say why it is not ready", func() bool {
		var code int
		code, body = get(t, base+"/readyz")
		if code == http.StatusOK {
			t.Fatalf("/readyz = 200 with the API server down")
		}
		return code == http.StatusServiceUnavailable && strings.Contains(body, "connection refused")
	})
	t.Logf("/readyz while waiting: %s", body)
	if !strings.Contains(body, "opening the store") || !strings.Contains(body, c.URL) {
		t.Errorf("/readyz = %q; want it to say it is opening the store, the URL it tried and the failure", body)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while waiting for the API server; want 200 (alive)", code)
	}
	// Back-off: the first retry of a kind comes after 500ms, the next
	// after 1s (kube store's retryMin, doubled).
	testtool.WaitFor(t, "a second, longer retry in the log", func() bool {
		return strings.Contains(logs.String(), "in=1s")
	})
	if l := logs.String(); !strings.Contains(l, "kube store: list failed; retrying") || !strings.Contains(l, "connection refused") {
		t.Errorf("the log does not say what failed and why:\n%s", l)
	}

	c.RestartAPIServer(t)
	testtool.WaitFor(t, "/readyz ok once the API server is up", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	})
	if code, b := applyYAML(t, base, faultHardware("late-start", "02:00:00:00:0a:01", "127.0.0.9")); code != http.StatusOK {
		t.Fatalf("apply after the API server came up: %d %s", code, b)
	}
}

func faultHardware(name, mac, ip string) string {
	return fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: %s}
spec:
  metadata: {instance: {hostname: %s, id: "%s"}}
  interfaces:
    - dhcp: {mac: "%s", hostname: %s, ip: {address: %s, netmask: 255.0.0.0}}
      netboot: {allowPXE: true, allowWorkflow: true}
`, name, name, mac, mac, name, ip)
}

// TestKubernetesAPIServerLostMidRun: with a workflow created and
// waiting for its machine, the API server stops answering (SIGSTOP, as
// across a partition). The boot script, the metadata and the API's reads
// are still answered, from the caches; a write through the API fails
// with UNAVAILABLE and says why, instead of hanging; /readyz stays ok
// (the replica still serves machines). Then the API server is killed and
// restarted on its etcd: everything acknowledged before is there, the
// caches follow again (an object another tool created meanwhile shows
// up), writes work, and the workflow runs to SUCCESS.
func TestKubernetesAPIServerLostMidRun(t *testing.T) {
	c, kubeconfig := kubeCluster(t)
	base, _, _, _, logs := startWith(t, func(cfg *Config) {
		cfg.Store = backend.Config{Kind: backend.Kubernetes, Kubeconfig: kubeconfig, RequestTimeout: 5 * time.Second}
		cfg.Leader.LeaseDuration = 3 * time.Second
		cfg.NoApplyImageCheck = true
	})

	const mac = "02:00:00:00:0b:01"
	doc := faultHardware("lost-node", mac, "127.0.0.1") + `---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: lost-tpl}
spec:
  data: |
    version: "0.1"
    name: lost-tpl
    global_timeout: 600
    tasks:
      - name: install
        worker: "{{.device_1}}"
        actions:
          - {name: one, image: quay.io/example/one:1, timeout: 60}
          - {name: two, image: quay.io/example/two:1, timeout: 60}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: lost-wf}
spec:
  templateRef: lost-tpl
  hardwareRef: lost-node
  hardwareMap: {device_1: "` + mac + `"}
`
	if code, b := applyYAML(t, base, doc); code != http.StatusOK {
		t.Fatalf("apply: %d %s", code, b)
	}
	testtool.WaitFor(t, "the workflow rendered", func() bool {
		code, b := c.Do(t, http.MethodGet, tinkPath+"workflows/lost-wf", nil, "application/json")
		return code == http.StatusOK && strings.Contains(b2s(b), `"tasks"`)
	})

	type answer struct {
		code int
		body string
	}
	reads := func() map[string]answer {
		m := map[string]answer{}
		code, body := get(t, base+"/ipxe/script/"+mac+"/auto.ipxe")
		m["boot script"] = answer{code, body}
		code, body = getFrom(t, "127.0.0.1", base+"/2009-04-04/meta-data/hostname")
		m["metadata"] = answer{code, body}
		code, body = call(t, base, "WorkflowService/Get", map[string]string{"namespace": "default", "name": "lost-wf"})
		m["API read"] = answer{code, body}
		return m
	}
	before := reads()
	for what, a := range before {
		if a.code != http.StatusOK {
			t.Fatalf("%s before the fault: %d %s", what, a.code, a.body)
		}
	}
	if !strings.Contains(before["boot script"].body, "#!ipxe") || before["metadata"].body != "lost-node" {
		t.Fatalf("before the fault: boot script %q, metadata %q", before["boot script"].body, before["metadata"].body)
	}

	c.PauseAPIServer(t)
	during := reads()
	for what, a := range during {
		if a.code != http.StatusOK {
			t.Errorf("%s with the API server away: %d %s; want it answered from the cache", what, a.code, a.body)
		}
	}
	if during["metadata"] != before["metadata"] || during["API read"].body != before["API read"].body {
		t.Errorf("reads changed with the API server away:\nbefore %v\nduring %v", before, during)
	}
	if !strings.Contains(during["boot script"].body, "#!ipxe") {
		t.Errorf("boot script with the API server away: %q", during["boot script"].body)
	}
	if code, _ := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d with the API server away; want 200: the replica still serves machines", code)
	}
	// A write: no deadline on this side; the store's bound ends it.
	code, b := applyYAML(t, base, faultHardware("during-outage", "02:00:00:00:0b:02", "127.0.0.10"))
	if code != http.StatusServiceUnavailable || !strings.Contains(b, `"unavailable"`) || !strings.Contains(b, "did not answer") {
		t.Errorf("apply with the API server away = %d %s; want 503 unavailable saying the API server did not answer", code, b)
	}

	c.KillAPIServer(t)
	c.RestartAPIServer(t)
	for _, p := range []string{"hardware/lost-node", "templates/lost-tpl", "workflows/lost-wf"} {
		if code, b := c.Do(t, http.MethodGet, tinkPath+p, nil, "application/json"); code != http.StatusOK {
			t.Errorf("%s after the restart: %d %s; acknowledged before the fault, it must be there", p, code, b)
		}
	}
	// Another tool writes while Anvil reconnects: its object shows up.
	c.JSON(t, http.MethodPost, tinkPath+"hardware", map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
		"metadata": map[string]any{"name": "made-by-kubectl", "namespace": "default"},
		"spec":     map[string]any{"interfaces": []any{map[string]any{"dhcp": map[string]any{"mac": "02:00:00:00:0b:03"}}}},
	}, http.StatusCreated)
	testtool.WaitFor(t, "the caches to follow the restarted API server", func() bool {
		code, _ := call(t, base, "HardwareService/Get", map[string]string{"namespace": "default", "name": "made-by-kubectl"})
		return code == http.StatusOK
	})
	testtool.WaitFor(t, "writes through the API to work again", func() bool {
		code, b := applyYAML(t, base, faultHardware("during-outage", "02:00:00:00:0b:02", "127.0.0.10"))
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("apply after the restart: %d %s", code, b)
		}
		return code == http.StatusOK
	})

	agentErr := make(chan error, 1)
	go func() {
		_, err := agentsim.Run(context.Background(), agentsim.Config{
			Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, base),
			AgentID: mac, ActionTime: 10 * time.Millisecond,
		})
		agentErr <- err
	}()
	if err := testtool.Receive(t, agentErr, "the agent's run"); err != nil {
		t.Fatalf("agent: %v\nserver log:\n%s", err, logs)
	}
	testtool.WaitFor(t, "status.state SUCCESS on the API server", func() bool {
		_, b := c.Do(t, http.MethodGet, tinkPath+"workflows/lost-wf", nil, "application/json")
		var wf struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		return json.Unmarshal(b, &wf) == nil && wf.Status.State == "SUCCESS"
	})
}

func b2s(b []byte) string { return string(b) }

// TestKubernetesKubectlSecret: a BMC credential made by kubectl — a plain
// kubernetes.io/basic-auth Secret, as Rufio's users write them — serves
// the Rufio Machine that names it in Kubernetes mode: the power-state
// poller logs in to the BMC (a Redfish service that refuses any other
// password) and reads the machine on. The API lists and shows the Secret
// redacted: its keys, never a value.
func TestKubernetesKubectlSecret(t *testing.T) {
	c, kubeconfig := kubeCluster(t)
	const password = "kubectl-made-pw-7f3a"
	fake := &redfishsim.FakeMachine{}
	if err := fake.PowerOn("Hdd"); err != nil {
		t.Fatal(err)
	}
	sim := redfishsim.Start(t, redfishsim.Config{Username: "admin", Password: password,
		Systems: []redfishsim.System{{ID: "1", Machine: fake}}})

	// What `kubectl create secret generic bmc-auth --type=kubernetes.io/basic-auth
	// --from-literal=username=admin --from-literal=password=…` sends.
	c.JSON(t, http.MethodPost, "/api/v1/namespaces/default/secrets", map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/basic-auth",
		"metadata": map[string]any{"name": "bmc-auth", "namespace": "default"},
		"data": map[string]any{"username": base64.StdEncoding.EncodeToString([]byte("admin")),
			"password": base64.StdEncoding.EncodeToString([]byte(password))},
	}, http.StatusCreated)
	c.JSON(t, http.MethodPost, "/apis/bmc.tinkerbell.org/v1alpha1/namespaces/default/machines", map[string]any{
		"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
		"metadata": map[string]any{"name": "bmc-node", "namespace": "default"},
		"spec": map[string]any{"connection": map[string]any{
			"host": sim.Host, "port": sim.Port, "insecureTLS": true,
			"authSecretRef":   map[string]any{"name": "bmc-auth", "namespace": "default"},
			"providerOptions": map[string]any{"preferredOrder": []any{"redfish"}},
		}},
	}, http.StatusCreated)

	base, _, _, _, logs := startWith(t, func(cfg *Config) {
		cfg.Store = backend.Config{Kind: backend.Kubernetes, Kubeconfig: kubeconfig}
		cfg.BMCPollInterval = time.Hour // one poll at start
	})
	testtool.WaitFor(t, "the Machine's powerState from its BMC", func() bool {
		m := c.JSON(t, http.MethodGet, "/apis/bmc.tinkerbell.org/v1alpha1/namespaces/default/machines/bmc-node", nil, http.StatusOK)
		st, _ := m["status"].(map[string]any)
		if st["powerState"] != nil && st["powerState"] != "on" {
			t.Fatalf("Machine status %v; want powerState on\n%s", st, logs)
		}
		return st["powerState"] == "on"
	})

	for _, q := range []struct{ method, body string }{
		{"CredentialSecretService/List", `{"namespace":"default"}`},
		{"CredentialSecretService/Get", `{"namespace":"default","name":"bmc-auth"}`},
	} {
		code, b := callJSON(t, base, "/anvil.v1."+q.method, "", q.body)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", q.method, code, b)
		}
		var got struct {
			credentialJSON
			Items []credentialJSON `json:"items"`
		}
		if err := json.Unmarshal([]byte(b), &got); err != nil {
			t.Fatalf("%s: %v in %s", q.method, err, b)
		}
		// The list holds Anvil's own anvil-keys too (the replicas'
		// shared keys), redacted as well.
		cred := got.credentialJSON
		for _, it := range got.Items {
			if it.Metadata.Name == "bmc-auth" {
				cred = it
			}
		}
		if cred.Metadata.Name != "bmc-auth" || cred.Type != "kubernetes.io/basic-auth" || !cred.Redacted ||
			strings.Join(cred.Keys, ",") != "password,username" {
			t.Errorf("%s = %s; want bmc-auth, basic-auth, its keys, redacted", q.method, b)
		}
		if strings.Contains(b, password) || strings.Contains(b, base64.StdEncoding.EncodeToString([]byte(password))) {
			t.Errorf("%s shows the password: %s", q.method, b)
		}
	}
}

// credentialJSON is a CredentialSecret as the API's JSON shows it.
type credentialJSON struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Type     string   `json:"type"`
	Keys     []string `json:"keys"`
	Redacted bool     `json:"redacted"`
}
