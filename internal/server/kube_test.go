package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/deploy/crds/crdstest"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/testtool"
)

// kubeCluster starts a kube-apiserver with Anvil's CRDs and returns it
// with a kubeconfig file for it.
func kubeCluster(t *testing.T) (*kubetest.Cluster, string) {
	t.Helper()
	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	crdstest.Install(t, c, defs)
	return c, c.WriteKubeconfig(t, t.TempDir())
}

const tinkPath = "/apis/tinkerbell.org/v1alpha1/namespaces/default/"

// TestKubernetesCAPTFlow plays cluster-api-provider-tinkerbell's part
// against `anvil serve --store kubernetes`, with CAPT's manifest shapes
// sent straight to the API server as client-go sends them: the user's
// Hardware (with a field Anvil does not model), CAPT's ownership labels on
// it, a Template and a Workflow per machine owned by the TinkerbellMachine.
// A simulated agent runs the workflow; CAPT's wait is the Workflow's
// status read from the API server: SUCCESS, every action with its state
// and times, currentState, and the Hardware's allowPXE switched off so
// the next boot goes to disk — with the unknown field still there.
func TestKubernetesCAPTFlow(t *testing.T) {
	c, kubeconfig := kubeCluster(t)
	httpBase, _, _, _, logs := startWith(t, func(cfg *Config) {
		cfg.Store = backend.Config{Kind: backend.Kubernetes, Kubeconfig: kubeconfig}
	})

	const mac = "3c:ec:ef:12:34:07"
	c.JSON(t, http.MethodPost, tinkPath+"hardware", map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
		"metadata": map[string]any{"name": "node07", "namespace": "default"},
		"spec": map[string]any{
			"disks": []any{map[string]any{"device": "/dev/sda"}},
			"interfaces": []any{map[string]any{
				"dhcp":    map[string]any{"mac": mac, "ip": map[string]any{"address": "10.20.0.7", "netmask": "255.255.255.0"}, "hostname": "node07"},
				"netboot": map[string]any{"allowPXE": true, "allowWorkflow": true},
			}},
			"metadata":       map[string]any{"instance": map[string]any{"hostname": "node07", "id": mac}},
			"vendorSpecific": map[string]any{"rackUnit": "U17"}, // not Anvil's: must survive its writes
		},
	}, http.StatusCreated)
	// CAPT claims the Hardware with labels.
	if code, b := c.MergePatch(t, tinkPath+"hardware/node07", map[string]any{"metadata": map[string]any{"labels": map[string]any{
		"v1alpha1.tinkerbell.org/ownerName": "capi-md-0-x7k2p", "v1alpha1.tinkerbell.org/ownerNamespace": "default"}}}); code != http.StatusOK {
		t.Fatalf("label Hardware: %d %s", code, b)
	}
	owner := []any{map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellMachine",
		"name": "capi-md-0-x7k2p", "uid": "2f9a3c1e-6a0b-4a53-9c43-3d2b9a1f0c11", "controller": true}}
	c.JSON(t, http.MethodPost, tinkPath+"templates", map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
		"metadata": map[string]any{"name": "capi-md-0-x7k2p", "namespace": "default", "ownerReferences": owner},
		"spec": map[string]any{"data": `version: "0.1"
name: capi-md-0-x7k2p
global_timeout: 6000
tasks:
  - name: capi-md-0-x7k2p
    worker: "{{.device_1}}"
    volumes: [/dev:/dev, /dev/console:/dev/console]
    actions:
      - name: stream-image
        image: ghcr.io/tinkerbell/actions/oci2disk:latest
        timeout: 600
        environment: {IMG_URL: "http://10.20.0.2:7080/images/ubuntu-2404-kube-v1.31.raw.gz", DEST_DISK: /dev/sda, COMPRESSED: "true"}
      - name: add-cloud-init
        image: ghcr.io/tinkerbell/actions/writefile:latest
        timeout: 90
        environment: {DEST_DISK: /dev/sda2, FS_TYPE: ext4, DEST_PATH: /etc/cloud/cloud.cfg.d/10_tinkerbell.cfg, CONTENTS: "datasource: Ec2", UID: "0", GID: "0", MODE: "0600"}
      - name: reboot
        image: ghcr.io/jacobweinstock/waitdaemon:latest
        timeout: 90
        pid: host
        command: [reboot]
`},
	}, http.StatusCreated)
	c.JSON(t, http.MethodPost, tinkPath+"workflows", map[string]any{
		"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
		"metadata": map[string]any{"name": "capi-md-0-x7k2p", "namespace": "default", "ownerReferences": owner},
		"spec": map[string]any{"templateRef": "capi-md-0-x7k2p", "hardwareRef": "node07",
			"hardwareMap": map[string]any{"device_1": mac}, "bootOptions": map[string]any{"toggleAllowNetboot": true}},
	}, http.StatusCreated)

	// The engine renders the workflow from the cluster's objects.
	testtool.WaitFor(t, "the workflow rendered into status.tasks", func() bool {
		return len(workflowStatus(t, c).Tasks) == 1
	})
	agentErr := make(chan error, 1)
	go func() {
		_, err := agentsim.Run(context.Background(), agentsim.Config{
			Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, httpBase),
			AgentID: mac, ActionTime: 10 * time.Millisecond, StreamLogs: true,
		})
		agentErr <- err
	}()
	if err := testtool.Receive(t, agentErr, "the agent's run"); err != nil {
		t.Fatalf("agent: %v\nserver log:\n%s", err, logs)
	}

	var st tinkWorkflowStatus
	testtool.WaitFor(t, "status.state SUCCESS on the API server", func() bool {
		st = workflowStatus(t, c)
		return st.State == "SUCCESS"
	})
	if len(st.Tasks) != 1 || len(st.Tasks[0].Actions) != 3 || st.Tasks[0].AgentID != mac {
		t.Fatalf("status.tasks = %+v; want one task of 3 actions on agent %s", st.Tasks, mac)
	}
	for _, a := range st.Tasks[0].Actions {
		if a.State != "SUCCESS" || a.ExecutionStart == "" || a.ExecutionStop == "" || a.ExecutionDuration == "" {
			t.Errorf("action %s: state %q, start %q, stop %q, duration %q; want SUCCESS with its times", a.Name, a.State, a.ExecutionStart, a.ExecutionStop, a.ExecutionDuration)
		}
	}
	if cs := st.CurrentState; cs == nil || cs.State != "SUCCESS" || cs.ActionName != "reboot" || cs.AgentID != mac {
		t.Errorf("status.currentState = %+v; want the last action, reboot, SUCCESS", cs)
	}

	// The engine switches allowPXE off when it reconciles the workflow
	// that an agent's last report made SUCCESS: just after, as
	// Tinkerbell's controller does.
	var hw, spec, nb map[string]any
	testtool.WaitFor(t, "allowPXE switched off after success", func() bool {
		hw = c.JSON(t, http.MethodGet, tinkPath+"hardware/node07", nil, http.StatusOK)
		spec = hw["spec"].(map[string]any)
		nb = spec["interfaces"].([]any)[0].(map[string]any)["netboot"].(map[string]any)
		return nb["allowPXE"] == false
	})
	if nb["allowWorkflow"] != true {
		t.Errorf("Hardware netboot after success = %v; want allowPXE false (toggleAllowNetboot), allowWorkflow true", nb)
	}
	if v, _ := spec["vendorSpecific"].(map[string]any); v["rackUnit"] != "U17" {
		t.Errorf("Hardware spec.vendorSpecific = %v after Anvil's writes; want it kept", spec["vendorSpecific"])
	}
	if l := hw["metadata"].(map[string]any)["labels"].(map[string]any); l["v1alpha1.tinkerbell.org/ownerName"] != "capi-md-0-x7k2p" {
		t.Errorf("CAPT's ownership label lost: %v", l)
	}
	wf := c.JSON(t, http.MethodGet, tinkPath+"workflows/capi-md-0-x7k2p", nil, http.StatusOK)
	if refs, _ := wf["metadata"].(map[string]any)["ownerReferences"].([]any); len(refs) != 1 {
		t.Errorf("Workflow ownerReferences = %v; want CAPT's, kept", refs)
	}
}

