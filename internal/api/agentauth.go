package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/workflow"
)

// Agent protocols, the protocol label of anvil_agent_refused_total.
const (
	protoAnvil      = "anvil"      // anvil.v1.AgentService: Anvil's own agent
	protoTinkerbell = "tinkerbell" // proto.WorkflowService: Tinkerbell's tink-agent
)

// agentCall is what an agent call claims: who it is, from where, with
// which token, and what it acts on.
type agentCall struct {
	protocol  string             // protoAnvil or protoTinkerbell
	procedure string             // the RPC, for the log and the audit record
	token     string             // Anvil's protocol only
	peer      string             // the connection's remote address
	agent     workflow.AgentName // read once, where the call arrived
	// taskID and actionID name the action a report is about; "" for
	// other calls.
	taskID, actionID string
}

// newAgentCall is an Anvil agent's call of procedure.
func newAgentCall(procedure string, h http.Header, peer string, agent workflow.AgentName) agentCall {
	return agentCall{protocol: protoAnvil, procedure: procedure, token: h.Get(v1.AgentTokenHeader), peer: peer, agent: agent}
}

// tinkerbell reports whether c is a call of Tinkerbell's protocol, which
// carries no token: such a call is bound to its machine by its address
// alone, so a Hardware without one cannot be acted for.
func (c agentCall) tinkerbell() bool { return c.protocol == protoTinkerbell }

// checkAgent returns nil when c may act on the workflow workflowID
// ("namespace/name"): its token is that workflow's (Anvil's protocol), its
// agent ID names a machine (workflow.ResolveAgent) that has a task in the
// workflow, the action a report is about is of that machine's task, and it
// calls from an address of that machine's Hardware. Anvil's agent may call
// from anywhere when the Hardware lists no address (in proxy DHCP mode
// addresses come from elsewhere and the token alone decides); Tinkerbell's,
// which has no token, may not. Refusals are logged, counted and audited
// (refuseAgent); their messages name only what the caller sent.
func (s *Services) checkAgent(ctx context.Context, c agentCall, workflowID string) error {
	k := s.cfg.AgentKey
	if k == nil {
		return nil
	}
	ip := s.clientIP(ctx, c.peer)
	refuse := func(code connect.Code, reason string, err error) error {
		return s.refuseAgent(ctx, c, ip, workflowID, code, reason, err)
	}
	if !c.tinkerbell() && c.token == "" {
		return refuse(connect.CodeUnauthenticated, "no_token",
			fmt.Errorf("agent call without a token: the boot script passes it as anvil.token= and the agent sends it in the %s header", v1.AgentTokenHeader))
	}
	if workflowID == "" {
		return refuse(connect.CodePermissionDenied, "bad_token", errNotItsWorkflow(c))
	}
	ns, name, ok := strings.Cut(workflowID, "/")
	if !ok || ns == "" || name == "" {
		return invalid("workflow_id %q: want namespace/name", workflowID)
	}
	obj, err := store.GetShared(ctx, s.cfg.Store, model.KindWorkflow, ns, name) // read only
	if errors.Is(err, store.ErrNotFound) {
		// Same answer as a bad token or another machine's workflow: an
		// agent learns nothing about which workflows exist.
		return refuse(connect.CodePermissionDenied, "unknown_workflow", errNotItsWorkflow(c))
	}
	if err != nil {
		return s.toConnect(err)
	}
	wf := obj.(*model.Workflow)
	if !c.tinkerbell() && !k.Valid(c.token, wf.Key(), wf.UID) {
		return refuse(connect.CodePermissionDenied, "bad_token", errNotItsWorkflow(c))
	}
	if c.agent.ID != "" {
		agentID, err := workflow.ResolveAgent(ctx, store.SharedIndexer(s.cfg.Store), wf.Namespace, c.agent)
		if err != nil {
			return s.toConnect(err)
		}
		if !slices.ContainsFunc(wf.Status.Tasks, func(t model.Task) bool { return t.AgentID == agentID }) {
			return refuse(connect.CodePermissionDenied, "wrong_agent", errNotItsWorkflow(c))
		}
		if t := reportedTask(wf, c.taskID, c.actionID); t != nil && t.AgentID != agentID {
			return refuse(connect.CodePermissionDenied, "not_its_task",
				fmt.Errorf("agent %q: the action it reports (task_id %q, action_id %q) is not one of its own", c.agent.ID, c.taskID, c.actionID))
		}
	}
	hws, err := s.agentHardware(ctx, wf, c.agent)
	if err != nil {
		return s.toConnect(err)
	}
	var ips []string
	for _, hw := range hws {
		ips = append(ips, hw.IPs()...)
	}
	switch {
	case len(ips) == 0 && c.tinkerbell():
		return refuse(connect.CodePermissionDenied, "no_address", errNotItsAddress(c, ip))
	case len(ips) > 0 && !slices.Contains(ips, ip):
		return refuse(connect.CodePermissionDenied, "wrong_ip", errNotItsAddress(c, ip))
	}
	return nil
}

// errNotItsWorkflow is the refusal of a call on a workflow that is not
// the agent's: a bad token, another machine's workflow, or one that does
// not exist all get this one answer, which names no workflow.
func errNotItsWorkflow(c agentCall) error {
	if c.tinkerbell() {
		return fmt.Errorf("agent %q: the workflow it acts on is not one of its machine's", c.agent.ID)
	}
	return fmt.Errorf("agent %q: the token is not valid for the workflow it acts on", c.agent.ID)
}

