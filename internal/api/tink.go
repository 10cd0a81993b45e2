package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	tinkproto "github.com/anvilproj/anvil/api/proto"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// tinkService serves Tinkerbell's worker protocol (proto.WorkflowService)
// to tink-agent, as Hook runs it, on the same engine as Anvil's own agent
// service: the same long poll, idempotent reports and server clock. The
// protocol has no token and no log stream; a call is bound to its machine
// by the caller's address (bindTinkAgent), and the action's output stays
// with the agent.
type tinkService struct{ s *Services }

// GetAction long-polls for the agent's next action (up to Config.MaxWait:
// tink-agent sets no deadline on the call, and asks again with a back-off
// of at most a few seconds after NOT_FOUND). It first records the
// AgentAttributes the agent sends on its Hardware.
func (t tinkService) GetAction(ctx context.Context, req *connect.Request[tinkproto.ActionRequest]) (*connect.Response[tinkproto.ActionResponse], error) {
	s := t.s
	if s.cfg.Engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the workflow engine is not running"))
	}
	id := req.Msg.GetAgentId()
	if err := checkTinkAgentID(id); err != nil {
		return nil, err
	}
	call := agentCall{protocol: protoTinkerbell, procedure: req.Spec().Procedure, peer: req.Peer().Addr, agent: workflow.ParseAgentName(id)}
	if s.disc != nil {
		if err := s.discoverTinkAgent(ctx, call, req.Msg.GetAgentAttributes()); err != nil {
			return nil, err
		}
	}
	hw, err := s.bindTinkAgent(ctx, call, "")
	if err != nil {
		return nil, err
	}
	agent := call.agent
	if hw != nil {
		s.recordAttributes(ctx, hw, req.Msg.GetAgentAttributes())
		// The machine the call is bound to, whichever of its names the
		// agent used and however many Hardware share that name.
		if a := workflow.AgentNameOf(hw); a.ID != "" {
			agent = a
		}
	}
	na, err := s.pollAction(ctx, agent, s.cfg.MaxWait)
	if err != nil {
		return nil, err
	}
	if err := s.checkAgent(ctx, call, na.WorkflowID); err != nil {
		return nil, err
	}
	return connect.NewResponse(&tinkproto.ActionResponse{
		WorkflowId:  na.WorkflowID,
		TaskId:      na.TaskID,
		AgentId:     id,
		ActionId:    na.ActionID,
		Name:        na.Name,
		Image:       na.Image,
		Timeout:     na.Timeout,
		Command:     na.Command,
		Volumes:     na.Volumes,
		Environment: envList(na.Environment),
		Pid:         na.Pid,
	}), nil
}

// discoverTinkAgent makes the Hardware of a tink-agent that no Hardware
// knows, of the attributes it sent (discover), when its agent ID is a MAC
// (Hook's worker_id is the MAC it booted from). Tinkerbell's protocol
// carries no token: the call is bound to its Hardware by address alone,
// so the Hardware reserves the address the agent calls from (its pool
// lease's mask and gateway when the discovery pool gave it). An agent ID
// that is no MAC, or a call without attributes, is left to bindTinkAgent,
// which refuses it as without discovery.
func (s *Services) discoverTinkAgent(ctx context.Context, c agentCall, attrs *tinkproto.AgentAttributes) error {
	if !c.agent.MAC.IsValid() || attrs == nil {
		return nil
	}
	hws, err := workflow.AgentHardware(ctx, s.cfg.Store, c.agent)
	if err != nil {
		return s.toConnect(err)
	}
	if len(hws) > 0 {
		return nil
	}
	raw, err := attributesJSON(attrs)
	if err != nil {
		return invalid("agent %q: attributes: %v", c.agent.ID, err)
	}
	parsed, err := parseInventory(raw)
	if err != nil {
		discoveryTotal.WithLabelValues(discoveryBad).Inc()
		return invalid("agent %q: %v", c.agent.ID, err)
	}
	ip := s.clientIP(ctx, c.peer)
	lease := s.disc.lease(c.agent.MAC, ip)
	if lease == nil {
		lease = &model.IP{Address: ip}
	}
	_, _, err = s.discover(ctx, c, c.agent.MAC, ip, lease, parsed, raw, true)
	return err
}

// maxAgentIDBytes bounds an agent ID: a MAC, or a spec.agentID, which
// Tinkerbell keeps to a Kubernetes name's 253 characters. A longer one
// could be nobody's, and would only fill the logs and the audit record
// of its refusal.
const maxAgentIDBytes = 253

