// Package agent is what runs on the machine being provisioned: Tinkerbell's
// tink-worker and Hook's init, in one. As PID 1 of the boot environment
// (Boot) it mounts the kernel's filesystems, loads the drivers the hardware
// needs, brings up every cabled link with DHCP, and reaps orphans; then (Run)
// it asks the server for the next action of this machine's workflow, runs it
// (internal/actions: natively when Anvil implements its image, else pulled
// and run in a container; the choice is in the action's start line and
// report), reports its start, progress and end, and streams every output
// line to the server.
//
// The rules it keeps: an action's start is acknowledged by the server before
// the action runs; its end is reported until the server acknowledges it,
// through server restarts and network blips, and an action this agent
// already finished is never run again; an action that takes the machine down
// (reboot, kexec, poweroff) does so only after its SUCCESS is durable on the
// server. A workflow cancelled on the server (answered CANCELLED to a
// report) is over, as one that ended otherwise: the action that was running
// finishes and is reported (and, if it succeeded, still takes the machine
// down if that is what it does), and no further action of it is run.
//
// The server may have several addresses (the replicas of Kubernetes mode,
// listed in anvil.server=): every call goes to one of them, the first that
// answers, and a connection-level failure there (refused, reset, timed out,
// a proxy's 502/503/504) moves every call to the next; a call that broke
// is made again there, which the server's idempotent reports allow. An
// answer of the API itself (a refused report, a bad token) moves nothing.
//
// It talks to the server only through the anvil.v1 AgentService API; it must
// not import server-side packages (store, workflow engine, boot services).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-containerregistry/pkg/authn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/oci"
)

// Workflow states as the server reports them.
const (
	stateSuccess   = "SUCCESS"
	stateFailed    = "FAILED"
	stateTimeout   = "TIMEOUT"
	stateCancelled = "CANCELLED"
)

// workflowEnded reports whether a workflow state the server answered is
// final: no action of that workflow is to run any more.
func workflowEnded(state string) bool {
	switch state {
	case stateSuccess, stateFailed, stateTimeout, stateCancelled:
		return true
	}
	return false
}

// Defaults for the zero values of Config.
const (
	DefaultWait       = 30 * time.Second
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	// maxMessage bounds the message of a failed action's report: the
	// error and the action's last output lines.
	maxMessage = 2048
	// tailLines is how many of an action's last output lines a failure
	// report carries.
	tailLines = 8
	// progressTimeout bounds one progress report: progress is best
	// effort, and a slow server must not slow the action.
	progressTimeout = 5 * time.Second
	// logFlushTimeout bounds the wait for output lines to reach the server
	// before the machine goes down.
	logFlushTimeout = 10 * time.Second
)

// ActionSet decides how each action runs: natively, or its image pulled
// and run in a container. *actions.Catalog implements it.
type ActionSet interface {
	Select(s actions.Spec) (actions.Selection, error)
}

// Config configures Run.
type Config struct {
	// Client calls the server's AgentService, when it has one address.
	// Exactly one of Client and Servers is required.
	Client anvilv1connect.AgentServiceClient
	// Servers are the server's addresses, in the order they are tried
	// (failover.go): the replicas of Kubernetes mode.
	Servers []Server
	// AgentID is this machine's agent ID (worker_id). Required.
	AgentID string
	// Actions runs the actions. Required.
	Actions ActionSet
	// Attributes describe the machine to the server; nil sends none.
	Attributes *v1.AgentAttributes
	// Console receives the lines an operator at the machine's console
	// reads: what the agent does, each action's start and end. If nil,
	// they are discarded.
	Console io.Writer
	// Verbose also prints every action output line on the console.
	Verbose bool
	// ConsoleStamp, if set, prefixes each console line.
	ConsoleStamp func() string
	// Wait is the GetAction long-poll wait. If 0, uses DefaultWait.
	Wait time.Duration
	// MinBackoff and MaxBackoff bound the wait between retries of a call
	// that failed. If 0, use DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// ExitWhenDone makes Run return once a workflow it ran an action of
	// has ended (the workflow's final state is in the Result). Otherwise
	// Run keeps asking for work until ctx ends, as a boot environment does.
	ExitWhenDone bool
	// OnWorkflowEnd, if set, is called when a report's answer says the
	// workflow ended (SUCCESS, FAILED, TIMEOUT or CANCELLED), with the
	// message of the action that ended it.
	OnWorkflowEnd func(workflowID, state, message string)
	// Clock stamps reports and log lines. If nil, clock.Real.
	Clock clock.Clock
	// BeforeAction, if set, is called before each action is reported
	// started and run (the boot environment waits for its disk drivers and
	// loads the action's filesystem driver there).
	BeforeAction func(ctx context.Context, s actions.Spec)
}

