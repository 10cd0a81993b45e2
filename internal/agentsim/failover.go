package agentsim

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
)

// Failover is an http.RoundTripper for an agent that may talk to any of
// several replicas of the server (Kubernetes mode). It sends every request
// to the current replica, rewriting the request's host; when a request
// gets no answer (the replica is gone: refused, reset, closed mid-call),
// or its reply is cut off, the next replica becomes the current one and
// the error is returned as it is. The agent's own retries (GetAction's back-off, reportWithRetry)
// then go to the next replica; Failover never resends a request itself,
// because it cannot tell whether a request that was cut off reached the
// server — the retried report is safe because the server treats a repeat
// of a recorded report as a no-op (see docs/kubernetes.md).
type Failover struct {
	next  http.RoundTripper
	hosts []string
	cur   atomic.Uint64
}

// NewFailover returns a Failover over next (http.DefaultTransport if nil)
// that starts with hosts[0]; hosts are "host:port".
func NewFailover(next http.RoundTripper, hosts ...string) *Failover {
	if next == nil {
		next = http.DefaultTransport
	}
	if len(hosts) == 0 {
		panic("agentsim.NewFailover: no hosts")
	}
	return &Failover{next: next, hosts: hosts}
}

// Host is the replica requests go to now.
func (f *Failover) Host() string { return f.hosts[f.cur.Load()%uint64(len(f.hosts))] }

// RoundTrip implements http.RoundTripper.
func (f *Failover) RoundTrip(r *http.Request) (*http.Response, error) {
	i := f.cur.Load()
	out := r.Clone(r.Context())
	out.URL.Host = f.hosts[i%uint64(len(f.hosts))]
	out.Host = ""
	resp, err := f.next.RoundTrip(out)
	if err != nil {
		f.failed(r.Context(), i)
		return nil, err
	}
	// A reply cut off after its headers (a unary gRPC reply is headers,
	// body and trailers) is the replica dying too.
	resp.Body = &failoverBody{ReadCloser: resp.Body, f: f, ctx: r.Context(), i: i}
	return resp, nil
}

// failed moves on from replica i, unless the caller gave up (ctx) or
// another call already moved on.
func (f *Failover) failed(ctx context.Context, i uint64) {
	if ctx.Err() == nil {
		f.cur.CompareAndSwap(i, i+1)
	}
}

type failoverBody struct {
	io.ReadCloser
	f   *Failover
	ctx context.Context
	i   uint64
}

func (b *failoverBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.f.failed(b.ctx, b.i)
	}
	return n, err
}
