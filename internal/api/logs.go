package api

import (
	"cmp"
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/auth"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

type logService struct{ s *Services }

// GetLogs reads one selection: a workflow's or an agent's lines, or a
// machine's (by Hardware, MAC or IP) merged from its record, its agent's
// lines and what its MACs recorded while no Hardware had them.
func (l logService) GetLogs(ctx context.Context, req *connect.Request[v1.GetLogsRequest]) (*connect.Response[v1.GetLogsResponse], error) {
	s := l.s
	if s.cfg.Logs == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the log store is not open"))
	}
	m := req.Msg
	machine := 0
	for _, sel := range []string{m.GetHardware(), m.GetMac(), m.GetIp()} {
		if sel != "" {
			machine++
		}
	}
	switch {
	case machine > 1 || machine == 1 && (m.GetWorkflowId() != "" || m.GetAgentId() != ""):
		return nil, invalid("name only one of a workflow_id (with or without agent_id), an agent_id, a hardware, a mac or an ip")
	case machine == 0 && m.GetWorkflowId() == "" && m.GetAgentId() == "":
		return nil, invalid("name a workflow_id, an agent_id, a hardware, a mac or an ip")
	case m.GetTail() < 0:
		return nil, invalid("tail %d: want 0 (all) or more", m.GetTail())
	}
	var since time.Time
	tail := int(m.GetTail())
	if m.GetSince() != nil {
		// Tail counts the lines since then: read them all, cut below.
		since, tail = m.GetSince().AsTime(), 0
	}

	var (
		lines []logstore.Line
		hw    *model.Hardware
		err   error
	)
	switch {
	case m.GetHardware() != "":
		ns := cmp.Or(m.GetNamespace(), model.DefaultNamespace)
		if err := authorize(ctx, auth.Read, ns); err != nil {
			return nil, err
		}
		var obj model.Object
		obj, err = s.cfg.Store.Get(ctx, model.KindHardware, ns, m.GetHardware())
		if err == nil {
			hw = obj.(*model.Hardware)
			lines, err = l.machineLines(hw, tail)
		}
	case m.GetMac() != "":
		mac, perr := macaddr.Parse(m.GetMac())
		if perr != nil {
			return nil, invalid("mac: %v", perr)
		}
		hw, lines, err = l.machineBy(ctx, store.IndexMAC, mac.String(), tail)
	case m.GetIp() != "":
		ip, perr := netip.ParseAddr(m.GetIp())
		if perr != nil {
			return nil, invalid("ip %q: %v", m.GetIp(), perr)
		}
		hw, lines, err = l.machineBy(ctx, store.IndexIP, ip.Unmap().String(), tail)
	default:
		if err := l.authorizeAgentLogs(ctx, m.GetWorkflowId(), m.GetAgentId()); err != nil {
			return nil, err
		}
		lines, err = s.cfg.Logs.Read(m.GetWorkflowId(), m.GetAgentId(), tail)
	}
	if err != nil {
		return nil, s.toConnect(err)
	}
	if m.GetMac() != "" || m.GetIp() != "" {
		// Found by address: the Hardware's organisation may read it; a
		// machine no Hardware has belongs to none, so only admins.
		ns := ""
		if hw != nil {
			ns = hw.Namespace
		}
		if err := authorize(ctx, auth.Read, ns); err != nil {
			return nil, err
		}
	}
	if !since.IsZero() {
		// Agents stamp their own lines: a file's order need not be time
		// order, so filter rather than search.
		lines = slices.DeleteFunc(lines, func(l logstore.Line) bool { return l.Time.Before(since) })
	}
	var unanswered []string
	if s.fanOut(req.Header()) {
		// Each peer applies since and tail to its own lines: the last
		// tail lines of the whole are among the last tail of each.
		var answers []*v1.GetLogsResponse
		answers, unanswered = askPeers(ctx, s, req.Spec().Procedure, req.Header(), m,
			func(ctx context.Context, hc connect.HTTPClient, base string, r *connect.Request[v1.GetLogsRequest]) (*connect.Response[v1.GetLogsResponse], error) {
				return anvilv1connect.NewLogServiceClient(hc, base).GetLogs(ctx, r)
			})
		lists := [][]logstore.Line{utcLines(lines)}
		for _, a := range answers {
			lists = append(lists, linesFromWire(a.GetLines()))
		}
		lines = mergeByTime(lists, func(l logstore.Line) time.Time { return l.Time })
	}
	lines = lastN(lines, int(m.GetTail()))
	out := &v1.GetLogsResponse{Lines: make([]*v1.LogLine, 0, len(lines))}
	if hw != nil {
		out.Hardware = hw.Key()
	}
	for _, x := range lines {
		out.Lines = append(out.Lines, lineToWire(x))
	}
	resp := connect.NewResponse(out)
	markUnanswered(resp.Header(), unanswered)
	return resp, nil
}