// Result says how Run ended.
type Result struct {
	// Actions counts the actions run (a re-sent report does not count).
	Actions int
	// WorkflowID and WorkflowState are of the last workflow reported on.
	WorkflowID    string
	WorkflowState string
}

// Agent runs actions for one machine. Create it with New; Run it once.
type Agent struct {
	cfg     Config
	console *console
	logs    *logShipper
	servers *servers
	// done remembers the final report of every action this agent ran,
	// by action ID and attempt, so that an action the server hands out
	// again (our report was durable but its answer lost) is not run again:
	// the report is sent again instead.
	mu   sync.Mutex
	done map[string]*v1.ReportActionStatusRequest
}

// New checks cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Client == nil && len(cfg.Servers) == 0:
		return nil, errors.New("agent: no API client")
	case cfg.Client != nil && len(cfg.Servers) > 0:
		return nil, errors.New("agent: both Client and Servers given")
	case cfg.AgentID == "":
		return nil, errors.New("agent: no agent ID (worker_id)")
	case cfg.Actions == nil:
		return nil, errors.New("agent: no action set")
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	cfg.Clock = clock.Or(cfg.Clock)
	list := cfg.Servers
	if cfg.Client != nil {
		list = []Server{{URL: "the server", Client: cfg.Client}}
	}
	for i, s := range list {
		if s.Client == nil {
			return nil, fmt.Errorf("agent: server %d (%s) has no API client", i+1, s.URL)
		}
	}
	a := &Agent{cfg: cfg, console: newConsole(cfg.Console), done: map[string]*v1.ReportActionStatusRequest{}}
	a.console.stamp = cfg.ConsoleStamp
	a.servers = newServers(list, a.Logf)
	a.logs = newLogShipper(a.servers, cfg.AgentID, a.console, backoff{min: cfg.MinBackoff, max: cfg.MaxBackoff}, cfg.Clock.Now)
	return a, nil
}

// Logf prints an agent line on the console and streams it to the server
// under the agent's ID (no workflow): what the agent does between actions.
func (a *Agent) Logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	a.console.printf("%s", line)
	a.record(line)
}

// actionLogf prints an agent line about an action on the console and
// streams it with the action's workflow, so that `anvil logs
// workflow/NAME` shows when each action started and how it ended.
func (a *Agent) actionLogf(act *v1.GetActionResponse, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	a.console.printf("%s", line)
	a.logs.add(&v1.LogLine{WorkflowId: act.GetWorkflowId(), AgentId: a.cfg.AgentID, TaskName: act.GetTaskName(),
		ActionName: act.GetName(), Stream: "agent", Line: line, Time: timestamppb.New(a.cfg.Clock.Now())})
}

// record streams a line to the server without printing it.
func (a *Agent) record(line string) {
	a.logs.add(&v1.LogLine{AgentId: a.cfg.AgentID, Stream: "agent", Line: line, Time: timestamppb.New(a.cfg.Clock.Now())})
}

