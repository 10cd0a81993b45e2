// Package agentsim is a simulated agent: it speaks the real AgentService
// protocol (GetAction, ReportActionStatus, StreamLogs) exactly as a machine's
// agent would, but "runs" each action by waiting. `make demo` uses it until
// the boot path exists, and the fleet benchmark runs thousands of them.
//
// It owns only the client side of the agent protocol; it must not touch the
// store or any server package.
package agentsim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"

	"github.com/anvilproj/anvil/internal/clock"
)

// Config describes one simulated agent.
type Config struct {
	Client  anvilv1connect.AgentServiceClient
	AgentID string
	// ActionTime is how long each action "runs". 0 means none.
	ActionTime time.Duration
	// ProgressSteps, if > 0, sends that many progress reports during each
	// action whose image looks like image2disk, with made-up byte counts.
	ProgressSteps int
	// Wait is the GetAction long-poll wait. If 0, uses 10s.
	Wait time.Duration
	// Observe, if set, is told the latency of every call ("GetAction",
	// "ReportActionStatus") and whether it failed.
	Observe func(op string, d time.Duration, err error)
	// Logf, if set, narrates what the agent does.
	Logf func(format string, args ...any)
	// StreamLogs sends a couple of output lines per action when set.
	StreamLogs bool
	// Clock stamps report times. If nil, clock.Real.
	Clock clock.Clock
}

// Result says how a run ended.
type Result struct {
	WorkflowState string
	Actions       int
}

// ErrTooManyFailures: the server kept failing calls.
var ErrTooManyFailures = errors.New("agentsim: too many consecutive failures")

// Run asks for actions and completes them until a report says the workflow
// ended (or ctx ends). Transient call failures are retried with back-off.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Wait == 0 {
		cfg.Wait = 10 * time.Second
	}
	cfg.Clock = clock.Or(cfg.Clock)
	var res Result
	failures := 0
	for ctx.Err() == nil {
		act, err := getAction(ctx, &cfg)
		if err != nil {
			if connect.CodeOf(err) == connect.CodeNotFound {
				continue // nothing yet: poll again
			}
			if failures++; failures > 20 {
				return res, fmt.Errorf("%w: %v", ErrTooManyFailures, err)
			}
			sleep(ctx, time.Duration(failures)*100*time.Millisecond)
			continue
		}
		failures = 0
		state, err := runAction(ctx, &cfg, act)
		if err != nil {
			return res, err
		}
		res.Actions++
		res.WorkflowState = state
		switch state {
		case "SUCCESS", "FAILED", "TIMEOUT", "CANCELLED":
			return res, nil
		}
	}
	return res, ctx.Err()
}

