package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/auth"
)

// guard is the interceptor Mount puts in front of every service: it
// writes the audit record of every mutating call, refused calls included.
// Authentication happens before it, in the gate (gate.go), which refuses
// an unauthenticated management call before connect reads its body; the
// guard finds the principal in the context.
type guard struct{ s *Services }

// mutatingMethods are the method names that change stored state.
var mutatingMethods = map[string]bool{
	"Create": true, "Update": true, "Delete": true, "Apply": true,
	"Reprovision": true, "ProvisionDevice": true, "CancelJob": true,
	"Enroll": true, "SetNetboot": true,
}

func isMutating(procedure string) bool {
	return mutatingMethods[procedure[strings.LastIndexByte(procedure, '/')+1:]]
}

// authenticate returns ctx carrying the caller's principal. The gate
// calls it for every management call; agent calls carry agent tokens and
// are checked by the agent service itself.
func (g guard) authenticate(ctx context.Context, h http.Header) (context.Context, error) {
	if g.s.cfg.Authenticate == nil {
		return auth.WithPrincipal(ctx, auth.Anonymous), nil
	}
	p, err := g.s.cfg.Authenticate(ctx, h)
	if err != nil {
		authRefused.WithLabelValues("token").Inc()
		return ctx, connect.NewError(connect.CodeUnauthenticated, err)
	}
	return auth.WithPrincipal(ctx, p), nil
}

func (g guard) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if proc := req.Spec().Procedure; isMutating(proc) {
			g.audit(ctx, proc, req.Any(), req.Peer().Addr, err)
		}
		return resp, err
	}
}