// Run asks for actions and runs them until ctx ends (or, with
// ExitWhenDone, until a workflow ends). Failed calls are retried with
// back-off; Run returns an error only for ctx's end or a broken
// configuration.
func (a *Agent) Run(ctx context.Context) (Result, error) {
	logCtx, stopLogs := context.WithCancel(context.WithoutCancel(ctx))
	logsDone := make(chan struct{})
	go func() { defer close(logsDone); a.logs.run(logCtx) }()
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logFlushTimeout)
		a.logs.flush(flushCtx)
		cancel()
		stopLogs()
		<-logsDone
	}()

	var res Result
	a.Logf("anvil agent: %s asking %s for work", a.cfg.AgentID, a.servers.describe())
	for ctx.Err() == nil {
		act, err := a.nextAction(ctx)
		if err != nil {
			break // ctx ended
		}
		if act == nil {
			continue
		}
		out, err := a.runAction(ctx, act)
		if err != nil {
			break // ctx ended
		}
		if out.ran {
			res.Actions++
		}
		if out.workflowState != "" {
			res.WorkflowID, res.WorkflowState = act.GetWorkflowId(), out.workflowState
		}
		ended := workflowEnded(out.workflowState)
		if ended {
			if out.workflowState == stateCancelled {
				a.Logf("anvil agent: workflow %s was cancelled; running none of its further actions", act.GetWorkflowId())
			} else {
				a.Logf("anvil agent: workflow %s ended %s", act.GetWorkflowId(), out.workflowState)
			}
			if a.cfg.OnWorkflowEnd != nil {
				a.cfg.OnWorkflowEnd(act.GetWorkflowId(), out.workflowState, out.message)
			}
		}
		if out.then != nil {
			// The server has the SUCCESS; let the output lines follow it
			// before the machine goes down.
			flushCtx, cancel := context.WithTimeout(ctx, logFlushTimeout)
			a.logs.flush(flushCtx)
			cancel()
			a.console.printf("anvil agent: %s: acknowledged by the server; going ahead", act.GetName())
			if err := out.then(); err != nil {
				a.Logf("anvil agent: %s: %v", act.GetName(), err)
			}
		}
		if ended && a.cfg.ExitWhenDone {
			return res, nil
		}
	}
	return res, ctx.Err()
}