// checkTinkAgentID refuses an agent_id that is missing or too long to be
// any Hardware's, without repeating it.
func checkTinkAgentID(id string) error {
	switch {
	case id == "":
		return invalid("missing agent_id (tink-agent's -id flag, Hook's worker_id= kernel argument)")
	case len(id) > maxAgentIDBytes:
		return invalid("agent_id is %d bytes; an agent ID (a MAC or a Hardware's spec.agentID) has at most %d", len(id), maxAgentIDBytes)
	}
	return nil
}

// envList is an environment as Tinkerbell's protocol carries it: "K=V"
// strings, sorted by key.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// tinkStates maps the wire's StateType to the model's states: an agent
// reports an action's start (RUNNING) and its end.
var tinkStates = map[tinkproto.ActionStatusRequest_StateType]model.State{
	tinkproto.ActionStatusRequest_RUNNING: model.StateRunning,
	tinkproto.ActionStatusRequest_SUCCESS: model.StateSuccess,
	tinkproto.ActionStatusRequest_FAILED:  model.StateFailed,
	tinkproto.ActionStatusRequest_TIMEOUT: model.StateTimeout,
}

// ReportActionStatus passes the report to the engine, which answers once it
// is durable. The agent's execution_start, execution_stop and
// execution_duration are not used: the server's clock is the truth (a
// tink-agent's RUNNING report carries zero times, and a machine in a boot
// environment may have no correct time).
func (t tinkService) ReportActionStatus(ctx context.Context, req *connect.Request[tinkproto.ActionStatusRequest]) (*connect.Response[tinkproto.ActionStatusResponse], error) {
	s := t.s
	if s.cfg.Engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the workflow engine is not running"))
	}
	m := req.Msg
	state, ok := tinkStates[m.GetActionState()]
	if !ok {
		return nil, invalid("action_state %v: want RUNNING, SUCCESS, FAILED or TIMEOUT", m.GetActionState())
	}
	if err := checkTinkAgentID(m.GetAgentId()); err != nil {
		return nil, err
	}
	if m.GetWorkflowId() == "" {
		return nil, invalid("missing workflow_id")
	}
	call := agentCall{protocol: protoTinkerbell, procedure: req.Spec().Procedure, peer: req.Peer().Addr,
		agent: workflow.ParseAgentName(m.GetAgentId()), taskID: m.GetTaskId(), actionID: m.GetActionId()}
	if _, err := s.bindTinkAgent(ctx, call, m.GetWorkflowId()); err != nil {
		return nil, err
	}
	if err := s.checkAgent(ctx, call, m.GetWorkflowId()); err != nil {
		return nil, err
	}
	r := workflow.ActionReport{
		WorkflowID: m.GetWorkflowId(),
		AgentID:    m.GetAgentId(),
		TaskID:     m.GetTaskId(),
		ActionID:   m.GetActionId(),
		ActionName: m.GetActionName(),
		State:      state,
		Message:    m.GetMessage().GetMessage(),
	}
	if _, err := s.cfg.Engine.ReportActionStatus(ctx, r); err != nil {
		return nil, s.toConnect(fmt.Errorf("report on workflow %s action %q: %w", r.WorkflowID, r.ActionName, err))
	}
	return connect.NewResponse(&tinkproto.ActionStatusResponse{}), nil
}

// maxAttributesBytes caps the attributes kept on a Hardware. A real
// machine's are a few KiB (mostly CPU flags; internal/hwinfo keeps
// Anvil's agent's to 48 KiB); the cap keeps a Hardware well under the
// ~1.5 MiB Kubernetes allows an object.
const maxAttributesBytes = 64 << 10

// recordAttributes keeps the AgentAttributes of a tink-agent's GetAction
// on the Hardware the call is bound to: as the annotation
// model.AgentAttributesAnnotation (Tinkerbell's place for them, in its
// JSON shape) and as status.attributes. It is best effort: the action is
// handed out whatever happens here, and a failure is logged and counted.
func (s *Services) recordAttributes(ctx context.Context, hw *model.Hardware, attrs *tinkproto.AgentAttributes) {
	if attrs == nil {
		return
	}
	b, err := attributesJSON(attrs)
	if err != nil {
		agentAttributes.WithLabelValues("error").Inc()
		s.log.Error("tink-agent attributes not recorded", "hardware", hw.Key(), "err", err)
		return
	}
	s.storeAttributes(ctx, hw, b, true)
}

