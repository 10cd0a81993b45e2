package agent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/agent"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/model"
)

// replica is a second API over a server's store, log store and workflow
// engine, on an address of its own: what another replica of `anvil serve`
// is to an agent in Kubernetes mode (the replicas share the store).
type replica struct {
	url string
	// polls counts the GetAction calls it received, reports the
	// ReportActionStatus calls.
	polls, reports atomic.Int64
	// polled gets a value at each GetAction call, if there is room.
	polled chan struct{}
	svc    *api.Services
	srv    *http.Server
}

// replica starts a replica of s; it is killed at the test's end if not
// before.
func (s *server) replica() *replica {
	s.t.Helper()
	s.mu.Lock()
	st, ls, eng := s.st, s.ls, s.eng
	s.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatal(err)
	}
	r := &replica{url: "http://" + ln.Addr().String(), polled: make(chan struct{}, 1)}
	r.svc = api.New(api.Config{Store: st, Logs: ls, Engine: eng, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	mux := http.NewServeMux()
	r.svc.Mount(mux)
	count := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case anvilv1connect.AgentServiceGetActionProcedure:
			r.polls.Add(1)
			select {
			case r.polled <- struct{}{}:
			default:
			}
		case anvilv1connect.AgentServiceReportActionStatusProcedure:
			r.reports.Add(1)
		}
		mux.ServeHTTP(w, req)
	})
	r.srv = &http.Server{Handler: count, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	s.t.Cleanup(r.kill)
	return r
}

// kill stops the replica at once: its listener and every connection
// closed, calls in flight broken, as when its pod dies.
func (r *replica) kill() {
	r.svc.Stop()
	r.srv.Close()
}

// runAgentOn runs an agent against servers, in that order, until the
// workflow ends.
func runAgentOn(t *testing.T, set agent.ActionSet, urls ...string) (agent.Result, *syncBuffer) {
	t.Helper()
	var list []agent.Server
	for _, u := range urls {
		list = append(list, agent.Server{URL: u, Client: anvilv1connect.NewAgentServiceClient(http.DefaultClient, u)})
	}
	con := &syncBuffer{}
	a, err := agent.New(agent.Config{
		Servers: list, AgentID: mac, Actions: set, Console: con, Wait: 2 * time.Second,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, ExitWhenDone: true,
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

// checkOnce fails t unless every action of workflow wf ran once (on the
// machine and in the server's record) and succeeded.
func checkOnce(t *testing.T, srv *server, fa *fakeActions, wf string, con fmt.Stringer) {
	t.Helper()
	for _, a := range srv.workflow(wf).Status.Tasks[0].Actions {
		if n := fa.count(a.Name); n != 1 {
			t.Errorf("%s ran %d times on the machine; want 1\n%s", a.Name, n, con)
		}
		if a.Attempt != 1 || a.State != model.StateSuccess {
			t.Errorf("action %s: %s attempt %d; want SUCCESS at the first attempt", a.Name, a.State, a.Attempt)
		}
	}
}

// The replica the agent talks to dies in the middle of an action: the
// action's output, its end report and the next action go to the other
// replica, and nothing runs twice.
func TestFailsOverWhenTheReplicaDiesMidAction(t *testing.T) {
	srv := newServer(t)
	srv.apply(manifest("wf", action("write", "img-write", 60, "")+action("after", "img-after", 60, "")))
	first := srv.replica()
	fa := newFakeActions(map[string]actions.Runner{
		"img-write": func(_ context.Context, _ actions.Spec, out actions.Output) (actions.Result, error) {
			out.Line("stdout", "before the replica died")
			first.kill()
			out.Progress(actions.Progress{Bytes: 1, TotalBytes: 2})
			out.Line("stdout", "after the replica died")
			return actions.Result{}, nil
		},
		"img-after": succeed("on the other replica"),
	})
	res, con := runAgentOn(t, fa, first.url, srv.url())
	if res.WorkflowState != "SUCCESS" {
		t.Fatalf("state %s; want SUCCESS\n%s", res.WorkflowState, con)
	}
	if first.polls.Load() == 0 || first.reports.Load() == 0 {
		t.Fatalf("the first replica got %d polls and %d reports: the agent did not start there (the test tested nothing)\n%s",
			first.polls.Load(), first.reports.Load(), con)
	}
	want := fmt.Sprintf("anvil agent: server %s failed (", first.url)
	if !strings.Contains(con.String(), want) || !strings.Contains(con.String(), "moving to "+srv.url()) {
		t.Errorf("console does not say the agent moved from %s to %s:\n%s", first.url, srv.url(), con)
	}
	checkOnce(t, srv, fa, "wf", con)
	logs := srv.logs("wf")
	for _, l := range []string{"before the replica died", "after the replica died", "on the other replica"} {
		if !strings.Contains(logs, l) {
			t.Errorf("logs lack %q:\n%s", l, logs)
		}
	}
}

// The replica dies while the agent waits in a long poll for work: the
// poll is asked again at the other replica, which hands out the workflow
// created meanwhile.
func TestFailsOverWhenTheReplicaDiesInALongPoll(t *testing.T) {
	srv := newServer(t)
	first := srv.replica()
	fa := newFakeActions(map[string]actions.Runner{"img-one": succeed("hello")})
	go func() {
		<-first.polled // the agent waits there for work
		first.kill()
		srv.apply(manifest("wf", action("one", "img-one", 60, "")))
	}()
	res, con := runAgentOn(t, fa, first.url, srv.url())
	if res.WorkflowState != "SUCCESS" {
		t.Fatalf("state %s; want SUCCESS\n%s", res.WorkflowState, con)
	}
	if first.reports.Load() != 0 {
		t.Errorf("the dead replica got %d reports", first.reports.Load())
	}
	if !strings.Contains(con.String(), fmt.Sprintf("anvil agent: server %s failed (asking for work: ", first.url)) {
		t.Errorf("console does not say the long poll failed at %s:\n%s", first.url, con)
	}
	checkOnce(t, srv, fa, "wf", con)
}
