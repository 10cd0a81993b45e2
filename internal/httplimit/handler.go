package httplimit

import (
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Limiter decides. Required.
	Limiter *Limiter
	// Next serves admitted requests. Required.
	Next http.Handler
	// Client returns the address a request counts against. If nil, uses
	// the TCP peer (the zero Addr when RemoteAddr is not an address).
	Client func(*http.Request) netip.Addr
	// Refused, if set, is told of every refused request (for metrics and
	// logs) before it is answered. It must be safe for concurrent use.
	Refused func(*http.Request, Refusal)
}

// Handler serves requests through a Limiter: an admitted request is passed
// to the next handler and holds its place until that returns; a refused one
// is answered at once (Status, Retry-After, a line of text) and never
// reaches it. It is safe for concurrent use.
type Handler struct {
	limiter *Limiter
	next    http.Handler
	client  func(*http.Request) netip.Addr
	refused func(*http.Request, Refusal)
}

// NewHandler returns a Handler for cfg.
func NewHandler(cfg HandlerConfig) *Handler {
	h := &Handler{limiter: cfg.Limiter, next: cfg.Next, client: cfg.Client, refused: cfg.Refused}
	if h.client == nil {
		h.client = peer
	}
	return h
}

func peer(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, ref, ok := h.limiter.Acquire(h.client(r))
	if !ok {
		if h.refused != nil {
			h.refused(r, ref)
		}
		writeRefusal(w, ref)
		return
	}
	defer t.Release()
	h.next.ServeHTTP(w, r)
}

// Status is the HTTP status a refusal is answered with: 503 Service
// Unavailable when the server as a whole is busy (LimitConcurrency), 429
// Too Many Requests when there is too much to do (the rate limits) or the
// client itself has too much in flight.
func (r Refusal) Status() int {
	if r.Limit == LimitConcurrency {
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// RetryAfterSeconds is the Retry-After value: RetryAfter rounded up to
// whole seconds, at least 1 (iPXE retries at once on 0, which would only
// make the storm worse).
func (r Refusal) RetryAfterSeconds() int {
	return int(max(1, math.Ceil(r.RetryAfter.Seconds())))
}

func writeRefusal(w http.ResponseWriter, r Refusal) {
	secs := r.RetryAfterSeconds()
	body := fmt.Sprintf("anvil: too many boot requests (limit %s); retry in %s\n", r.Limit, time.Duration(secs)*time.Second)
	hd := w.Header()
	hd.Set("Retry-After", strconv.Itoa(secs))
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(r.Status())
	_, _ = w.Write([]byte(body)) // a client gone away is not our error
}