// storeAttributes keeps attributes (JSON in Tinkerbell's shape,
// model.Attributes) as hw's status.attributes but for outOfBand (the
// BMC's, kept as it is), and as its annotation
// model.AgentAttributesAnnotation too when annotate, if they changed.
// Attributes over maxAttributesBytes or that are not a JSON object are
// not kept; either way the outcome is logged and counted.
func (s *Services) storeAttributes(ctx context.Context, hw *model.Hardware, b []byte, annotate bool) {
	if len(b) > maxAttributesBytes {
		agentAttributes.WithLabelValues("too_large").Inc()
		s.log.Warn("agent attributes not recorded: too large", "hardware", hw.Key(), "bytes", len(b), "max", maxAttributesBytes)
		return
	}
	var attrs model.Attributes
	if err := json.Unmarshal(b, &attrs); err != nil {
		agentAttributes.WithLabelValues("error").Inc()
		s.log.Warn("agent attributes not recorded: not a JSON object in Tinkerbell's attributes shape", "hardware", hw.Key(), "err", err)
		return
	}
	// The agent owns the attributes but outOfBand, which the BMC poller
	// writes (internal/bmc): whatever the report says there is dropped,
	// and what the Hardware holds there is kept.
	var encErr error
	written, err := s.updateHardware(ctx, hw, func(hw *model.Hardware) bool {
		attrs.OutOfBand = nil
		if hw.Status.Attributes != nil {
			attrs.OutOfBand = hw.Status.Attributes.OutOfBand
		}
		have, err := json.Marshal(hw.Status.Attributes)
		var want []byte
		if err == nil {
			want, err = json.Marshal(&attrs) // what is kept, to compare with what is
		}
		if err != nil {
			encErr = err
			return false
		}
		if bytes.Equal(have, want) && (!annotate || hw.Annotations[model.AgentAttributesAnnotation] == string(b)) {
			return false
		}
		if annotate {
			if hw.Annotations == nil {
				hw.Annotations = map[string]string{}
			}
			hw.Annotations[model.AgentAttributesAnnotation] = string(b)
		}
		kept := attrs
		hw.Status.Attributes = &kept
		return true
	})
	switch {
	case encErr != nil || err != nil:
		agentAttributes.WithLabelValues("error").Inc()
		s.log.Error("agent attributes not recorded", "hardware", hw.Key(), "err", cmp.Or(encErr, err))
	case written:
		agentAttributes.WithLabelValues("stored").Inc()
	default:
		agentAttributes.WithLabelValues("unchanged").Inc()
	}
}

// updateHardware writes the change that change makes to hw (false: none
// to make), and when someone changed the Hardware meanwhile (a conflict)
// reads it again and makes the change on top of theirs, up to three times.
// It reports whether a change was written. change may be called more than
// once, each time on the Hardware as it is then.
func (s *Services) updateHardware(ctx context.Context, hw *model.Hardware, change func(*model.Hardware) bool) (bool, error) {
	for attempt := 0; ; attempt++ {
		if !change(hw) {
			return false, nil
		}
		_, err := s.cfg.Store.Update(ctx, hw)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, store.ErrConflict) || attempt >= 3 {
			return false, err
		}
		obj, err := s.cfg.Store.Get(ctx, model.KindHardware, hw.Namespace, hw.Name)
		if err != nil {
			return false, err
		}
		hw = obj.(*model.Hardware)
	}
}

// attributesKeys renames the wire's list fields to the JSON names
// Tinkerbell gives them in the annotation; every other name is the same
// (protobuf's lowerCamelCase).
var attributesKeys = map[string]string{
	"block":   "blockDevices",
	"network": "networkInterfaces",
	"pci":     "pciDevices",
	"gpu":     "gpuDevices",
}

// attributesJSON is attrs in the JSON shape of Tinkerbell's annotation, with
// sorted keys (so that unchanged attributes give the same bytes).
func attributesJSON(attrs *tinkproto.AgentAttributes) ([]byte, error) {
	b, err := protojson.Marshal(attrs)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for from, to := range attributesKeys {
		if v, ok := m[from]; ok {
			delete(m, from)
			m[to] = v
		}
	}
	// Through a map, so that every level's keys come out sorted and the
	// bytes stay the same for the same attributes (protojson promises
	// neither its spacing nor its order).
	return json.Marshal(m)
}
