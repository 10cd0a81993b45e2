// Package upgrade_test is the release upgrade test: the last tagged
// release's binary, built from git history, fills a data directory
// through its API; the current tree's binary then starts on it and must
// find every object, the workflow's status, the log lines and the audit
// records, and have kept a backup of the store before changing it. It
// also checks that a data directory from a newer Anvil is refused.
//
// The old release's binary is built once per commit and kept under
// .cache/upgrade (docs/upgrades.md gives the cold and warm costs).
package upgrade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/freeport"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/testtool"
)

const (
	// lastRelease is the tag the upgrade starts from, and releaseCommit
	// its commit, for a clone that did not fetch tags.
	lastRelease   = "v0.1.0"
	releaseCommit = "0c17cc67b22b1eb53445fb500724ff36e1821dbc"
	// currentVersion is what the current tree's binary is stamped with.
	currentVersion = "v0.2.0-upgradetest"

	workflowName = "node07-install"
	agentID      = "3c:ec:ef:12:34:07"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		testtool.Need(t, "a git checkout (the old release is built from its history): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// buildRelease returns the last release's binary, built from git history
// (git archive of its commit, go build) once per commit into
// .cache/upgrade.
func buildRelease(t *testing.T, root string) string {
	t.Helper()
	commit := releaseCommit
	if out, err := exec.Command("git", "-C", root, "rev-parse", lastRelease+"^{commit}").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		testtool.Need(t, "%s's commit %s in the git history (a full clone)", lastRelease, commit)
	}
	bin := filepath.Join(root, ".cache", "upgrade", "anvil-"+lastRelease+"-"+commit)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	src := t.TempDir()
	start := time.Now()
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := bin + ".tmp"
	build := exec.Command("go", "build", "-trimpath", "-ldflags",
		"-X github.com/anvilproj/anvil/internal/version.Version="+lastRelease+" -X github.com/anvilproj/anvil/internal/version.Commit="+commit,
		"-o", tmp, "./cmd/anvil")
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", lastRelease, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s (%s) in %s into %s", lastRelease, commit, time.Since(start).Round(time.Second), bin)
	return bin
}

var (
	currentOnce sync.Once
	currentBin  string
	currentErr  error
)

// buildCurrent builds the current tree's anvil once per test binary.
func buildCurrent(t *testing.T, root string) string {
	t.Helper()
	currentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "anvil-upgrade-")
		if err != nil {
			currentErr = err
			return
		}
		currentBin = filepath.Join(dir, "anvil")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags",
			"-X github.com/anvilproj/anvil/internal/version.Version="+currentVersion, "-o", currentBin, "./cmd/anvil")
		cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			currentErr = fmt.Errorf("build the current tree: %v\n%s", err, out)
		}
	})
	if currentErr != nil {
		t.Fatal(currentErr)
	}
	return currentBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if currentBin != "" {
		os.RemoveAll(filepath.Dir(currentBin))
	}
	os.Exit(code)
}

func freePort(t *testing.T) string {
	t.Helper()
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(p)
}

// server is one `anvil serve` process on loopback.
type server struct {
	url  string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan error
}

// serveArgs runs only what needs no root and no network: the API on
// loopback ports of its own, no DHCP, TFTP, syslog, metadata, console,
// BMC calls, registry look-ups.
func serveArgs(t *testing.T, dataDir string) (string, []string) {
	port := freePort(t)
	return "http://127.0.0.1:" + port, []string{"serve", "--data-dir", dataDir, "--bind", "127.0.0.1",
		"--http-port", port, "--https-port", freePort(t), "--grpc-port", freePort(t),
		"--no-dhcp", "--no-tftp", "--no-syslog", "--no-metadata", "--no-console", "--no-bmc",
		"--no-apply-image-check", "--insecure-no-auth"}
}

// start runs bin serve on dataDir until it is ready.
func start(t *testing.T, bin, dataDir string) *server {
	t.Helper()
	url, args := serveArgs(t, dataDir)
	s := &server{url: url, cmd: exec.Command(bin, args...), log: &bytes.Buffer{}, done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("%s serve exited (%v):\n%s", filepath.Base(bin), err, s.log)
		default:
		}
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s serve not ready in 2 minutes:\n%s", bin, s.log)
	return nil
}

// stop ends the server gracefully (SIGTERM), as systemd does.
func (s *server) stop(t *testing.T) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Errorf("serve exited with %v:\n%s", err, s.log)
		}
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		t.Errorf("serve did not stop in a minute:\n%s", s.log)
	}
}

