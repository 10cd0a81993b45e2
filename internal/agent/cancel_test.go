package agent_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/agent"
	"github.com/anvilproj/anvil/internal/model"
)

// cancelJob cancels a workflow through the server's JobService.
func (s *server) cancelJob(name string) *v1.JobStatus {
	s.t.Helper()
	c := anvilv1connect.NewJobServiceClient(http.DefaultClient, s.url())
	r, err := c.CancelJob(context.Background(), connect.NewRequest(&v1.CancelJobRequest{JobId: "default/" + name}))
	if err != nil {
		s.t.Errorf("CancelJob: %v", err)
		return nil
	}
	return r.Msg.GetJob()
}

// A workflow cancelled while an action runs: the action finishes and is
// reported, then the agent stops — it runs nothing further and says so.
func TestCancelStopsAfterCurrentAction(t *testing.T) {
	srv := newServer(t)
	srv.apply(manifest("wf", action("write", "img-write", 60, "")+action("hostname", "img-hostname", 60, "")+
		action("reboot", "img-reboot", 60, "")))
	fa := newFakeActions(map[string]actions.Runner{
		"img-write": func(_ context.Context, _ actions.Spec, out actions.Output) (actions.Result, error) {
			// The operator cancels while the image is being written.
			if s := srv.cancelJob("wf"); s.GetState() != v1.JobState_JOB_STATE_CANCELLING {
				t.Errorf("CancelJob while write runs = %v; want CANCELLING", s)
			}
			out.Line("stdout", "image written")
			return actions.Result{}, nil
		},
		"img-hostname": succeed(),
		"img-reboot":   succeed(),
	})
	res, con := runAgent(t, srv, fa)
	if res.WorkflowState != string(model.StateCancelled) || res.Actions != 1 {
		t.Fatalf("Run = %+v; want CANCELLED after 1 action\nconsole:\n%s", res, con)
	}
	if fa.count("hostname") != 0 || fa.count("reboot") != 0 {
		t.Errorf("actions after the cancellation ran: hostname %d, reboot %d times", fa.count("hostname"), fa.count("reboot"))
	}
	wf := srv.workflow("wf")
	if got := wf.Status.Tasks[0].Actions; wf.Status.State != model.StateCancelled || got[0].State != model.StateSuccess ||
		got[1].State != model.StatePending {
		t.Errorf("stored workflow %s, actions %s %s; want CANCELLED with write's SUCCESS recorded", wf.Status.State, got[0].State, got[1].State)
	}
	if !strings.Contains(con.String(), "workflow default/wf was cancelled; running none of its further actions") {
		t.Errorf("console does not say the workflow was cancelled:\n%s", con)
	}
	if logs := srv.logs("wf"); !strings.Contains(logs, "write stdout image written") {
		t.Errorf("the finishing action's output is not in the workflow's log:\n%s", logs)
	}
}

// A workflow cancelled after the agent was handed an action but before
// it started it: the server acknowledges the start with CANCELLED and the
// agent does not run the action.
func TestCancelBeforeActionStarts(t *testing.T) {
	srv := newServer(t)
	srv.apply(manifest("wf", action("write", "img-write", 60, "")))
	fa := newFakeActions(map[string]actions.Runner{"img-write": succeed()})
	con := &syncBuffer{}
	a, err := agent.New(agent.Config{
		Client:  anvilv1connect.NewAgentServiceClient(http.DefaultClient, srv.url()),
		AgentID: mac, Actions: fa, Console: con, Wait: time.Second,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, ExitWhenDone: true,
		BeforeAction: func(context.Context, actions.Spec) {
			if s := srv.cancelJob("wf"); s.GetState() != v1.JobState_JOB_STATE_CANCELLED {
				t.Errorf("CancelJob before the start = %v; want CANCELLED", s)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.Run(ctx)
	if err != nil || res.WorkflowState != string(model.StateCancelled) || res.Actions != 0 {
		t.Fatalf("Run = %+v, %v; want CANCELLED with no action run\n%s", res, err, con)
	}
	if n := fa.count("write"); n != 0 {
		t.Errorf("write ran %d times; want 0", n)
	}
	if !strings.Contains(con.String(), "write: not run: workflow default/wf is CANCELLED") {
		t.Errorf("console does not say why write did not run:\n%s", con)
	}
}
