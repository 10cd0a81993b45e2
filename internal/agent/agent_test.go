package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/agent"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/workflow"
)

// server is the real API and workflow engine over a bolt store in a
// directory, on a fixed loopback address, that a test can stop and start
// again (a server restart) while an agent runs.
type server struct {
	t    *testing.T
	dir  string
	addr string
	// registries are the server's registry settings (api.Config).
	registries oci.Settings

	mu   sync.Mutex
	st   *bolt.Store
	ls   *logstore.Store
	eng  *workflow.Engine
	svc  *api.Services
	srv  *http.Server
	stop context.CancelFunc
	done chan error
}

func newServer(t *testing.T) *server {
	t.Helper()
	return newServerWith(t, oci.Settings{})
}

// newServerWith is newServer with the server's registry settings.
func newServerWith(t *testing.T, registries oci.Settings) *server {
	t.Helper()
	s := &server{t: t, dir: t.TempDir(), registries: registries}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.startOn(ln)
	t.Cleanup(s.shutdown)
	return s
}

func (s *server) url() string { return "http://" + s.addr }

// startOn opens the stores and serves on ln.
func (s *server) startOn(ln net.Listener) {
	s.t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := bolt.Open(filepath.Join(s.dir, "anvil.db"), bolt.Options{Logger: logger})
	if err != nil {
		s.t.Fatal(err)
	}
	ls, err := logstore.Open(logstore.Config{Dir: filepath.Join(s.dir, "logs"), Logger: logger})
	if err != nil {
		s.t.Fatal(err)
	}
	eng := workflow.New(workflow.Config{Store: st, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	svc := api.New(api.Config{Store: st, Logs: ls, Engine: eng, Logger: logger, Registries: s.registries})
	mux := http.NewServeMux()
	svc.Mount(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	s.mu.Lock()
	s.st, s.ls, s.eng, s.svc, s.srv, s.stop, s.done = st, ls, eng, svc, srv, cancel, done
	s.mu.Unlock()
}

// restart stops the server, waits down for d, and starts it again on the
// same address and data.
func (s *server) restart(d time.Duration) {
	s.shutdown()
	time.Sleep(d)
	var ln net.Listener
	var err error
	for range 50 { // the old socket may linger a moment
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	s.startOn(ln)
}

func (s *server) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	s.svc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = s.srv.Shutdown(ctx)
	cancel()
	s.srv.Close()
	s.stop()
	<-s.done
	if err := s.ls.Close(); err != nil {
		s.t.Errorf("logstore close: %v", err)
	}
	if err := s.st.Close(); err != nil {
		s.t.Errorf("store close: %v", err)
	}
	s.srv = nil
}

// apply applies a manifest through the API.
func (s *server) apply(manifest string) {
	s.t.Helper()
	c := anvilv1connect.NewManifestServiceClient(http.DefaultClient, s.url())
	if _, err := c.Apply(context.Background(), connect.NewRequest(&v1.ApplyRequest{Source: "test.yaml", Content: manifest})); err != nil {
		s.t.Fatalf("apply: %v", err)
	}
}

// workflow reads a workflow from the store.
func (s *server) workflow(name string) *model.Workflow {
	s.t.Helper()
	s.mu.Lock()
	st := s.st
	s.mu.Unlock()
	obj, err := st.Get(context.Background(), model.KindWorkflow, "default", name)
	if err != nil {
		s.t.Fatalf("get workflow %s: %v", name, err)
	}
	return obj.(*model.Workflow)
}

// logs returns the lines the agent streamed for a workflow.
func (s *server) logs(name string) string {
	s.t.Helper()
	c := anvilv1connect.NewLogServiceClient(http.DefaultClient, s.url())
	resp, err := c.GetLogs(context.Background(), connect.NewRequest(&v1.GetLogsRequest{WorkflowId: "default/" + name}))
	if err != nil {
		s.t.Fatalf("get logs: %v", err)
	}
	var b strings.Builder
	for _, l := range resp.Msg.GetLines() {
		fmt.Fprintf(&b, "%s %s %s\n", l.GetActionName(), l.GetStream(), l.GetLine())
	}
	return b.String()
}

const mac = "52:54:00:aa:00:01"

// manifest is a Hardware, and a Template and Workflow with the given
// actions (YAML list items, indented for the template's action list).
func manifest(name, actionsYAML string) string {
	return fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: m1}
spec:
  interfaces:
    - dhcp: {mac: %[2]s}
      netboot: {allowPXE: true, allowWorkflow: true}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: %[1]s}
spec:
  data: |
    version: "0.1"
    name: %[1]s
    global_timeout: 600
    tasks:
      - name: install
        worker: "{{.device_1}}"
        actions:
%[3]s
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: %[1]s}
spec:
  templateRef: %[1]s
  hardwareRef: m1
  hardwareMap: {device_1: %[2]s}
`, name, mac, actionsYAML)
}

// action is one template action entry.
func action(name, image string, timeout int, extra string) string {
	s := fmt.Sprintf("          - name: %s\n            image: %s\n            timeout: %d\n", name, image, timeout)
	if extra != "" {
		s += "            " + extra + "\n"
	}
	return s
}

// fakeActions runs scripted actions by image name and counts runs.
type fakeActions struct {
	mu      sync.Mutex
	runners map[string]actions.Runner
	runs    map[string]int
}

func newFakeActions(r map[string]actions.Runner) *fakeActions {
	return &fakeActions{runners: r, runs: map[string]int{}}
}

func (f *fakeActions) Select(s actions.Spec) (actions.Selection, error) {
	r, ok := f.runners[s.Image]
	if !ok {
		return actions.Selection{}, fmt.Errorf("%w %q", actions.ErrUnknownImage, s.Image)
	}
	return actions.Selection{Path: actions.PathNative, Why: "fake " + s.Image, Run: func(ctx context.Context, s actions.Spec, out actions.Output) (actions.Result, error) {
		f.mu.Lock()
		f.runs[s.Name]++
		f.mu.Unlock()
		return r(ctx, s, out)
	}}, nil
}

func (f *fakeActions) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[name]
}

func succeed(lines ...string) actions.Runner {
	return func(_ context.Context, _ actions.Spec, out actions.Output) (actions.Result, error) {
		for _, l := range lines {
			out.Line("stdout", l)
		}
		return actions.Result{}, nil
	}
}

// syncBuffer is a console safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runAgent runs an agent against srv until the workflow ends.
func runAgent(t *testing.T, srv *server, set agent.ActionSet) (agent.Result, *syncBuffer) {
	t.Helper()
	return runAgentClock(t, srv, set, nil)
}

// runAgentClock is runAgent with the agent's clock.
func runAgentClock(t *testing.T, srv *server, set agent.ActionSet, now func() time.Time) (agent.Result, *syncBuffer) {
	t.Helper()
	con := &syncBuffer{}
	var clk clock.Clock
	if now != nil {
		clk = clock.Func(now)
	}
	a, err := agent.New(agent.Config{
		Clock:        clk,
		Client:       anvilv1connect.NewAgentServiceClient(http.DefaultClient, srv.url()),
		AgentID:      mac,
		Actions:      set,
		Console:      con,
		Wait:         2 * time.Second,
		MinBackoff:   20 * time.Millisecond,
		MaxBackoff:   200 * time.Millisecond,
		ExitWhenDone: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := a.Run(ctx)
	if err != nil {
		t.Fatalf("agent.Run: %v\nconsole:\n%s", err, con)
	}
	return res, con
}

func TestRunsWorkflowToSuccess(t *testing.T) {
	srv := newServer(t)
	srv.apply(manifest("wf", action("one", "img-one", 60, "")+action("two", "img-two", 60, "")))
	fa := newFakeActions(map[string]actions.Runner{
		"img-one": succeed("hello from one", "second line"),
		"img-two": func(_ context.Context, s actions.Spec, out actions.Output) (actions.Result, error) {
			out.Progress(actions.Progress{Bytes: 50, TotalBytes: 100, BytesPerSec: 10})
			out.Line("stderr", "two says "+s.Name)
			return actions.Result{}, nil
		},
	})
	res, con := runAgent(t, srv, fa)
	if res.WorkflowState != "SUCCESS" || res.Actions != 2 {
		t.Fatalf("Run = %+v; want SUCCESS after 2 actions\nconsole:\n%s", res, con)
	}
	wf := srv.workflow("wf")
	if wf.Status.State != model.StateSuccess {
		t.Errorf("stored state %s; want SUCCESS", wf.Status.State)
	}
	for _, a := range wf.Status.Tasks[0].Actions {
		if a.State != model.StateSuccess || a.ExecutionStart == nil || a.ExecutionStop == nil || a.Attempt != 1 {
			t.Errorf("action %s: state %s attempt %d start %v stop %v; want SUCCESS once with times", a.Name, a.State, a.Attempt, a.ExecutionStart, a.ExecutionStop)
		}
	}
	if p := wf.Status.Tasks[0].Actions[1].Progress; p == nil || p.Bytes != 50 || p.TotalBytes != 100 {
		t.Errorf("action two's progress = %+v; want 50 of 100 bytes", p)
	}
	logs := srv.logs("wf")
	for _, want := range []string{"one stdout hello from one", "one stdout second line", "two stderr two says two"} {
		if !strings.Contains(logs, want) {
			t.Errorf("workflow logs lack %q:\n%s", want, logs)
		}
	}
	if !strings.Contains(con.String(), "anvil agent:") || !strings.Contains(con.String(), "one: SUCCESS") {
		t.Errorf("console lacks the agent's lines:\n%s", con)
	}
}

// The action that takes the machine down runs its Then only once the
// server has stored its SUCCESS.
func TestRebootAfterSuccessIsDurable(t *testing.T) {
	srv := newServer(t)
	srv.apply(manifest("wf", action("write", "img-write", 60, "")+action("reboot", "reboot", 60, "")))
	var stateAtReboot atomic.Value
	fa := newFakeActions(map[string]actions.Runner{
		"img-write": succeed("written"),
		"reboot": func(context.Context, actions.Spec, actions.Output) (actions.Result, error) {
			return actions.Result{Then: func() error {
				stateAtReboot.Store(srv.workflow("wf").Status.State)
				return nil
			}}, nil
		},
	})
	res, con := runAgent(t, srv, fa)
	if res.WorkflowState != "SUCCESS" {
		t.Fatalf("Run = %+v; want SUCCESS\n%s", res, con)
	}
	if got, _ := stateAtReboot.Load().(model.State); got != model.StateSuccess {
		t.Errorf("when the machine went down the stored workflow was %q; want SUCCESS", got)
	}
}

// A failed action ends the workflow FAILED with the error and the last
// output lines in the action's message; with retries, the second attempt
// runs and succeeds.
func TestFailureAndRetry(t *testing.T) {
	t.Run("failed", func(t *testing.T) {
		srv := newServer(t)
		srv.apply(manifest("wf", action("fetch", "img-fetch", 60, "")+action("never", "img-never", 60, "")))
		fa := newFakeActions(map[string]actions.Runner{
			"img-fetch": func(_ context.Context, _ actions.Spec, out actions.Output) (actions.Result, error) {
				out.Line("stderr", "GET http://example.invalid/os.img: 404 Not Found")
				return actions.Result{}, errors.New("image2disk: http://example.invalid/os.img: 404 Not Found")
			},
			"img-never": succeed(),
		})
		res, _ := runAgent(t, srv, fa)
		if res.WorkflowState != "FAILED" {
			t.Fatalf("state %s; want FAILED", res.WorkflowState)
		}
		a := srv.workflow("wf").Status.Tasks[0].Actions[0]
		if a.State != model.StateFailed || !strings.Contains(a.Message, "404 Not Found") || !strings.Contains(a.Message, "last output: GET") {
			t.Errorf("action: state %s message %q; want FAILED with the error and the output", a.State, a.Message)
		}
		if fa.count("never") != 0 {
			t.Errorf("the action after the failed one ran")
		}
	})
	t.Run("retried", func(t *testing.T) {
		srv := newServer(t)
		srv.apply(manifest("wf", action("fetch", "img-fetch", 60, "retries: 1")))
		var tries atomic.Int32
		fa := newFakeActions(map[string]actions.Runner{
			"img-fetch": func(context.Context, actions.Spec, actions.Output) (actions.Result, error) {
				if tries.Add(1) == 1 {
					return actions.Result{}, errors.New("connection reset")
				}
				return actions.Result{}, nil
			},
		})
		res, con := runAgent(t, srv, fa)
		if res.WorkflowState != "SUCCESS" || tries.Load() != 2 {
			t.Fatalf("state %s after %d tries; want SUCCESS after 2\n%s", res.WorkflowState, tries.Load(), con)
		}
		if a := srv.workflow("wf").Status.Tasks[0].Actions[0]; a.Attempt != 2 {
			t.Errorf("attempt = %d; want 2", a.Attempt)
		}
	})
	t.Run("unknown image", func(t *testing.T) {
		srv := newServer(t)
		srv.apply(manifest("wf", action("custom", "registry.example/custom:1", 60, "")))
		res, _ := runAgent(t, srv, newFakeActions(nil))
		a := srv.workflow("wf").Status.Tasks[0].Actions[0]
		if res.WorkflowState != "FAILED" || !strings.Contains(a.Message, "registry.example/custom:1") {
			t.Errorf("state %s message %q; want FAILED naming the image", res.WorkflowState, a.Message)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		srv := newServer(t)
		srv.apply(manifest("wf", action("slow", "img-slow", 1, "")))
		fa := newFakeActions(map[string]actions.Runner{
			"img-slow": func(ctx context.Context, _ actions.Spec, _ actions.Output) (actions.Result, error) {
				<-ctx.Done()
				return actions.Result{}, ctx.Err()
			},
		})
		res, _ := runAgent(t, srv, fa)
		a := srv.workflow("wf").Status.Tasks[0].Actions[0]
		if res.WorkflowState != "TIMEOUT" || a.State != model.StateTimeout {
			t.Errorf("workflow %s, action %s (%q); want TIMEOUT", res.WorkflowState, a.State, a.Message)
		}
	})
}

// The server restarts while an action runs: the agent's reports and lines
// wait for it, the workflow finishes, and nothing runs twice.
func TestServerRestartMidAction(t *testing.T) {
	srv := newServer(t)
	srv.apply(manifest("wf", action("write", "img-write", 60, "")+action("after", "img-after", 60, "")))
	restarted := make(chan struct{})
	fa := newFakeActions(map[string]actions.Runner{
		"img-write": func(_ context.Context, _ actions.Spec, out actions.Output) (actions.Result, error) {
			out.Line("stdout", "before the restart")
			// Down longer than the action runs: its end report must wait.
			go func() { srv.restart(1500 * time.Millisecond); close(restarted) }()
			time.Sleep(100 * time.Millisecond) // the server is going down
			for i := range 5 {
				out.Progress(actions.Progress{Bytes: int64(i), TotalBytes: 5})
				out.Line("stdout", fmt.Sprintf("while it is down %d", i))
				time.Sleep(100 * time.Millisecond)
			}
			return actions.Result{}, nil
		},
		"img-after": succeed("after the restart"),
	})
	res, con := runAgent(t, srv, fa)
	<-restarted
	if res.WorkflowState != "SUCCESS" {
		t.Fatalf("state %s; want SUCCESS\n%s", res.WorkflowState, con)
	}
	if !strings.Contains(con.String(), "write: report SUCCESS delivered after") {
		t.Errorf("the end report did not have to wait for the server (the test did not test the restart):\n%s", con)
	}
	if n := fa.count("write"); n != 1 {
		t.Errorf("write ran %d times; want 1", n)
	}
	for _, a := range srv.workflow("wf").Status.Tasks[0].Actions {
		if a.Attempt != 1 || a.State != model.StateSuccess {
			t.Errorf("action %s: %s attempt %d; want SUCCESS once", a.Name, a.State, a.Attempt)
		}
	}
	logs := srv.logs("wf")
	for _, want := range []string{"before the restart", "while it is down 0", "while it is down 4", "after the restart"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q (lost in the restart?):\n%s", want, logs)
		}
	}
}

// replayingHandler serves h, but hands the agent the first GetAction answer
// a second time once that action's end was reported: the case of an agent
// whose end report was stored but whose next question is answered from a
// stale view. The agent must report again, not run again.
type replayingHandler struct {
	h http.Handler

	mu       sync.Mutex
	first    *httptestRecorder
	reported bool
	replayed int
}

type httptestRecorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *httptestRecorder) Header() http.Header         { return r.header }
func (r *httptestRecorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *httptestRecorder) WriteHeader(code int)        { r.code = code }

func (p *replayingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case anvilv1connect.AgentServiceGetActionProcedure:
		p.mu.Lock()
		if p.first != nil && p.reported && p.replayed == 0 {
			p.replayed++
			rec := p.first
			p.mu.Unlock()
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.code)
			_, _ = w.Write(rec.body.Bytes())
			return
		}
		if p.first == nil {
			rec := &httptestRecorder{header: http.Header{}, code: http.StatusOK}
			p.mu.Unlock()
			p.h.ServeHTTP(rec, r)
			p.mu.Lock()
			if rec.code == http.StatusOK {
				p.first = rec
			}
			p.mu.Unlock()
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.code)
			_, _ = w.Write(rec.body.Bytes())
			return
		}
		p.mu.Unlock()
	case anvilv1connect.AgentServiceReportActionStatusProcedure:
		defer func() {
			p.mu.Lock()
			p.reported = p.first != nil
			p.mu.Unlock()
		}()
	}
	p.h.ServeHTTP(w, r)
}

func TestFinishedActionIsNotRunAgain(t *testing.T) {
	srv := newServer(t)
	srv.apply(manifest("wf", action("write", "img-write", 60, "")+action("after", "img-after", 60, "")))
	proxy := &replayingHandler{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Forward to the real server.
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, srv.url()+r.URL.Path, r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})}
	front := &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = front.Serve(ln) }()
	t.Cleanup(func() { front.Close() })

	fa := newFakeActions(map[string]actions.Runner{"img-write": succeed("once"), "img-after": succeed()})
	con := &syncBuffer{}
	a, err := agent.New(agent.Config{
		Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, "http://"+ln.Addr().String()),
		AgentID: mac, Actions: fa, Console: con, Wait: time.Second,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, ExitWhenDone: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.Run(ctx)
	if err != nil || res.WorkflowState != "SUCCESS" {
		t.Fatalf("Run = %+v, %v; want SUCCESS\n%s", res, err, con)
	}
	proxy.mu.Lock()
	replayed := proxy.replayed
	proxy.mu.Unlock()
	if replayed != 1 {
		t.Fatalf("the stale action was handed out %d times; want 1 (the test did not test anything)", replayed)
	}
	if n := fa.count("write"); n != 1 {
		t.Errorf("write ran %d times; want once\n%s", n, con)
	}
	if !strings.Contains(con.String(), "already ran and ended") {
		t.Errorf("console does not say the action was reported again:\n%s", con)
	}
}

// A machine whose clock is an hour behind: its lines are filed at the
// server's time, so they interleave with what the server recorded.
func TestLinesAreMovedToTheServersClock(t *testing.T) {
	srv := newServer(t)
	srv.apply(manifest("wf", action("one", "img-one", 60, "")))
	behind := func() time.Time { return time.Now().Add(-time.Hour) }
	before := time.Now()
	runAgentClock(t, srv, newFakeActions(map[string]actions.Runner{"img-one": succeed("a line")}), behind)
	c := anvilv1connect.NewLogServiceClient(http.DefaultClient, srv.url())
	resp, err := c.GetLogs(context.Background(), connect.NewRequest(&v1.GetLogsRequest{WorkflowId: "default/wf"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.GetLines()) == 0 {
		t.Fatal("no lines")
	}
	for _, l := range resp.Msg.GetLines() {
		if got := l.GetTime().AsTime(); got.Before(before.Add(-time.Minute)) {
			t.Errorf("line %q filed at %v, an hour behind the server (%v)", l.GetLine(), got, before)
		}
	}
}