// run runs bin as a client of s.
func run(t *testing.T, bin string, s *server, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--server", s.url}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("anvil %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// seen is what the API shows of the site: the workflow, its log lines
// and the audit records.
type seen struct {
	workflow *v1.Workflow
	logs     []*v1.LogLine
	audit    []*v1.AuditRecord
}

func look(t *testing.T, s *server) seen {
	t.Helper()
	ctx := t.Context()
	var out seen
	wf, err := anvilv1connect.NewWorkflowServiceClient(http.DefaultClient, s.url).Get(ctx,
		connect.NewRequest(&v1.GetRequest{Name: workflowName}))
	if err != nil {
		t.Fatalf("get workflow: %v", err)
	}
	out.workflow = wf.Msg
	logs, err := anvilv1connect.NewLogServiceClient(http.DefaultClient, s.url).GetLogs(ctx,
		connect.NewRequest(&v1.GetLogsRequest{WorkflowId: "default/" + workflowName}))
	if err != nil {
		t.Fatalf("get logs: %v", err)
	}
	out.logs = logs.Msg.GetLines()
	aud, err := anvilv1connect.NewAuditServiceClient(http.DefaultClient, s.url).List(ctx,
		connect.NewRequest(&v1.ListAuditRequest{}))
	if err != nil {
		t.Fatalf("list audit: %v", err)
	}
	out.audit = aud.Msg.GetRecords()
	return out
}

// state is a workflow's status.state.
func state(w *v1.Workflow) string {
	return w.GetStatus().GetFields()["state"].GetStringValue()
}

// objectsJSON is every object of a store file as JSON, by kind and key.
func objectsJSON(t *testing.T, c *bolt.FileContents) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kind, objs := range c.Objects {
		for key, obj := range objs {
			b, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			out[kind+" "+key] = string(b)
		}
	}
	return out
}

func check(t *testing.T, path string) *bolt.FileContents {
	t.Helper()
	c, err := bolt.CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sameObjects reports each object of want that got is missing or holds
// differently.
func sameObjects(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: %s is missing", what, k)
		} else if g != w {
			t.Errorf("%s: %s changed:\n got %s\nwant %s", what, k, g, w)
		}
	}
}

