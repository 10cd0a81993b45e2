package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/agent"
	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/oci/ocitest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestMain lets this test binary be a container's init.
func TestMain(m *testing.M) {
	container.InitIfChild()
	os.Exit(m.Run())
}

// containerManifest is a Hardware with registry settings in its
// annotation (none when annotation is ""), and a workflow of actions.
func containerManifest(name, annotation, actionsYAML string) string {
	ann := ""
	if annotation != "" {
		b, _ := json.Marshal(annotation)
		ann = fmt.Sprintf("\n  annotations:\n    %s: %s", model.RegistriesAnnotation, b)
	}
	return strings.Replace(manifest(name, actionsYAML), "metadata: {name: m1}", "metadata:\n  name: m1"+ann, 1)
}

// containerCatalog is the agent's real catalog, its cache and scratch
// directories in the test's temporary directory.
func containerCatalog(t *testing.T) agent.ActionSet {
	t.Helper()
	testtool.RequireRoot(t, "containers: namespaces, mounts, cgroups")
	cat, note := agent.NewCatalog(agent.CatalogConfig{ImageCacheDir: t.TempDir(), ScratchDir: t.TempDir(), ImageCacheSize: 256 << 20})
	if !strings.Contains(note, "cached in") {
		t.Fatalf("no container path: %s", note)
	}
	return cat
}

// busyboxImage is Debian's static busybox as an image's entrypoint, so an
// action's command picks the applet.
func busyboxImage(t *testing.T) []byte {
	t.Helper()
	bb := testtool.RequireBinary(t, "busybox", "busybox-static")
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestContainerActionThroughTheServer: an image with no native
// implementation, named as a template names it (quay.io/…), is resolved
// by the server — its mirror setting, overridden by the Hardware's
// annotation — pulled by the agent and run in a container; its output
// reaches the workflow's log, and the choice is in the log and the
// action's history.
func TestContainerActionThroughTheServer(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	reg.Push(t, reg.Ref("anvil-test/busybox:1"), ocitest.ProgramImage(t, busyboxImage(t), "/bin/busybox"))
	dead := ocitest.NewRegistry(t)
	dead.Server.Close()
	// The server's mirror is down; the Hardware's names the live one.
	serverSettings, err := oci.Settings{Mirrors: map[string]string{"quay.io": "http://" + dead.Host}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	srv := newServerWith(t, serverSettings)
	srv.apply(containerManifest("wf", `{"mirrors":{"quay.io":"http://`+reg.Host+`"}}`,
		action("hello", "quay.io/anvil-test/busybox:1", 60, `command: ["sh", "-c", "echo hello from $WHO in a container"]`)+
			"            environment: {WHO: busybox}\n"))
	res, con := runAgent(t, srv, containerCatalog(t))
	if res.WorkflowState != "SUCCESS" {
		t.Fatalf("workflow %s\nconsole:\n%s\nlogs:\n%s", res.WorkflowState, con, srv.logs("wf"))
	}
	logs := srv.logs("wf")
	for _, want := range []string{
		"hello agent anvil agent: hello: running quay.io/anvil-test/busybox:1 (attempt 1) in a container (no native busybox)",
		"hello action pulling quay.io/anvil-test/busybox:1 from mirror http://" + reg.Host,
		"hello stdout hello from busybox in a container",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the workflow's log lacks %q:\n%s", want, logs)
		}
	}
	var started string
	for _, h := range srv.workflow("wf").Status.History {
		if h.Action == "hello" && h.State == model.StateRunning {
			started = h.Message
		}
	}
	if !strings.Contains(started, "in a container (no native busybox)") {
		t.Errorf("the action's start in the history says %q; want the container path and why", started)
	}
}

// TestContainerActionFailureStopsTheWorkflow: an image that does not
// exist fails its action with a message naming it, and the workflow's
// next action is not run (its image is never asked for).
func TestContainerActionFailureStopsTheWorkflow(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	reg.Push(t, reg.Ref("anvil-test/busybox:1"), ocitest.ProgramImage(t, busyboxImage(t), "/bin/busybox"))
	settings, err := oci.Settings{Mirrors: map[string]string{"quay.io": "http://" + reg.Host}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	srv := newServerWith(t, settings)
	srv.apply(containerManifest("wf", "",
		action("missing", "quay.io/anvil-test/nosuch:1", 60, "")+
			action("after", "quay.io/anvil-test/busybox:1", 60, `command: ["true"]`)))
	res, con := runAgent(t, srv, containerCatalog(t))
	if res.WorkflowState != "FAILED" || res.Actions != 1 {
		t.Fatalf("Run = %+v; want FAILED after 1 action\nconsole:\n%s", res, con)
	}
	wf := srv.workflow("wf")
	first, second := wf.Status.Tasks[0].Actions[0], wf.Status.Tasks[0].Actions[1]
	if !strings.Contains(first.Message, "pull quay.io/anvil-test/nosuch:1 from mirror http://"+reg.Host) ||
		!strings.Contains(first.Message, "the registry has no such image") {
		t.Errorf("the failed action says %q; want the image and the cause", first.Message)
	}
	if second.State != model.StatePending || reg.Requests("GET /v2/anvil-test/busybox/manifests") != 0 {
		t.Errorf("the next action is %s, its image asked for %d times; want it never run", second.State, reg.Requests("GET /v2/anvil-test/busybox/manifests"))
	}
}