func (guard) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler passes streams on: none is mutating (watches, the
// agent's log stream).
func (guard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// audit records a mutating call. A record that cannot be written is
// logged as an error: the call has happened and its answer stands, so
// failing it now would tell the caller something untrue.
func (g guard) audit(ctx context.Context, procedure string, msg any, peer string, callErr error) {
	l := g.s.cfg.Audit
	if l == nil {
		return
	}
	r := audit.Record{
		Time:      g.s.cfg.Clock.Now().UTC(),
		Procedure: procedure,
		Outcome:   "ok",
		ClientIP:  g.s.clientIP(ctx, peer),
	}
	if p := auth.FromContext(ctx); p != nil {
		r.Subject, r.Org, r.Unauthenticated = p.Subject, p.Org, p.Unauthenticated
	}
	if m, ok := msg.(proto.Message); ok {
		r.Namespace, r.Object = describe(m.ProtoReflect())
	}
	if callErr != nil {
		r.Outcome = connect.CodeOf(callErr).String()
		r.Message = callErr.Error()
		if ce, ok := callErr.(*connect.Error); ok {
			r.Message = ce.Message()
		}
	}
	if err := l.Append(r); err != nil {
		auditFailures.Inc()
		g.s.log.Error("audit: record not written", "procedure", procedure, "subject", r.Subject, "err", err)
	}
}

// objectFields are the request fields that name what a call acts on, in
// the order they are written into a record's object.
var objectFields = []protoreflect.Name{"kind", "name", "hardware", "template", "workflow", "device_id", "job_id", "source", "idempotency_key"}

// flagFields are the optional bool request fields that say what a call
// does to its object (SetNetboot's allow or deny), written after
// objectFields when set.
var flagFields = []protoreflect.Name{"allow_pxe", "allow_workflow"}

// describe returns the namespace and the object a request names: its own
// fields, or those of the object it carries (a Create or Update request's
// metadata).
func describe(m protoreflect.Message) (ns, object string) {
	var parts []string
	add := func(m protoreflect.Message) {
		fields := m.Descriptor().Fields()
		if f := fields.ByName("namespace"); f != nil && f.Kind() == protoreflect.StringKind && ns == "" {
			ns = m.Get(f).String()
		}
		for _, name := range objectFields {
			f := fields.ByName(name)
			if f == nil || f.Kind() != protoreflect.StringKind || f.IsList() {
				continue
			}
			if v := m.Get(f).String(); v != "" {
				parts = append(parts, fmt.Sprintf("%s=%s", name, v))
			}
		}
		for _, name := range flagFields {
			if f := fields.ByName(name); f != nil && f.Kind() == protoreflect.BoolKind && f.HasPresence() && m.Has(f) {
				parts = append(parts, fmt.Sprintf("%s=%t", name, m.Get(f).Bool()))
			}
		}
	}
	add(m)
	// A carried object: the one message field, with a metadata inside.
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.Kind() != protoreflect.MessageKind || f.IsList() || f.IsMap() || !m.Has(f) {
			continue
		}
		obj := m.Get(f).Message()
		if mf := obj.Descriptor().Fields().ByName("metadata"); mf != nil && mf.Kind() == protoreflect.MessageKind && obj.Has(mf) {
			parts = append(parts, "kind="+string(f.Name()))
			add(obj.Get(mf).Message())
		}
	}
	return ns, strings.Join(parts, " ")
}

// clientIP is the caller's address: Config.ClientIP's answer when set (it
// knows the trusted proxies), else the TCP peer's host.
func (s *Services) clientIP(ctx context.Context, peer string) string {
	if s.cfg.ClientIP != nil {
		if ip := s.cfg.ClientIP(ctx); ip != "" {
			return ip
		}
	}
	if host, _, err := net.SplitHostPort(peer); err == nil {
		return host
	}
	return peer
}

// auditService reads the audit log.
type auditService struct{ s *Services }

// List returns audit records: an admin's choice of all of them, anyone
// else's only those of its own organisation.
func (a auditService) List(ctx context.Context, req *connect.Request[v1.ListAuditRequest]) (*connect.Response[v1.ListAuditResponse], error) {
	s := a.s
	if s.cfg.Audit == nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the audit log is not open"))
	}
	m := req.Msg
	p := auth.FromContext(ctx)
	org := p.Scope(m.GetNamespace())
	if err := authorize(ctx, auth.Read, org); err != nil {
		return nil, err
	}
	f := audit.Filter{Org: org, Subject: m.GetSubject(), Procedure: m.GetProcedure(), Object: m.GetObject(), Limit: int(m.GetLimit())}
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	if m.GetSince() != nil {
		f.Since = m.GetSince().AsTime()
	}
	recs, err := s.cfg.Audit.List(f)
	if err != nil {
		return nil, s.toConnect(err)
	}
	var unanswered []string
	if s.fanOut(req.Header()) {
		// Each peer applies the same filter and limit to its own
		// records: the newest limit of the whole are among theirs.
		var answers []*v1.ListAuditResponse
		answers, unanswered = askPeers(ctx, s, req.Spec().Procedure, req.Header(), m,
			func(ctx context.Context, hc connect.HTTPClient, base string, r *connect.Request[v1.ListAuditRequest]) (*connect.Response[v1.ListAuditResponse], error) {
				return anvilv1connect.NewAuditServiceClient(hc, base).List(ctx, r)
			})
		for i := range recs {
			recs[i].Time = recs[i].Time.UTC() // as a peer's come, to compare equal
		}
		lists := [][]audit.Record{recs}
		for _, a := range answers {
			l := make([]audit.Record, 0, len(a.GetRecords()))
			for _, r := range a.GetRecords() {
				l = append(l, auditFromWire(r))
			}
			lists = append(lists, l)
		}
		recs = lastN(mergeByTime(lists, func(r audit.Record) time.Time { return r.Time }), f.Limit)
	}
	out := &v1.ListAuditResponse{Records: make([]*v1.AuditRecord, 0, len(recs))}
	for _, r := range recs {
		out.Records = append(out.Records, auditToWire(r))
	}
	resp := connect.NewResponse(out)
	markUnanswered(resp.Header(), unanswered)
	return resp, nil
}

// auditFromWire is auditToWire's reverse, for a peer's records.
func auditFromWire(r *v1.AuditRecord) audit.Record {
	return audit.Record{
		Time: r.GetTime().AsTime().UTC(), Subject: r.GetSubject(), Org: r.GetOrg(), Procedure: r.GetProcedure(),
		Namespace: r.GetNamespace(), Object: r.GetObject(), Outcome: r.GetOutcome(), Message: r.GetMessage(),
		ClientIP: r.GetClientIp(), Unauthenticated: r.GetUnauthenticated(),
	}
}

func auditToWire(r audit.Record) *v1.AuditRecord {
	return &v1.AuditRecord{
		Time: timestamppb.New(r.Time), Subject: r.Subject, Org: r.Org, Procedure: r.Procedure,
		Namespace: r.Namespace, Object: r.Object, Outcome: r.Outcome, Message: r.Message,
		ClientIp: r.ClientIP, Unauthenticated: r.Unauthenticated,
	}
}