// tinkWorkflowStatus is a Workflow's status as Tinkerbell's clients read
// it (their field names, not Anvil's model).
type tinkWorkflowStatus struct {
	State        string `json:"state"`
	CurrentState *struct {
		AgentID    string `json:"agentID"`
		ActionName string `json:"actionName"`
		State      string `json:"state"`
	} `json:"currentState"`
	Tasks []struct {
		Name    string `json:"name"`
		AgentID string `json:"agentID"`
		Actions []struct {
			Name              string `json:"name"`
			State             string `json:"state"`
			ExecutionStart    string `json:"executionStart"`
			ExecutionStop     string `json:"executionStop"`
			ExecutionDuration string `json:"executionDuration"`
		} `json:"actions"`
	} `json:"tasks"`
}

func workflowStatus(t *testing.T, c *kubetest.Cluster) tinkWorkflowStatus {
	t.Helper()
	code, b := c.Do(t, http.MethodGet, tinkPath+"workflows/capi-md-0-x7k2p", nil, "application/json")
	if code != http.StatusOK {
		t.Fatalf("GET workflow: %d %s", code, b)
	}
	var wf struct {
		Status tinkWorkflowStatus `json:"status"`
	}
	if err := json.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	return wf.Status
}

// TestKubernetesSharedKeys: two replicas on one cluster, each with its
// own data directory, end up with the same agent key, token issuer, CA
// and seal key (the first to start made them, the other took them from
// the cluster's Secret), so each one's admin token is good at the other.
func TestKubernetesSharedKeys(t *testing.T) {
	_, kubeconfig := kubeCluster(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	var bases []string
	for _, dir := range dirs {
		base, _, _, _, _ := startWith(t, func(cfg *Config) {
			cfg.Store = backend.Config{Kind: backend.Kubernetes, Kubeconfig: kubeconfig}
			cfg.InsecureNoAuth = false
			cfg.TLS, cfg.DisableHTTPS = true, true // the CA is made; the gRPC port serves it
			cfg.DataDir = dir
		})
		bases = append(bases, base)
	}
	for _, f := range []string{"auth/agent.key", "auth/signing-key.pem", "tls/ca.pem", "tls/ca-key.pem", "secrets/seal.key"} {
		a, errA := os.ReadFile(filepath.Join(dirs[0], f))
		b, errB := os.ReadFile(filepath.Join(dirs[1], f))
		if errA != nil || errB != nil || len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the replicas (%v, %v)", f, errA, errB)
		}
	}
	for i, dir := range dirs {
		tok, err := os.ReadFile(filepath.Join(dir, "auth", "admin.token"))
		if err != nil {
			t.Fatal(err)
		}
		other := bases[1-i]
		if code, body := callJSON(t, other, listHardware, string(bytes.TrimSpace(tok)), `{}`); code != http.StatusOK {
			t.Errorf("replica %d's admin token at replica %d: %d %s; want 200", i, 1-i, code, body)
		}
	}
}