// authorizeAgentLogs authorizes reading a workflow's lines (its namespace)
// or an agent's (its Hardware's namespace; admins only when no Hardware
// has that agent ID).
func (l logService) authorizeAgentLogs(ctx context.Context, workflowID, agentID string) error {
	if workflowID != "" {
		return authorize(ctx, auth.Read, workflowNamespace(workflowID))
	}
	objs, err := l.s.cfg.Store.ByIndex(ctx, model.KindHardware, store.IndexAgentID, agentID)
	if err != nil {
		return l.s.toConnect(err)
	}
	if len(objs) == 0 {
		return authorize(ctx, auth.Read, "")
	}
	for _, o := range objs {
		if err := authorize(ctx, auth.Read, o.GetObjectMeta().Namespace); err != nil {
			return err
		}
	}
	return nil
}

// machineBy returns the lines of the Hardware whose index holds value, or
// if none does, the record of the unknown machine value names.
func (l logService) machineBy(ctx context.Context, index, value string, tail int) (*model.Hardware, []logstore.Line, error) {
	objs, err := l.s.cfg.Store.ByIndex(ctx, model.KindHardware, index, value)
	if err != nil {
		return nil, nil, err
	}
	if len(objs) == 0 {
		lines, err := l.s.cfg.Logs.ReadMachine(value, tail)
		return nil, lines, err
	}
	hw := objs[0].(*model.Hardware)
	lines, err := l.machineLines(hw, tail)
	return hw, lines, err
}

// machineLines merges, by time, a Hardware's record, its agent IDs' lines,
// and the unknown-machine records of its MACs (from before it existed):
// the selection logstore.MachineSelection makes, which the web UI shows
// too.
func (l logService) machineLines(hw *model.Hardware, tail int) ([]logstore.Line, error) {
	return l.s.cfg.Logs.ReadSelection(logstore.MachineSelection(hw), tail)
}

// ListUnknownMachines lists the machines no Hardware matches, newest first.
func (l logService) ListUnknownMachines(ctx context.Context, req *connect.Request[v1.ListUnknownMachinesRequest]) (*connect.Response[v1.ListUnknownMachinesResponse], error) {
	s := l.s
	if s.cfg.Logs == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the log store is not open"))
	}
	if req.Msg.GetLimit() < 0 {
		return nil, invalid("limit %d: want 0 (all) or more", req.Msg.GetLimit())
	}
	// Unknown machines belong to no organisation.
	if err := authorize(ctx, auth.Read, ""); err != nil {
		return nil, err
	}
	lasts, err := s.cfg.Logs.UnknownMachines(int(req.Msg.GetLimit()))
	if err != nil {
		return nil, s.toConnect(err)
	}
	var unanswered []string
	if s.fanOut(req.Header()) {
		var answers []*v1.ListUnknownMachinesResponse
		answers, unanswered = askPeers(ctx, s, req.Spec().Procedure, req.Header(), req.Msg,
			func(ctx context.Context, hc connect.HTTPClient, base string, r *connect.Request[v1.ListUnknownMachinesRequest]) (*connect.Response[v1.ListUnknownMachinesResponse], error) {
				return anvilv1connect.NewLogServiceClient(hc, base).ListUnknownMachines(ctx, r)
			})
		lists := [][]logstore.Line{utcLines(lasts)}
		for _, a := range answers {
			var l []logstore.Line
			for _, um := range a.GetMachines() {
				x := lineFromWire(um.GetLast())
				x.Machine = um.GetMachine()
				l = append(l, x)
			}
			lists = append(lists, l)
		}
		// A machine heard by several replicas: its newest line.
		lasts = newestPerKey(lists, func(l logstore.Line) string { return l.Machine }, func(l logstore.Line) time.Time { return l.Time })
		if n := int(req.Msg.GetLimit()); n > 0 && len(lasts) > n {
			lasts = lasts[:n]
		}
	}
	out := &v1.ListUnknownMachinesResponse{Machines: make([]*v1.UnknownMachine, 0, len(lasts))}
	for _, x := range lasts {
		out.Machines = append(out.Machines, &v1.UnknownMachine{Machine: x.Machine, Last: lineToWire(x)})
	}
	resp := connect.NewResponse(out)
	markUnanswered(resp.Header(), unanswered)
	return resp, nil
}

// lineFromWire is lineToWire's reverse, for a peer's lines.
func lineFromWire(x *v1.LogLine) logstore.Line {
	return logstore.Line{
		WorkflowID: x.GetWorkflowId(), AgentID: x.GetAgentId(), TaskName: x.GetTaskName(),
		ActionName: x.GetActionName(), Time: x.GetTime().AsTime().UTC(), Stream: x.GetStream(), Line: x.GetLine(),
		HardwareID: x.GetHardware(), Machine: x.GetMachine(),
	}
}

func linesFromWire(xs []*v1.LogLine) []logstore.Line {
	out := make([]logstore.Line, len(xs))
	for i, x := range xs {
		out[i] = lineFromWire(x)
	}
	return out
}

// utcLines puts lines' times in UTC, as a peer's come, so that the same
// line read here and from a peer compares equal.
func utcLines(lines []logstore.Line) []logstore.Line {
	for i := range lines {
		lines[i].Time = lines[i].Time.UTC()
	}
	return lines
}

func lineToWire(x logstore.Line) *v1.LogLine {
	return &v1.LogLine{
		WorkflowId: x.WorkflowID, AgentId: x.AgentID, TaskName: x.TaskName,
		ActionName: x.ActionName, Time: timestamppb.New(x.Time), Stream: x.Stream, Line: x.Line,
		Hardware: x.HardwareID, Machine: x.Machine,
	}
}
