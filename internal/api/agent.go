package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/wire"
	"github.com/anvilproj/anvil/internal/workflow"
)

// logBatch is how many streamed lines StreamLogs buffers before appending.
const logBatch = 256

type agentService struct{ s *Services }

// GetAction long-polls the engine for agent_id's next action.
func (a agentService) GetAction(ctx context.Context, req *connect.Request[v1.GetActionRequest]) (*connect.Response[v1.GetActionResponse], error) {
	s := a.s
	if s.cfg.Engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the workflow engine is not running"))
	}
	agentID := req.Msg.GetAgentId()
	if agentID == "" {
		return nil, invalid("missing agent_id")
	}
	wait := req.Msg.GetWait().AsDuration()
	if req.Msg.GetWait() == nil || wait < 0 {
		wait = 0
	}
	agent := workflow.ParseAgentName(agentID) // read once, here
	na, err := s.pollAction(ctx, agent, wait)
	if err != nil {
		return nil, err
	}
	// Checked once the action is known: the token belongs to a workflow,
	// and which workflow an agent is owed is the engine's answer. Nothing
	// is handed out before the check passes.
	if err := s.checkAgent(ctx, newAgentCall(req.Spec().Procedure, req.Header(), req.Peer().Addr, agent), na.WorkflowID); err != nil {
		return nil, err
	}
	s.recordInventory(ctx, agent, req.Msg.GetAgentAttributes().GetInventory())
	return connect.NewResponse(&v1.GetActionResponse{
		WorkflowId:  na.WorkflowID,
		TaskId:      na.TaskID,
		ActionId:    na.ActionID,
		TaskName:    na.TaskName,
		Name:        na.Name,
		Image:       na.Image,
		Timeout:     na.Timeout,
		Command:     na.Command,
		Volumes:     na.Volumes,
		Environment: na.Environment,
		Pid:         na.Pid,
		Attempt:     int32(na.Attempt),
		Runtime:     cmp.Or(na.Runtime, s.cfg.ActionRuntime),
		Images:      s.imageSources(ctx, na, agent),
	}), nil
}

// recordInventory keeps the inventory an agent sent (internal/hwinfo's
// JSON) as status.attributes of its machine's Hardware. Only once the call
// has passed checkAgent, that is with an action handed out: a caller
// whose token is not its workflow's writes nothing on any Hardware. Best
// effort, as storeAttributes.
func (s *Services) recordInventory(ctx context.Context, agent workflow.AgentName, inventory []byte) {
	if len(inventory) == 0 {
		return
	}
	hws, err := workflow.AgentHardware(ctx, s.cfg.Store, agent)
	if err != nil || len(hws) != 1 {
		// No machine, or several that share the name: none is surely
		// the caller's.
		return
	}
	s.storeAttributes(ctx, hws[0], inventory, false)
}

// pollAction long-polls the engine for agent's next action, waiting up
// to wait (capped at Config.MaxWait). Nothing to run, also when the server
// stops meanwhile, is NOT_FOUND: both agents ask again.
func (s *Services) pollAction(ctx context.Context, agent workflow.AgentName, wait time.Duration) (*workflow.NextAction, error) {
	wait = min(wait, s.cfg.MaxWait)
	pollCtx, cancel := s.longLived(ctx)
	defer cancel()
	na, err := s.cfg.Engine.GetActionFor(pollCtx, agent, wait)
	if err != nil && ctx.Err() == nil && s.stopped() {
		return nil, connect.NewError(connect.CodeNotFound,
			fmt.Errorf("no action for agent %q: the server is shutting down; ask again: %w", agent.ID, workflow.ErrNoAction))
	}
	if errors.Is(err, workflow.ErrNoAction) {
		return nil, connect.NewError(connect.CodeNotFound,
			fmt.Errorf("no action for agent %q (waited %s): %w", agent.ID, wait, err))
	}
	if err != nil {
		return nil, s.toConnect(fmt.Errorf("get action for agent %q: %w", agent.ID, err))
	}
	return na, nil
}

// actionStates maps the wire's ActionState to the model's states.
var actionStates = map[v1.ActionState]model.State{
	v1.ActionState_ACTION_STATE_PENDING: model.StatePending,
	v1.ActionState_ACTION_STATE_RUNNING: model.StateRunning,
	v1.ActionState_ACTION_STATE_SUCCESS: model.StateSuccess,
	v1.ActionState_ACTION_STATE_FAILED:  model.StateFailed,
	v1.ActionState_ACTION_STATE_TIMEOUT: model.StateTimeout,
}

