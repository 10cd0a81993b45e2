package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	tinkproto "github.com/anvilproj/anvil/api/proto"
	"github.com/anvilproj/anvil/api/proto/tinkprotoconnect"
	"github.com/anvilproj/anvil/internal/oci/ocitest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// Tinkerbell's own worker agent against Anvil: the tink-agent of
// ../shared/tinkerbell (built unmodified from tinkerbell/tinkerbell), with
// its containerd runtime (Debian's containerd and runc, a private instance),
// runs a three-action workflow from `anvil serve` to SUCCESS, pulling the
// actions' image from a registry the test starts, through containerd's
// registry mirror configuration. Then a forged report — another machine's
// agent ID, from this machine's address — is refused.
//
//	namespace "tksrv": br0 10.77.40.1 ── anvil serve, the registry (:5000)
//	   └─veth─ namespace "tka": 10.77.40.11, MAC 52:54:00:40:00:11
//	             containerd, tink-agent -id rack1-tink-a
//
// Machine B (10.77.40.12) exists only as a Hardware with a workflow: the
// forged report claims to be its agent.

const (
	tinkSrvIP = "10.77.40.1"
	tinkAIP   = "10.77.40.11"
	tinkAMAC  = "52:54:00:40:00:11"
	tinkAID   = "rack1-tink-a" // A's spec.agentID: what Hook's worker_id= carries
	tinkBIP   = "10.77.40.12"
	tinkBMAC  = "52:54:00:40:00:12"
	// tinkImage is the actions' image as the template names it: on quay.io,
	// which the containerd mirror configuration sends to the test's
	// registry (the template is not edited for the lab).
	tinkImage = "quay.io/anvil-test/busybox:1"
)

func tinkManifests(out string) string {
	return fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: tink-a}
spec:
  agentID: %[1]s
  interfaces:
  - dhcp: {mac: "%[2]s", ip: {address: %[3]s, netmask: 255.255.255.0}}
    netboot: {allowPXE: true, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: tink-b}
spec:
  interfaces:
  - dhcp: {mac: "%[4]s", hostname: tink-b-secret, ip: {address: %[5]s, netmask: 255.255.255.0}}
    netboot: {allowPXE: true, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: tink-three}
spec:
  data: |
    version: "0.1"
    name: tink-three
    global_timeout: 600
    tasks:
      - name: os
        worker: "{{.device_1}}"
        volumes: ["%[6]s:/out"]
        environment: {TASK_VAR: from-the-task}
        actions:
          - name: greet
            image: %[7]s
            timeout: 120
            command: [sh, -c, 'echo "$GREETING $TASK_VAR" > /out/greeting']
            environment: {GREETING: hello}
          - name: count
            image: %[7]s
            timeout: 120
            command: [sh, -c, 'wc -c < /out/greeting > /out/count']
          - name: finish
            image: %[7]s
            timeout: 120
            command: [sh, -c, 'echo done > /out/finished']
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: tink-a-install}
spec: {templateRef: tink-three, hardwareRef: tink-a, hardwareMap: {device_1: "%[2]s"}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: tink-b-install}
spec: {templateRef: tink-three, hardwareRef: tink-b, hardwareMap: {device_1: "%[4]s"}}
`, tinkAID, tinkAMAC, tinkAIP, tinkBMAC, tinkBIP, out, tinkImage)
}

func TestTinkAgentWorkflow(t *testing.T) {
	requireLab(t)
	containerd := testtool.RequireBinary(t, "containerd", "containerd")
	testtool.RequireBinary(t, "containerd-shim-runc-v2", "containerd")
	testtool.RequireBinary(t, "runc", "runc")
	busybox := testtool.RequireBinary(t, "busybox", "busybox-static")
	agent := tinkAgent(t)

	srv := newNetns(t, "tksrv")
	srv.ip("link", "add", "br0", "type", "bridge")
	srv.ip("addr", "add", tinkSrvIP+"/24", "dev", "br0")
	srv.ip("link", "set", "br0", "up")
	ma := peerHost(t, srv, "br0", "tka", "tka", tinkAIP+"/24")
	ma.ip("link", "set", "tka", "address", tinkAMAC)

	a := startAnvil(t, srv, tinkSrvIP, "--no-dhcp", "--no-tftp", "--no-syslog")
	regAddr := listenInNetns(t, srv, tinkSrvIP+":5000", registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	pushBusybox(t, srv, busybox, regAddr+"/anvil-test/busybox:1")

	out := t.TempDir() // the actions' /out
	a.apply(t, tinkManifests(out))

	// What Hook's tink-agent is started with comes from the kernel line of
	// the script at Smee's path, asked from A's address.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	script, err := ma.exec(ctx, "curl", "-fsS", "http://"+tinkSrvIP+":7080/auto.ipxe")
	cancel()
	if err != nil {
		t.Fatalf("A's boot script at /auto.ipxe: %v\n%s", err, script)
	}
	args := kernelArgs(t, script)
	for k, want := range map[string]string{"grpc_authority": tinkSrvIP + ":42113", "worker_id": tinkAID, "hw_addr": tinkAMAC} {
		if args[k] != want {
			t.Errorf("boot script: %s=%q; want %q\n%s", k, args[k], want, script)
		}
	}

	// A private containerd in A's namespace, with quay.io mirrored to the
	// test's registry (plain HTTP).
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	certs := filepath.Join(dir, "certs.d")
	writeFile(t, filepath.Join(certs, "quay.io", "hosts.toml"), fmt.Sprintf(`server = "https://quay.io"

