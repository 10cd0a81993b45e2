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
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// agentCall is what an agent call claims: who it is, from where, with
// which token.
type agentCall struct {
	token   string
	peer    string // the connection's remote address
	agentID string
}

func newAgentCall(h http.Header, peer, agentID string) agentCall {
	return agentCall{token: h.Get(v1.AgentTokenHeader), peer: peer, agentID: agentID}
}

// checkAgent returns nil when c may act on the workflow workflowID
// ("namespace/name"): its token is that workflow's, its agent ID is one of
// the workflow's agents, and it calls from an address of that agent's
// Hardware (when the Hardware lists any: in proxy DHCP mode addresses come
// from elsewhere and the token alone decides). Refusals are logged (with
// the workflow) and counted; their messages name only the agent and the
// address, never the workflow: for GetAction it is the engine's choice, not
// the caller's, and may not be the caller's organisation's to know.
func (s *Services) checkAgent(ctx context.Context, c agentCall, workflowID string) error {
	k := s.cfg.AgentKey
	if k == nil {
		return nil
	}
	ip := s.clientIP(ctx, c.peer)
	refuse := func(code connect.Code, reason string, err error) error {
		agentRefused.WithLabelValues(reason).Inc()
		s.log.Warn("agent call refused", "reason", reason, "agent", c.agentID, "workflow", workflowID, "client_ip", ip, "err", err)
		return connect.NewError(code, err)
	}
	if c.token == "" {
		return refuse(connect.CodeUnauthenticated, "no_token",
			fmt.Errorf("agent call without a token: the boot script passes it as anvil.token= and the agent sends it in the %s header", v1.AgentTokenHeader))
	}
	if workflowID == "" {
		return refuse(connect.CodePermissionDenied, "bad_token", fmt.Errorf("agent %q: the token is not valid for any workflow of this agent", c.agentID))
	}
	ns, name, ok := strings.Cut(workflowID, "/")
	if !ok || ns == "" || name == "" {
		return invalid("workflow_id %q: want namespace/name", workflowID)
	}
	obj, err := s.cfg.Store.Get(ctx, model.KindWorkflow, ns, name)
	if errors.Is(err, store.ErrNotFound) {
		// Same answer as a bad token: an agent learns nothing about
		// which workflows exist.
		return refuse(connect.CodePermissionDenied, "bad_token", errNotItsWorkflow(c.agentID))
	}
	if err != nil {
		return s.toConnect(err)
	}
	wf := obj.(*model.Workflow)
	if !k.Valid(c.token, wf.Key(), wf.UID) {
		return refuse(connect.CodePermissionDenied, "bad_token", errNotItsWorkflow(c.agentID))
	}
	agentID := c.agentID
	if agentID != "" && !slices.ContainsFunc(wf.Status.Tasks, func(t model.Task) bool { return t.AgentID == agentID }) {
		return refuse(connect.CodePermissionDenied, "wrong_agent", fmt.Errorf("agent %q has no task in the workflow it acts on", agentID))
	}
	hws, err := s.agentHardware(ctx, wf, agentID)
	if err != nil {
		return s.toConnect(err)
	}
	var ips []string
	for _, hw := range hws {
		ips = append(ips, hw.IPs()...)
	}
	if len(ips) > 0 && !slices.Contains(ips, ip) {
		return refuse(connect.CodePermissionDenied, "wrong_ip", fmt.Errorf("agent %q calls from %s, which is not an address of its hardware", agentID, ip))
	}
	return nil
}

// errNotItsWorkflow is the refusal of a token that is not the workflow's
// (or of a workflow that does not exist: the same answer, so that an agent
// learns nothing about which workflows exist).
func errNotItsWorkflow(agentID string) error {
	return fmt.Errorf("agent %q: the token is not valid for the workflow it acts on", agentID)
}

// agentHardware returns the Hardware the agent runs on: by its agent ID in
// the workflow's namespace, else the workflow's hardwareRef.
func (s *Services) agentHardware(ctx context.Context, wf *model.Workflow, agentID string) ([]*model.Hardware, error) {
	var out []*model.Hardware
	if agentID != "" {
		objs, err := s.cfg.Store.ByIndex(ctx, model.KindHardware, store.IndexAgentID, agentID)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if hw := o.(*model.Hardware); hw.Namespace == wf.Namespace {
				out = append(out, hw)
			}
		}
	}
	if len(out) == 0 && wf.Spec.HardwareRef != "" {
		obj, err := s.cfg.Store.Get(ctx, model.KindHardware, wf.Namespace, wf.Spec.HardwareRef)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if err == nil {
			out = append(out, obj.(*model.Hardware))
		}
	}
	return out, nil
}

// tokenWorkflow returns the ID of the workflow of agentID that token
// belongs to, or "" if none.
func (s *Services) tokenWorkflow(ctx context.Context, token, agentID string) string {
	if token == "" || agentID == "" {
		return ""
	}
	objs, err := s.cfg.Store.ByIndex(ctx, model.KindWorkflow, store.IndexAgentID, agentID)
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
