package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The HTTP port before the server runs.
//
// Run opens the store before anything runs, and in Kubernetes mode that
// waits for the API server: as long as it is away, retried with back-off
// (store/kube). If the HTTP port said nothing meanwhile, the liveness
// probe would fail too, and Kubernetes would restart the pod again and
// again, which brings the API server back no sooner and hides the reason
// in a crash loop. So the HTTP port is served from the moment it is open,
// through a gate: until the supervisor's transports stage opens it,
// /healthz answers ok (the process is alive and doing what it should:
// waiting), /readyz 503 with what the server waits for and the last
// failure (the pod stays out of its Services), and any other request
// waits for the gate to open — as it waited in the listen backlog before
// — for at most gateWait, then gets the same 503. Once open, every
// request goes to the real routes (whose /readyz is the supervisor's).

// gateWait bounds how long a request other than a probe waits for the
// server to start before it is answered 503: long enough for a normal
// start (milliseconds to open the store, seconds to build a boot
// environment), short enough to answer a client while the API server is
// away.
const gateWait = 10 * time.Second

// gate is the HTTP port's handler until the server runs, and then the
// real one's way in.
type gate struct {
	opened chan struct{}
	h      http.Handler // set before opened is closed

	mu      sync.Mutex
	doing   string // what the server is doing, "opening the store"
	lastErr error  // the last failure while doing it
}

func newGate() *gate { return &gate{opened: make(chan struct{}), doing: "starting"} }

// open sends every request to h from now on.
func (g *gate) open(h http.Handler) {
	g.h = h
	close(g.opened)
}

// phase says what the server is doing now, and forgets the last failure.
func (g *gate) phase(doing string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.doing, g.lastErr = doing, nil
}

// waiting records why the current phase has not finished yet (each
// failed attempt to reach the API server, say).
func (g *gate) waiting(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastErr = err
}

func (g *gate) reason() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lastErr != nil {
		return fmt.Sprintf("%s: waiting; the last attempt failed: %v", g.doing, g.lastErr)
	}
	return g.doing
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-g.opened:
		g.h.ServeHTTP(w, r)
		return
	default:
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		switch r.URL.Path {
		case "/healthz":
			fmt.Fprintln(w, "ok")
			return
		case "/readyz":
			http.Error(w, "not ready: "+g.reason(), http.StatusServiceUnavailable)
			return
		}
	}
	t := time.NewTimer(gateWait)
	defer t.Stop()
	select {
	case <-g.opened:
		g.h.ServeHTTP(w, r)
	case <-t.C:
		http.Error(w, "not ready: "+g.reason(), http.StatusServiceUnavailable)
	case <-r.Context().Done():
	}
}

// earlyHTTP is the HTTP port's server, serving the gate from before the
// store opens; the transports stage's component takes it over.
type earlyHTTP struct {
	gate   *gate
	srv    *http.Server
	served chan error // Serve's return, once
}

// serveEarly starts serving the "http" listener of lns through a gate,
// or returns nil when the HTTP port is off.
func serveEarly(lns []namedListener) *earlyHTTP {
	for _, l := range lns {
		if l.name != "http" {
			continue
		}
		g := newGate()
		e := &earlyHTTP{gate: g, srv: newHTTPServer(g, true), served: make(chan error, 1)}
		go func() { e.served <- serve(e.srv, l.ln) }()
		return e
	}
	return nil
}

// phase and waiting are the gate's, on a nil *earlyHTTP too.
func (e *earlyHTTP) phase(doing string) {
	if e != nil {
		e.gate.phase(doing)
	}
}

func (e *earlyHTTP) waiting(err error) {
	if e != nil {
		e.gate.waiting(err)
	}
}

// close stops the server if Run ends before the transports stage took it
// over (a failure while opening); after that it is the stage's, and
// closing it again is harmless.
func (e *earlyHTTP) close() error {
	if e == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		e.srv.Close()
	}
	return nil
}