[host."http://%s"]
  capabilities = ["pull", "resolve"]
`, regAddr))
	writeFile(t, filepath.Join(dir, "config.toml"), fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock))
	ctd := ma.backgroundNetOnly("containerd", containerd, "--config", filepath.Join(dir, "config.toml"))
	waitForFile(t, sock, ctd)

	agentArgs := []string{"-transport", "grpc", "-grpc-server", args["grpc_authority"], "-id", args["worker_id"],
		"-runtime", "containerd", "-containerd-socket", sock, "-containerd-registry-config-path", certs,
		"-containerd-data-root", filepath.Join(dir, "nerdctl")}
	if args["tinkerbell_tls"] == "true" {
		agentArgs = append(agentArgs, "-grpc-tls")
	}
	if args["tinkerbell_insecure_tls"] == "true" {
		agentArgs = append(agentArgs, "-grpc-insecure-tls")
	}
	t.Logf("tink-agent %s", strings.Join(agentArgs, " "))
	ta := ma.background("tink-agent", agent, agentArgs...)

	deadline := time.Now().Add(4 * time.Minute)
	for state := ""; state != "SUCCESS"; state = workflowState(a, "tink-a-install") {
		if state == "FAILED" || state == "TIMEOUT" || time.Now().After(deadline) {
			t.Fatalf("workflow tink-a-install is %q; want SUCCESS\n%s\n--- tink-agent ---\n%s",
				state, a.cli(t, "describe", "workflow", "tink-a-install"), tail(ta.output(), 40))
		}
		select {
		case <-ta.done:
			t.Fatalf("tink-agent exited (%v):\n%s", ta.err, tail(ta.output(), 40))
		case <-time.After(500 * time.Millisecond):
		}
	}

	// The actions ran with the template's command, environment and
	// volumes, in order.
	for file, want := range map[string]string{"greeting": "hello from-the-task\n", "count": "20\n", "finished": "done\n"} {
		b, err := os.ReadFile(filepath.Join(out, file))
		if err != nil || string(b) != want {
			t.Errorf("/out/%s = %q, %v; want %q", file, b, err, want)
		}
	}
	wf := getWorkflow(t, a, "tink-a-install")
	if len(wf.Status.Tasks) != 1 || len(wf.Status.Tasks[0].Actions) != 3 {
		t.Fatalf("tink-a-install's tasks: %+v", wf.Status.Tasks)
	}
	for _, act := range wf.Status.Tasks[0].Actions {
		if act.State != "SUCCESS" || act.ExecutionStart == nil || act.ExecutionStop == nil || act.ExecutionStop.Before(*act.ExecutionStart) ||
			act.ExecutionDuration == "" || act.Attempt != 1 {
			t.Errorf("action %s: %+v; want SUCCESS once, with its times", act.Name, act)
		}
	}
	yaml := a.cli(t, "get", "workflow", "tink-a-install", "-o", "yaml")
	describe := a.cli(t, "describe", "workflow", "tink-a-install")
	for _, want := range []string{"greet", "count", "finish", "SUCCESS"} {
		if !strings.Contains(describe, want) || !strings.Contains(yaml, want) {
			t.Errorf("anvil describe / get -o yaml lack %q:\n%s\n%s", want, describe, yaml)
		}
	}
	t.Logf("anvil describe workflow tink-a-install:\n%s", describe)

	// The agent's attributes are on A's Hardware, in Tinkerbell's place.
	var hw struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(a.cli(t, "get", "hardware", "tink-a", "-o", "json")), &hw); err != nil {
		t.Fatal(err)
	}
	if attrs := hw.Metadata.Annotations["tinkerbell.org/agent-attributes"]; !strings.Contains(attrs, `"networkInterfaces"`) ||
		!strings.Contains(attrs, `"name":"tka"`) {
		t.Errorf("A's tinkerbell.org/agent-attributes = %q; want the agent's attributes, with its NIC tka", attrs)
	}

	forgedReport(t, a, ma)
}

// forgedReport sends, from A's namespace (A's address), a report on B's
// workflow claiming to be B's agent, and checks that it is refused, names
// nothing of B's, changes nothing, and is counted and audited.
func forgedReport(t *testing.T, a *anvil, ma *netns) {
	t.Helper()
	var b struct {
		Status struct {
			Tasks []struct {
				ID      string `json:"id"`
				Actions []struct {
					ID    string `json:"id"`
					State string `json:"state"`
				} `json:"actions"`
			} `json:"tasks"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(a.cli(t, "get", "workflow", "tink-b-install", "-o", "json")), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Status.Tasks) == 0 || len(b.Status.Tasks[0].Actions) == 0 {
		t.Fatalf("tink-b-install not rendered: %+v", b)
	}
	refusedBefore := a.metric(t, "anvil_agent_refused_total", `protocol="tinkerbell"`, `reason="wrong_ip"`)

	conn, err := grpc.NewClient(tinkSrvIP+":42113",
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})), // as tinkerbell_insecure_tls=true
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var c net.Conn
			err := inNetns(ma, func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				return err
			})
			return c, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = conn.Invoke(ctx, tinkprotoconnect.WorkflowServiceReportActionStatusProcedure, &tinkproto.ActionStatusRequest{
		WorkflowId: "default/tink-b-install", AgentId: tinkBMAC, TaskId: b.Status.Tasks[0].ID,
		ActionId: b.Status.Tasks[0].Actions[0].ID, ActionName: "greet", ActionState: tinkproto.ActionStatusRequest_SUCCESS,
		Message: &tinkproto.ActionMessage{Message: "forged"},
	}, &tinkproto.ActionStatusResponse{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("forged report: %v; want PermissionDenied", err)
	}
	for _, secret := range []string{tinkBIP, "tink-b", "tink-b-secret"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the refusal names %q of machine B: %v", secret, err)
		}
	}
	t.Logf("forged report refused: %v", err)
	if s := workflowState(a, "tink-b-install"); s != "PENDING" {
		t.Errorf("tink-b-install after the forged report: %s; want PENDING", s)
	}
	if d := a.metric(t, "anvil_agent_refused_total", `protocol="tinkerbell"`, `reason="wrong_ip"`) - refusedBefore; d != 1 {
		t.Errorf("anvil_agent_refused_total{protocol=tinkerbell,reason=wrong_ip} rose by %v; want 1", d)
	}
	audit := a.cli(t, "audit", "--subject", "agent:"+tinkBMAC)
	if !strings.Contains(audit, "ReportActionStatus") || !strings.Contains(audit, "workflow=tink-b-install") ||
		!strings.Contains(audit, "permission_denied") || !strings.Contains(audit, tinkAIP) {
		t.Errorf("anvil audit has no record of the forged report from %s:\n%s", tinkAIP, audit)
	}
	t.Logf("anvil audit --subject agent:%s:\n%s", tinkBMAC, audit)
}