func getAction(ctx context.Context, cfg *Config) (*v1.GetActionResponse, error) {
	start := time.Now()
	resp, err := cfg.Client.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{
		AgentId: cfg.AgentID, Wait: durationpb.New(cfg.Wait),
	}))
	if cfg.Observe != nil {
		cfg.Observe("GetAction", time.Since(start), err)
	}
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// runAction reports the start, optional progress and success of one action,
// and returns the workflow's state after the final report.
func runAction(ctx context.Context, cfg *Config, a *v1.GetActionResponse) (string, error) {
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	started := cfg.Clock.Now()
	logf("%s: running %s/%s (%s)", cfg.AgentID, a.GetTaskName(), a.GetName(), a.GetImage())
	report := &v1.ReportActionStatusRequest{
		WorkflowId: a.GetWorkflowId(), AgentId: cfg.AgentID, TaskId: a.GetTaskId(),
		ActionId: a.GetActionId(), ActionName: a.GetName(),
		ActionState: v1.ActionState_ACTION_STATE_RUNNING, ExecutionStart: timestamppb.New(started),
	}
	if _, err := reportWithRetry(ctx, cfg, report); err != nil {
		return "", err
	}
	if cfg.StreamLogs {
		streamLines(ctx, cfg, a, fmt.Sprintf("simulated %s starting", a.GetName()), "done")
	}
	steps := 0
	if cfg.ProgressSteps > 0 && looksLikeImageWrite(a.GetImage()) {
		steps = cfg.ProgressSteps
	}
	const total = int64(1) << 30 // a pretend 1 GiB image
	for i := 1; i <= steps; i++ {
		sleep(ctx, cfg.ActionTime/time.Duration(steps+1))
		elapsed := cfg.Clock.Now().Sub(started).Seconds()
		done := total * int64(i) / int64(steps+1)
		p := &v1.Progress{Bytes: done, TotalBytes: total}
		if elapsed > 0 {
			p.BytesPerSec = float64(done) / elapsed
		}
		progress := &v1.ReportActionStatusRequest{
			WorkflowId: report.WorkflowId, AgentId: cfg.AgentID, TaskId: report.TaskId, ActionId: report.ActionId,
			ActionName: report.ActionName, ActionState: v1.ActionState_ACTION_STATE_RUNNING,
			ExecutionStart: report.ExecutionStart, Progress: p,
		}
		if _, err := reportWithRetry(ctx, cfg, progress); err != nil {
			return "", err
		}
	}
	if steps == 0 {
		sleep(ctx, cfg.ActionTime)
	} else {
		sleep(ctx, cfg.ActionTime/time.Duration(steps+1))
	}
	stop := cfg.Clock.Now()
	end := &v1.ReportActionStatusRequest{
		WorkflowId: report.WorkflowId, AgentId: cfg.AgentID, TaskId: report.TaskId, ActionId: report.ActionId,
		ActionName: report.ActionName, ActionState: v1.ActionState_ACTION_STATE_SUCCESS,
		ExecutionStart: report.ExecutionStart, ExecutionStop: timestamppb.New(stop),
		ExecutionDuration: durationpb.New(stop.Sub(started)), Message: "simulated",
	}
	resp, err := reportWithRetry(ctx, cfg, end)
	if err != nil {
		return "", err
	}
	return resp.GetWorkflowState(), nil
}

// reportWithRetry sends a report, retrying every failure but a refusal
// (the codes the real agent, internal/agent, gives up on): a report that
// is lost would leave the workflow waiting for the action's timeout.
func reportWithRetry(ctx context.Context, cfg *Config, r *v1.ReportActionStatusRequest) (*v1.ReportActionStatusResponse, error) {
	for attempt := 1; ; attempt++ {
		start := time.Now()
		resp, err := cfg.Client.ReportActionStatus(ctx, connect.NewRequest(r))
		if cfg.Observe != nil {
			cfg.Observe("ReportActionStatus", time.Since(start), err)
		}
		if err == nil {
			return resp.Msg, nil
		}
		switch connect.CodeOf(err) {
		case connect.CodeNotFound, connect.CodeFailedPrecondition, connect.CodeInvalidArgument, connect.CodePermissionDenied:
			// A refusal: the same report would be refused again.
		default:
			// Anything else may be the server or the connection failing,
			// including a reply cut off when the replica died (Internal:
			// "incomplete envelope"), as the real agent assumes.
			if attempt < 20 && ctx.Err() == nil {
				sleep(ctx, time.Duration(attempt)*100*time.Millisecond)
				continue
			}
		}
		return nil, fmt.Errorf("report %s %s: %w", r.GetActionName(), r.GetActionState(), err)
	}
}

func streamLines(ctx context.Context, cfg *Config, a *v1.GetActionResponse, lines ...string) {
	s := cfg.Client.StreamLogs(ctx)
	for _, l := range lines {
		if err := s.Send(&v1.LogLine{WorkflowId: a.GetWorkflowId(), AgentId: cfg.AgentID, TaskName: a.GetTaskName(),
			ActionName: a.GetName(), Time: timestamppb.New(cfg.Clock.Now()), Stream: "stdout", Line: l}); err != nil {
			break
		}
	}
	_, _ = s.CloseAndReceive() // logs are best effort; the action's report is what counts
}

func looksLikeImageWrite(image string) bool {
	for _, s := range []string{"image2disk", "oci2disk", "archive2disk"} {
		if strings.Contains(image, s) {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
