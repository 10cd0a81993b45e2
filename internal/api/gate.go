package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/api/proto/tinkprotoconnect"
	"github.com/anvilproj/anvil/internal/auth"
)

// The gate is the HTTP half of the guard, in front of every handler Mount
// registers. connect reads and decodes a unary request's whole body before
// any interceptor runs, so authenticating in an interceptor let anyone make
// the server read, and hold, whatever they sent: one unauthenticated
// 512 MB Apply took 1.8 GB. The gate runs before connect and decides from
// the headers alone:
//
//   - a management call (every anvil.v1 service but the agent's) is
//     authenticated by the guard's authenticate; refused, it is answered
//     UNAUTHENTICATED without reading its body (and audited when mutating,
//     without the object it names: that is in the body);
//   - agent calls (both protocols) are checked by their services
//     against the workflow the body names, and server reflection needs no
//     token: both pass, bounded like the rest;
//   - a body whose Content-Length exceeds Config.MaxRequestBytes is refused
//     RESOURCE_EXHAUSTED unread; any other is read through a cap that fails
//     the call the same way at that many bytes. Client streams (StreamLogs:
//     an agent's whole output, arbitrarily long) are capped per message
//     instead, by connect's WithReadMaxBytes, which Mount sets for every
//     handler to the same limit and which also bounds what a compressed
//     message decompresses to.
type gate struct {
	s       *Services
	managed bool // authenticate: a management service
	next    http.Handler
}

// agentServices are the agent protocols, Anvil's and Tinkerbell's: their
// calls carry no user's token, and the services check them themselves
// against the workflow the body names (checkAgent).
var agentServices = []string{anvilv1connect.AgentServiceName, tinkprotoconnect.WorkflowServiceName}

// gate returns next, the handler Mount registers for prefix
// ("/anvil.v1.HardwareService/"), behind the gate.
func (s *Services) gate(prefix string, next http.Handler) http.Handler {
	svc := strings.Trim(prefix, "/")
	return &gate{s: s, next: next,
		managed: slices.Contains(ServiceNames(), svc) && !slices.Contains(agentServices, svc)}
}

// errorWriter answers refusals in the caller's protocol (Connect, gRPC,
// gRPC-Web), as connect itself would.
var errorWriter = connect.NewErrorWriter()

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := g.s
	proc := r.URL.Path
	ctx := r.Context()
	if g.managed {
		var err error
		if ctx, err = (guard{s}).authenticate(ctx, r.Header); err != nil {
			g.refuse(ctx, w, r, err)
			return
		}
		r = r.WithContext(ctx)
	}
	limit := s.cfg.MaxRequestBytes
	if r.ContentLength > limit {
		g.refuse(ctx, w, r, s.tooLarge(ctx, r, fmt.Sprintf("a request body of %s", sizeOf(r.ContentLength))))
		return
	}
	var body *cappedBody
	if r.Body != nil && r.Body != http.NoBody && !clientStreams(proc) {
		body = &cappedBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit),
			err: connect.NewError(connect.CodeResourceExhausted, tooLargeMsg("the request body", limit))}
		r.Body = body
	}
	g.next.ServeHTTP(w, r)
	if body != nil && body.exceeded.Load() {
		// connect answered with body.err; what is left is to say so.
		s.tooLarge(ctx, r, "the request body")
		if isMutating(proc) && procedures()[proc] != nil {
			guard{s}.audit(ctx, proc, nil, r.RemoteAddr, body.err)
		}
	}
}

// refuse answers err (a *connect.Error) without reading the body, and
// audits the call when it is a mutating one.
func (g *gate) refuse(ctx context.Context, w http.ResponseWriter, r *http.Request, err error) {
	proc := r.URL.Path
	if isMutating(proc) && procedures()[proc] != nil {
		guard{g.s}.audit(ctx, proc, nil, r.RemoteAddr, err)
	}
	if errorWriter.IsSupported(r) {
		_ = errorWriter.Write(w, r, err) // a client gone away is not our error
		drainSmallBody(w, r)
		return
	}
	// Not an RPC (a browser, a mistyped curl): plain HTTP.
	code := http.StatusUnauthorized
	if connect.CodeOf(err) == connect.CodeResourceExhausted {
		code = http.StatusRequestEntityTooLarge
	}
	var ce *connect.Error
	msg := err.Error()
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	http.Error(w, msg, code)
}