// tinkAgent returns the tink-agent binary, decompressed from
// ../shared/tinkerbell (ocitest.TinkerbellDir: $ANVIL_TINKERBELL_DIR
// overrides) into the test's temp dir; a missing one fails the test in
// CI and skips it elsewhere.
func tinkAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tink-agent")
	if err := os.WriteFile(bin, ocitest.UpstreamProgram(t, "tink-agent.xz"), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// pushBusybox pushes a FROM-scratch image holding the static busybox at
// bin (the entrypoint, with sh and wc as links) to ref, through a
// connection made inside ns, where the registry listens.
func pushBusybox(t *testing.T, ns *netns, bin, ref string) {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked; the image needs busybox-static's", bin)
		}
	}
	ef.Close()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}))
	must(tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))}))
	_, err = tw.Write(b)
	must(err)
	for _, applet := range []string{"sh", "wc", "cat", "ls"} {
		must(tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}))
	}
	must(tw.Close())
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	must(err)
	img, err := mutate.AppendLayers(empty.Image, l)
	must(err)
	img, err = mutate.Config(img, ggcrv1.Config{Entrypoint: []string{"/bin/busybox"}, Env: []string{"PATH=/bin"}})
	must(err)
	r, err := name.ParseReference(ref, name.Insecure)
	must(err)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(ns, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	if err := remote.Write(r, img, remote.WithTransport(tr)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// kernelArgs returns the key=value arguments of a script's kernel line.
func kernelArgs(t *testing.T, script string) map[string]string {
	t.Helper()
	for _, line := range strings.Split(script, "\n") {
		if !strings.HasPrefix(line, "kernel ") {
			continue
		}
		out := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				out[k] = v
			}
		}
		return out
	}
	t.Fatalf("no kernel line in the script:\n%s", script)
	return nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitForFile waits until path exists (a socket a process creates), or
// fails the test if p exits first or a minute passes.
func waitForFile(t *testing.T, path string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before creating %s (%v):\n%s", p.cmd.Path, path, p.err, tail(p.output(), 30))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after a minute:\n%s", path, tail(p.output(), 30))
		}
	}
}