// nextAction long-polls for the next action. It returns (nil, nil) when
// there is none yet, and an error only when ctx ends.
func (a *Agent) nextAction(ctx context.Context) (*v1.GetActionResponse, error) {
	bo := backoff{min: a.cfg.MinBackoff, max: a.cfg.MaxBackoff}
	req := &v1.GetActionRequest{AgentId: a.cfg.AgentID, AgentAttributes: a.cfg.Attributes, Wait: durationpb.New(a.cfg.Wait)}
	for {
		var resp *connect.Response[v1.GetActionResponse]
		err := a.servers.call(ctx, a.cfg.Wait+pollGrace, "asking for work", func(ctx context.Context, c anvilv1connect.AgentServiceClient) (err error) {
			resp, err = c.GetAction(ctx, connect.NewRequest(req))
			return err
		})
		if err == nil {
			return resp.Msg, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil, nil
		}
		if bo.n == 0 || bo.n%10 == 0 {
			a.console.printf("anvil agent: asking for work: %v (retrying)", err)
		}
		if err := bo.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// actionOutcome is what running (or re-reporting) one action came to.
type actionOutcome struct {
	ran           bool
	workflowState string
	message       string
	then          func() error // set only for a SUCCESS the server acknowledged
}

func doneKey(act *v1.GetActionResponse) string {
	return fmt.Sprintf("%s/%s/%s#%d", act.GetWorkflowId(), act.GetTaskId(), act.GetActionId(), act.GetAttempt())
}

// runAction runs one action and reports it. Its error is ctx's.
func (a *Agent) runAction(ctx context.Context, act *v1.GetActionResponse) (actionOutcome, error) {
	name := act.GetName()
	a.mu.Lock()
	prev := a.done[doneKey(act)]
	a.mu.Unlock()
	if prev != nil {
		// Already run: the server did not see our end report. Never run
		// it twice; say again how it ended.
		a.Logf("anvil agent: %s (attempt %d) already ran and ended %s; reporting that again", name, act.GetAttempt(),
			prev.GetActionState())
		resp, err := a.report(ctx, prev)
		if err != nil {
			return actionOutcome{}, err
		}
		return actionOutcome{workflowState: resp.GetWorkflowState(), message: prev.GetMessage()}, nil
	}

	spec := actions.Spec{
		Name: name, Image: act.GetImage(), Command: act.GetCommand(), Env: act.GetEnvironment(),
		Volumes: act.GetVolumes(), Pid: act.GetPid(), Runtime: act.GetRuntime(), Images: imageSources(act.GetImages()),
		Timeout: time.Duration(act.GetTimeout()) * time.Second,
	}
	sel, lookupErr := a.cfg.Actions.Select(spec)
	if a.cfg.BeforeAction != nil && lookupErr == nil {
		// Before the start is reported: preparing the machine is not the
		// action's time.
		a.cfg.BeforeAction(ctx, spec)
	}
	start := a.cfg.Clock.Now()
	base := &v1.ReportActionStatusRequest{
		WorkflowId: act.GetWorkflowId(), AgentId: a.cfg.AgentID, TaskId: act.GetTaskId(),
		ActionId: act.GetActionId(), ActionName: name, ExecutionStart: timestamppb.New(start),
	}

	// The path is chosen per action and said in its start line and report,
	// so the workflow's history and the machine's log tell how it ran.
	how := "natively"
	if sel.Path == actions.PathContainer {
		how = "in a container"
	}
	startMsg := fmt.Sprintf("running %s (attempt %d) %s (%s)", act.GetImage(), max(act.GetAttempt(), 1), how, sel.Why)
	if lookupErr != nil {
		startMsg = "cannot run " + act.GetImage()
	}
	a.actionLogf(act, "anvil agent: %s: %s", name, startMsg)
	startReport := cloneReport(base)
	startReport.ActionState = v1.ActionState_ACTION_STATE_RUNNING
	startReport.Message = startMsg
	started, err := a.report(ctx, startReport)
	if err != nil {
		if errors.Is(err, errRefused) {
			return actionOutcome{}, nil // the server no longer wants it; ask again
		}
		return actionOutcome{}, err
	}
	if ws := started.GetWorkflowState(); workflowEnded(ws) {
		// Cancelled between handing the action out and its start: the
		// server acknowledged the start without recording it.
		a.actionLogf(act, "anvil agent: %s: not run: workflow %s is %s", name, act.GetWorkflowId(), ws)
		return actionOutcome{workflowState: ws}, nil
	}

	out := newActionOutput(a, act)
	var (
		result actions.Result
		runErr error
		state  = v1.ActionState_ACTION_STATE_SUCCESS
	)
	if lookupErr != nil {
		runErr = lookupErr
		state = v1.ActionState_ACTION_STATE_FAILED
	} else {
		runCtx, cancel := ctx, context.CancelFunc(func() {})
		if t := act.GetTimeout(); t > 0 {
			runCtx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		}
		result, runErr = sel.Run(runCtx, spec, out)
		timedOut := runCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil
		cancel()
		out.stopProgress()
		if ctx.Err() != nil {
			return actionOutcome{}, ctx.Err() // stopped, not ended: the server keeps it RUNNING
		}
		switch {
		case runErr == nil:
		case timedOut:
			state = v1.ActionState_ACTION_STATE_TIMEOUT
			runErr = fmt.Errorf("timed out after %ds: %w", act.GetTimeout(), runErr)
		default:
			state = v1.ActionState_ACTION_STATE_FAILED
		}
	}
	stop := a.cfg.Clock.Now()
	end := cloneReport(base)
	end.ActionState = state
	end.ExecutionStop = timestamppb.New(stop)
	end.ExecutionDuration = durationpb.New(stop.Sub(start))
	end.Progress = out.lastProgress()
	// A commissioning action's checks go with its end report, passed or
	// failed: the failed ones are why the machine is marked.
	end.Checks = checksToProto(result.Checks)
	if runErr != nil {
		end.Message = failureMessage(runErr, out.tail())
		a.actionLogf(act, "anvil agent: %s: %s after %s: %v", name, shortState(state), stop.Sub(start).Round(time.Millisecond), runErr)
	} else {
		end.Message = "done in " + stop.Sub(start).Round(time.Millisecond).String()
		a.actionLogf(act, "anvil agent: %s: SUCCESS in %s", name, stop.Sub(start).Round(time.Millisecond))
	}
	a.mu.Lock()
	a.done[doneKey(act)] = end
	a.mu.Unlock()
	resp, err := a.report(ctx, end)
	if err != nil {
		if errors.Is(err, errRefused) {
			return actionOutcome{ran: true}, nil
		}
		return actionOutcome{ran: true}, err
	}
	o := actionOutcome{ran: true, workflowState: resp.GetWorkflowState(), message: end.GetMessage()}
	if state == v1.ActionState_ACTION_STATE_SUCCESS {
		o.then = result.Then
	}
	return o, nil
}

// checksToProto is an action's commissioning checks as the wire carries
// them.
func checksToProto(checks []actions.Check) []*v1.CommissioningCheck {
	var out []*v1.CommissioningCheck
	for _, c := range checks {
		out = append(out, &v1.CommissioningCheck{Name: c.Name, Result: c.Result, Detail: c.Detail,
			Values: c.Values, Time: timestamppb.New(c.Time)})
	}
	return out
}

func shortState(s v1.ActionState) string {
	return strings.TrimPrefix(s.String(), "ACTION_STATE_")
}

func cloneReport(r *v1.ReportActionStatusRequest) *v1.ReportActionStatusRequest {
	return proto.Clone(r).(*v1.ReportActionStatusRequest)
}

// failureMessage is the error and the action's last output lines, bounded.
func failureMessage(err error, tail []string) string {
	msg := err.Error()
	if len(tail) > 0 {
		msg += "; last output: " + strings.Join(tail, " | ")
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	return msg
}

// imageSources is the server's resolution of the action's images, by image.
func imageSources(in []*v1.ImageSource) map[string]actions.ImageSource {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]actions.ImageSource, len(in))
	for _, s := range in {
		src := actions.ImageSource{Err: s.GetError(), Source: oci.Source{
			Image: s.GetImage(), Ref: s.GetRef(), Mirror: s.GetMirror(), PlainHTTP: s.GetPlainHttp(), CA: s.GetCaPem(),
		}}
		if c := s.GetCredentials(); c != nil {
			src.Auth = authn.AuthConfig{Username: c.GetUsername(), Password: c.GetPassword(),
				IdentityToken: c.GetIdentityToken(), RegistryToken: c.GetRegistryToken()}
		}
		out[s.GetImage()] = src
	}
	return out
}

// errRefused: the server answered a report with a refusal that retrying
// cannot change (the workflow is gone, or no longer expects this report).
var errRefused = errors.New("report refused")

// report sends r until the server acknowledges it. A refusal (the workflow
// was deleted, or the report no longer fits it) is errRefused; otherwise
// the only error is ctx's.
func (a *Agent) report(ctx context.Context, r *v1.ReportActionStatusRequest) (*v1.ReportActionStatusResponse, error) {
	bo := backoff{min: a.cfg.MinBackoff, max: a.cfg.MaxBackoff}
	what := "report " + shortState(r.GetActionState()) + " of " + r.GetActionName()
	for {
		var resp *connect.Response[v1.ReportActionStatusResponse]
		err := a.servers.call(ctx, reportTimeout, what, func(ctx context.Context, c anvilv1connect.AgentServiceClient) (err error) {
			resp, err = c.ReportActionStatus(ctx, connect.NewRequest(r))
			return err
		})
		if err == nil {
			if bo.n > 0 {
				a.console.printf("anvil agent: %s: report %s delivered after %d retries", r.GetActionName(),
					shortState(r.GetActionState()), bo.n)
			}
			return resp.Msg, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch connect.CodeOf(err) {
		case connect.CodeNotFound, connect.CodeFailedPrecondition, connect.CodeInvalidArgument, connect.CodePermissionDenied:
			a.Logf("anvil agent: %s: the server refused the %s report: %v", r.GetActionName(), shortState(r.GetActionState()), err)
			return nil, fmt.Errorf("%w: %v", errRefused, err)
		}
		if bo.n == 0 || bo.n%10 == 0 {
			a.console.printf("anvil agent: %s: report %s: %v (retrying until the server answers)", r.GetActionName(),
				shortState(r.GetActionState()), err)
		}
		if err := bo.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// backoff doubles a wait from min to max per failure.
type backoff struct {
	min, max time.Duration
	n        int
}

func (b *backoff) next() time.Duration {
	d := b.min
	for i := 0; i < b.n && d < b.max; i++ {
		d *= 2
	}
	b.n++
	return min(d, b.max)
}

func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