// refusedBodyDrain is how much of a refused request's body is read, and
// for how long, after the answer is written. An HTTP/2 stream whose body
// is left unread is reset when the handler returns, and a proxy such as
// nginx (grpc_pass) reports the reset to its client instead of the
// answer it already has ("no Grpc-Status trailer"). A small request — a
// refused call without a token — ends cleanly; a large or slow one is
// still never read whole.
const (
	refusedBodyDrain     = 64 << 10
	refusedBodyDrainTime = time.Second
)

func drainSmallBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength > refusedBodyDrain {
		return
	}
	if w, ok := w.(http.Flusher); ok {
		w.Flush() // the answer goes out before we wait on the body
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(refusedBodyDrainTime))
	_, _ = io.CopyN(io.Discard, r.Body, refusedBodyDrain)
}

// tooLarge logs and counts a request refused for its size and returns the
// caller's error; what names what was too large ("the request body").
func (s *Services) tooLarge(ctx context.Context, r *http.Request, what string) error {
	proc := r.URL.Path
	label := proc
	if procedures()[proc] == nil {
		label = "other" // the path is the caller's to choose: no label per path
	}
	tooLargeTotal.WithLabelValues(label).Inc()
	attrs := []any{"procedure", proc, "limit_bytes", s.cfg.MaxRequestBytes, "client_ip", s.clientIP(ctx, r.RemoteAddr)}
	if r.ContentLength >= 0 {
		attrs = append(attrs, "content_length", r.ContentLength)
	}
	if p := auth.FromContext(ctx); p != nil {
		attrs = append(attrs, "subject", p.Subject)
	}
	s.log.Warn("api: request refused: its body is larger than --max-request-mib", attrs...)
	return connect.NewError(connect.CodeResourceExhausted, tooLargeMsg(what, s.cfg.MaxRequestBytes))
}

// tooLargeMsg is the refusal's message: what was too large, the limit, and
// the flag that sets it.
func tooLargeMsg(what string, limit int64) error {
	return fmt.Errorf("%s is larger than this server's limit of %s: split it (anvil apply -f DIR sends one request per file) or raise the limit with anvil serve --max-request-mib", what, sizeOf(limit))
}

// sizeOf writes n bytes as "32 MiB" when it is whole MiB, else in bytes.
func sizeOf(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// cappedBody is a request body read through http.MaxBytesReader, which
// also tells the server to close the connection rather than drain the
// rest; past the cap it answers err, a connect error that connect passes
// to the caller as it is.
type cappedBody struct {
	io.ReadCloser
	err      error
	exceeded atomic.Bool
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if err != nil && errors.As(err, &mbe) {
		b.exceeded.Store(true)
		return n, b.err
	}
	return n, err
}

// procedures maps each anvil.v1 procedure ("/anvil.v1.AgentService/
// StreamLogs") to its method's descriptor, from the services' protobuf
// descriptors: the procedures that exist, and which of them stream from
// the client.
var procedures = sync.OnceValue(func() map[string]protoreflect.MethodDescriptor {
	out := map[string]protoreflect.MethodDescriptor{}
	for _, name := range ServiceNames() {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			panic(fmt.Sprintf("api: service %s has no descriptor: %v", name, err)) // generated code and ServiceNames disagree
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			m := methods.Get(i)
			out["/"+name+"/"+string(m.Name())] = m
		}
	}
	return out
})

// clientStreams reports whether procedure is a client (or bidirectional)
// stream of anvil's: capped per message, not as a whole.
func clientStreams(procedure string) bool {
	m := procedures()[procedure]
	return m != nil && m.IsStreamingClient()
}