// errNotItsAddress is the refusal of a call from an address the agent's
// Hardware does not have.
func errNotItsAddress(c agentCall, ip string) error {
	if c.tinkerbell() {
		return fmt.Errorf("agent %q calls from %s: no Hardware with this agent ID or MAC has this address "+
			"(Tinkerbell's protocol carries no token, so a tink-agent is known by its Hardware's spec.interfaces[].dhcp.ip.address)", c.agent.ID, ip)
	}
	return fmt.Errorf("agent %q calls from %s, which is not an address of its hardware", c.agent.ID, ip)
}

// reportedTask returns the task of wf that taskID names, else the one
// that holds actionID, else nil.
func reportedTask(wf *model.Workflow, taskID, actionID string) *model.Task {
	for i := range wf.Status.Tasks {
		t := &wf.Status.Tasks[i]
		if taskID != "" && t.ID == taskID {
			return t
		}
	}
	for i := range wf.Status.Tasks {
		t := &wf.Status.Tasks[i]
		if actionID != "" && slices.ContainsFunc(t.Actions, func(a model.Action) bool { return a.ID == actionID }) {
			return t
		}
	}
	return nil
}

// refuseAgent refuses c: it counts the refusal
// (anvil_agent_refused_total{protocol, reason}), logs it with what the
// caller may not be told (the workflow), writes an audit record — nothing
// else records a refused agent call, since it changes no workflow — and
// returns the error for the caller.
func (s *Services) refuseAgent(ctx context.Context, c agentCall, ip, workflowID string, code connect.Code, reason string, err error) error {
	agentRefused.WithLabelValues(c.protocol, reason).Inc()
	s.log.Warn("agent call refused", "protocol", c.protocol, "procedure", c.procedure, "reason", reason,
		"agent", c.agent.ID, "workflow", workflowID, "client_ip", ip, "err", err)
	if l := s.cfg.Audit; l != nil {
		ns, name, _ := strings.Cut(workflowID, "/")
		r := audit.Record{
			Time:            s.cfg.Clock.Now().UTC(),
			Subject:         "agent:" + c.agent.ID,
			Procedure:       c.procedure,
			Namespace:       ns,
			Outcome:         code.String(),
			Message:         reason + ": " + err.Error(),
			ClientIP:        ip,
			Unauthenticated: true,
		}
		if name != "" {
			r.Object = "workflow=" + name
		}
		if werr := l.Append(r); werr != nil {
			auditFailures.Inc()
			s.log.Error("audit: record not written", "procedure", c.procedure, "subject", r.Subject, "err", werr)
		}
	}
	return connect.NewError(code, err)
}

// agentHardware returns the Hardware the agent runs on: the machine its
// agent ID names (workflow.AgentHardware) in the workflow's namespace,
// else the workflow's hardwareRef. They may be the store's shared objects:
// read only.
func (s *Services) agentHardware(ctx context.Context, wf *model.Workflow, agent workflow.AgentName) ([]*model.Hardware, error) {
	var out []*model.Hardware
	if agent.ID != "" {
		hws, err := workflow.AgentHardware(ctx, store.SharedIndexer(s.cfg.Store), agent)
		if err != nil {
			return nil, err
		}
		for _, hw := range hws {
			if hw.Namespace == wf.Namespace {
				out = append(out, hw)
			}
		}
	}
	if len(out) == 0 && wf.Spec.HardwareRef != "" {
		obj, err := store.GetShared(ctx, s.cfg.Store, model.KindHardware, wf.Namespace, wf.Spec.HardwareRef)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if err == nil {
			out = append(out, obj.(*model.Hardware))
		}
	}
	return out, nil
}

// bindTinkAgent returns the Hardware a call of Tinkerbell's protocol comes
// from: the one that c's agent ID names (its spec.agent.ID or one of its
// MACs) and that has the caller's address. That protocol carries no token,
// so this is all that ties a tink-agent to a machine; a call that does not
// bind is refused. With agent checks off (AgentKey nil) it returns the
// one Hardware the agent ID names, if just one does, and never refuses.
// workflowID, the workflow a report names ("" for GetAction), is for the
// log and the audit record of a refusal.
func (s *Services) bindTinkAgent(ctx context.Context, c agentCall, workflowID string) (*model.Hardware, error) {
	hws, err := workflow.AgentHardware(ctx, s.cfg.Store, c.agent)
	if err != nil {
		return nil, s.toConnect(err)
	}
	ip := s.clientIP(ctx, c.peer)
	addressed := false
	for _, hw := range hws {
		if slices.Contains(hw.IPs(), ip) {
			return hw, nil
		}
		addressed = addressed || len(hw.IPs()) > 0
	}
	if s.cfg.AgentKey == nil {
		if len(hws) == 1 {
			return hws[0], nil
		}
		return nil, nil
	}
	reason := "wrong_ip"
	switch {
	case len(hws) == 0:
		reason = "unknown_agent"
	case !addressed:
		reason = "no_address"
	}
	return nil, s.refuseAgent(ctx, c, ip, workflowID, connect.CodePermissionDenied, reason, errNotItsAddress(c, ip))
}

// tokenWorkflow returns the ID of the workflow of agentID that token
// belongs to, or "" if none.
func (s *Services) tokenWorkflow(ctx context.Context, token, agentID string) string {
	if token == "" || agentID == "" {
		return ""
	}
	id, err := workflow.ResolveAgent(ctx, s.cfg.Store, "", workflow.ParseAgentName(agentID)) // a log stream's entry
	if err != nil {
		return ""
	}
	objs, err := s.cfg.Store.ByIndex(ctx, model.KindWorkflow, store.IndexAgentID, id)
	if err != nil {
		return ""
	}
	for _, o := range objs {
		wf := o.(*model.Workflow)
		if s.cfg.AgentKey.Valid(token, wf.Key(), wf.UID) {
			return wf.Key()
		}
	}
	return ""
}