// ReportActionStatus passes the report to the engine; the engine answers
// only once the report is durable.
func (a agentService) ReportActionStatus(ctx context.Context, req *connect.Request[v1.ReportActionStatusRequest]) (*connect.Response[v1.ReportActionStatusResponse], error) {
	s := a.s
	if s.cfg.Engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the workflow engine is not running"))
	}
	m := req.Msg
	state, ok := actionStates[m.GetActionState()]
	if !ok {
		return nil, invalid("action_state %v: want RUNNING, SUCCESS, FAILED or TIMEOUT", m.GetActionState())
	}
	if m.GetWorkflowId() == "" {
		return nil, invalid("missing workflow_id")
	}
	agent := workflow.ParseAgentName(m.GetAgentId()) // read once, here
	call := newAgentCall(req.Spec().Procedure, req.Header(), req.Peer().Addr, agent)
	call.taskID, call.actionID = m.GetTaskId(), m.GetActionId()
	if err := s.checkAgent(ctx, call, m.GetWorkflowId()); err != nil {
		return nil, err
	}
	r := workflow.ActionReport{
		WorkflowID:     m.GetWorkflowId(),
		Agent:          agent,
		AgentID:        m.GetAgentId(),
		TaskID:         m.GetTaskId(),
		ActionID:       m.GetActionId(),
		ActionName:     m.GetActionName(),
		State:          state,
		ExecutionStart: wire.TimeFromProto(m.GetExecutionStart()),
		ExecutionStop:  wire.TimeFromProto(m.GetExecutionStop()),
		Message:        m.GetMessage(),
		Progress:       wire.ProgressFromProto(m.GetProgress()),
	}
	wfState, err := s.cfg.Engine.ReportActionStatus(ctx, r)
	if err != nil {
		return nil, s.toConnect(fmt.Errorf("report on workflow %s action %q: %w", r.WorkflowID, r.ActionName, err))
	}
	s.recordCommissioning(ctx, agent, r.WorkflowID, m.GetChecks(), wfState)
	return connect.NewResponse(&v1.ReportActionStatusResponse{WorkflowState: string(wfState)}), nil
}

// StreamLogs appends the streamed lines to the log store in batches. Lines
// received before an error are kept; lines_accepted counts them.
func (a agentService) StreamLogs(ctx context.Context, stream *connect.ClientStream[v1.LogLine]) (*connect.Response[v1.StreamLogsResponse], error) {
	s := a.s
	if s.cfg.Logs == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the log store is not open"))
	}
	var (
		batch    []logstore.Line
		accepted int64
	)
	skew := clockSkew(stream.RequestHeader().Get(v1.SentAtHeader), time.Now())
	// Each workflow (and agent) the stream writes for is checked once.
	checked := map[[2]string]bool{}
	var dropped int64 // agent lines no workflow vouches for
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := s.cfg.Logs.Append(batch...); err != nil {
			return s.toConnect(fmt.Errorf("store logs: %w", err))
		}
		accepted += int64(len(batch))
		batch = batch[:0]
		return nil
	}
	for stream.Receive() {
		l := stream.Msg()
		if l.GetWorkflowId() == "" && l.GetAgentId() == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			return nil, invalid("log line %d names neither a workflow nor an agent", accepted+1)
		}
		if s.cfg.AgentKey != nil {
			who := [2]string{l.GetWorkflowId(), l.GetAgentId()}
			if !checked[who] {
				wfID := l.GetWorkflowId()
				if wfID == "" {
					// An agent's own line (before its first action, say):
					// vouched for by the workflow its token is for. One
					// that no workflow vouches for (an agent booted with
					// nothing to do) is dropped, not fatal: the stream's
					// other lines are still wanted.
					wfID = s.tokenWorkflow(ctx, stream.RequestHeader().Get(v1.AgentTokenHeader), l.GetAgentId())
					if wfID == "" {
						agentRefused.WithLabelValues(protoAnvil, "unvouched_line").Inc()
						dropped++
						continue
					}
				}
				if err := s.checkAgent(ctx, newAgentCall(stream.Spec().Procedure, stream.RequestHeader(), stream.Peer().Addr, workflow.ParseAgentName(l.GetAgentId())), wfID); err != nil {
					if ferr := flush(); ferr != nil {
						return nil, ferr
					}
					return nil, err
				}
				checked[who] = true
			}
		}
		t := time.Now()
		if l.GetTime() != nil {
			t = l.GetTime().AsTime().Add(skew)
		}
		batch = append(batch, logstore.Line{
			WorkflowID: l.GetWorkflowId(), AgentID: l.GetAgentId(),
			TaskName: l.GetTaskName(), ActionName: l.GetActionName(),
			Time: t, Stream: l.GetStream(), Line: l.GetLine(),
		})
		if len(batch) >= logBatch {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if dropped > 0 {
		s.log.Warn("agent log lines dropped: no workflow of the agent vouches for its token", "lines", dropped, "client_ip", s.clientIP(ctx, stream.Peer().Addr))
	}
	// Dropped lines count as taken: the agent must not send them again.
	return connect.NewResponse(&v1.StreamLogsResponse{LinesAccepted: accepted + dropped}), nil
}

// clockSkew is how far the server's clock (now) is ahead of the sender's,
// from v1.SentAtHeader's value; 0 when it is missing or malformed.
func clockSkew(sentAt string, now time.Time) time.Duration {
	if sentAt == "" {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, sentAt)
	if err != nil {
		return 0
	}
	return now.Sub(t)
}