func TestUpgradeFromLastRelease(t *testing.T) {
	root := repoRoot(t)
	old := buildRelease(t, root)
	cur := buildCurrent(t, root)
	data := t.TempDir()
	db := filepath.Join(data, "anvil.db")

	// v0.1.0 fills the data directory through its API and CLI.
	s := start(t, old, data)
	run(t, old, s, "apply", "-f", filepath.Join("testdata", "site.yaml"))
	agent := run(t, old, s, "simulate-agent", "--agent-id", agentID, "--action-time", "10ms", "--progress-steps", "2")
	if !strings.Contains(agent, "workflow ended STATE_SUCCESS") && !strings.Contains(agent, "workflow ended SUCCESS") {
		t.Fatalf("the simulated agent did not finish the workflow:\n%s", agent)
	}
	before := look(t, s)
	if st := state(before.workflow); st != "SUCCESS" {
		t.Fatalf("workflow %s under %s", st, lastRelease)
	}
	if len(before.logs) == 0 || len(before.audit) == 0 {
		t.Fatalf("%s kept %d log lines and %d audit records; the test needs both", lastRelease, len(before.logs), len(before.audit))
	}
	s.stop(t)
	auditBefore, err := os.ReadFile(filepath.Join(data, "audit", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	oldFile := check(t, db)
	if oldFile.Schema.Recorded {
		t.Fatalf("%s recorded a schema (%+v): the test does not start from the unversioned layout", lastRelease, oldFile.Schema)
	}
	want := objectsJSON(t, oldFile)
	for _, kind := range []string{model.KindHardware, model.KindTemplate, model.KindWorkflow, model.KindMachine, model.KindSecret} {
		if len(oldFile.Objects[kind]) == 0 {
			t.Fatalf("%s stored no %s", lastRelease, kind)
		}
	}

	// The current tree's binary on the same directory.
	s = start(t, cur, data)
	after := look(t, s)
	if a, b := after.workflow.GetStatus(), before.workflow.GetStatus(); !proto.Equal(a, b) {
		t.Errorf("workflow status after the upgrade %v, before %v", a, b)
	}
	if len(after.logs) != len(before.logs) {
		t.Errorf("%d log lines after the upgrade, %d before", len(after.logs), len(before.logs))
	}
	for i := range min(len(after.logs), len(before.logs)) {
		if a, b := after.logs[i], before.logs[i]; a.GetLine() != b.GetLine() || !a.GetTime().AsTime().Equal(b.GetTime().AsTime()) {
			t.Errorf("log line %d after the upgrade %v, before %v", i, a, b)
		}
	}
	if len(after.audit) < len(before.audit) {
		t.Errorf("%d audit records after the upgrade, %d before", len(after.audit), len(before.audit))
	}
	for i := range min(len(after.audit), len(before.audit)) {
		if a, b := after.audit[i], before.audit[i]; a.GetProcedure() != b.GetProcedure() || a.GetObject() != b.GetObject() ||
			!a.GetTime().AsTime().Equal(b.GetTime().AsTime()) {
			t.Errorf("audit record %d after the upgrade %v, before %v", i, a, b)
		}
	}
	// An online backup of the upgraded server, as an admin would take it.
	online := filepath.Join(t.TempDir(), "online.backup")
	run(t, cur, s, "backup", "--online", online)
	s.stop(t)

	auditAfter, err := os.ReadFile(filepath.Join(data, "audit", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(auditAfter, auditBefore) {
		t.Error("the audit log's records from before the upgrade changed")
	}
	upgraded := check(t, db)
	if !upgraded.Schema.Recorded || upgraded.Schema.Version != bolt.SchemaVersion || upgraded.Schema.Writer != currentVersion {
		t.Errorf("upgraded store's schema %+v, want %d written by %s", upgraded.Schema, bolt.SchemaVersion, currentVersion)
	}
	sameObjects(t, "the upgraded store", want, objectsJSON(t, upgraded))
	sameObjects(t, "the online backup", want, objectsJSON(t, check(t, online)))

	// The copy made before the upgrade: the file as v0.1.0 left it.
	backups, _ := filepath.Glob(filepath.Join(data, fmt.Sprintf("anvil.db.schema1-unversioned.to.schema%d-%s.*.backup", bolt.SchemaVersion, currentVersion)))
	if len(backups) != 1 {
		all, _ := filepath.Glob(filepath.Join(data, "anvil.db*"))
		t.Fatalf("backups made by the upgrade: %v (data dir: %v)", backups, all)
	}
	kept := check(t, backups[0])
	if kept.Schema.Recorded {
		t.Errorf("the backup is not the file as %s left it: %+v", lastRelease, kept.Schema)
	}
	sameObjects(t, "the upgrade's backup", want, objectsJSON(t, kept))

	// Back to v0.1.0 (a rollback): it has no version check, so it cannot
	// refuse a newer directory; the schema being still its own, it runs
	// on it and finds the site.
	s = start(t, old, data)
	back := look(t, s)
	if state(back.workflow) != state(before.workflow) || len(back.logs) != len(before.logs) {
		t.Errorf("%s on the upgraded directory: workflow %s, %d log lines", lastRelease, state(back.workflow), len(back.logs))
	}
	s.stop(t)
}

// TestDowngradeRefused: the current binary on a data directory whose
// store a newer Anvil wrote (a schema above its own) exits at once,
// naming both versions and what to do, and changes nothing.
func TestDowngradeRefused(t *testing.T) {
	cur := buildCurrent(t, repoRoot(t))
	data := t.TempDir()
	db := filepath.Join(data, "anvil.db")
	st, err := bolt.Open(db, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(t.Context(), &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "node1"}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	future := fmt.Sprint(bolt.SchemaVersion + 1)
	raw, err := bbolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bbolt.Tx) error {
		mb := tx.Bucket([]byte("meta"))
		if err := mb.Put([]byte("schema"), []byte(future)); err != nil {
			return err
		}
		return mb.Put([]byte("writer"), []byte("v9.0.0"))
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	_, args := serveArgs(t, data)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, cur, args...).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("serve on a newer data directory: %v, want it to exit with an error\n%s", err, out)
	}
	for _, want := range []string{
		"has store schema " + future + ", written by Anvil v9.0.0",
		fmt.Sprintf("this Anvil (%s) knows schema %d at most", currentVersion, bolt.SchemaVersion),
		"Run Anvil v9.0.0 or newer on it, or restore the backup the upgrade made",
		"anvil restore FILE --data-dir " + data,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(before, after) {
		t.Error("the refused start changed the store")
	}
	t.Logf("the refusal:\n%s", out)
}
