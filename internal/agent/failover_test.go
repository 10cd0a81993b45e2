package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// fakeAPI answers GetAction with err, or, if nil, an action named name.
type fakeAPI struct {
	anvilv1connect.UnimplementedAgentServiceHandler
	name string
	err  error
}

func (f fakeAPI) GetAction(context.Context, *connect.Request[v1.GetActionRequest]) (*connect.Response[v1.GetActionResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	return connect.NewResponse(&v1.GetActionResponse{Name: f.name}), nil
}

func serveAPI(t *testing.T, h anvilv1connect.AgentServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(anvilv1connect.NewAgentServiceHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// lines collects what the servers log.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(format, args...))
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

func newTestServers(log *lines, urls ...string) *servers {
	var list []Server
	for _, u := range urls {
		list = append(list, Server{URL: u, Client: anvilv1connect.NewAgentServiceClient(http.DefaultClient, u)})
	}
	return newServers(list, log.logf)
}

// getAction asks s for work with a call timeout of d and returns the
// action's name.
func getAction(s *servers, d time.Duration) (string, error) {
	var name string
	err := s.call(context.Background(), d, "asking for work", func(ctx context.Context, c anvilv1connect.AgentServiceClient) error {
		resp, err := c.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: "a"}))
		if err == nil {
			name = resp.Msg.GetName()
		}
		return err
	})
	return name, err
}

// Each kind of connection-level failure at the first server moves the
// call to the second, which answers it, and is said with its cause.
func TestMovesOnConnectionFailures(t *testing.T) {
	refused := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		return "http://" + ln.Addr().String()
	}
	status := func(code int) func(t *testing.T) string {
		return func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "<html>the proxy's page</html>", code)
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		}
	}
	reset := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.(*net.TCPConn).SetLinger(0) // close with a RST
				c.Close()
			}
		}()
		return "http://" + ln.Addr().String()
	}
	cutOff := func(t *testing.T) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			// An answer promised whole, cut off after its first bytes.
			w.Header().Set("Content-Type", "application/proto")
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte{0x0a, 0x05, 'h', 'a'})
			w.(http.Flusher).Flush()
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	silent := func(t *testing.T) string {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		t.Cleanup(func() { close(release); srv.Close() })
		return srv.URL
	}
	untrusted := func(t *testing.T) string {
		srv := httptest.NewTLSServer(http.NotFoundHandler())
		t.Cleanup(srv.Close)
		return srv.URL
	}
	unavailable := func(t *testing.T) string {
		return serveAPI(t, fakeAPI{err: connect.NewError(connect.CodeUnavailable, errors.New("shutting down"))})
	}
	tests := []struct {
		name  string
		first func(t *testing.T) string
		why   string
	}{
		{"refused", refused, "connection refused"},
		{"reset", reset, "connection broken"},
		{"answer cut off", cutOff, "connection broken"},
		{"bad gateway", status(http.StatusBadGateway), "unavailable"},
		{"service unavailable", status(http.StatusServiceUnavailable), "unavailable"},
		{"gateway timeout", status(http.StatusGatewayTimeout), "unavailable"},
		{"no answer", silent, "no answer in time"},
		{"TLS handshake", untrusted, "TLS handshake failed"},
		{"connect unavailable", unavailable, "unavailable: shutting down"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad, good := tc.first(t), serveAPI(t, fakeAPI{name: "from the second"})
			var log lines
			s := newTestServers(&log, bad, good)
			name, err := getAction(s, 500*time.Millisecond)
			if err != nil || name != "from the second" {
				t.Fatalf("call = %q, %v; want the second server's answer\nlog: %q", name, err, log.all())
			}
			if i, _ := s.current(); i != 1 {
				t.Errorf("current server %d; want 1", i)
			}
			want := fmt.Sprintf("anvil agent: server %s failed (asking for work: %s", bad, tc.why)
			if got := log.all(); len(got) != 1 || !strings.HasPrefix(got[0], want) || !strings.HasSuffix(got[0], "moving to "+good) {
				t.Errorf("log %q; want one line starting %q and ending with moving to %s", got, want, good)
			}
		})
	}
}

// An answer of the API itself is the same at every replica: the call
// returns it and no server changes.
func TestStaysOnApplicationErrors(t *testing.T) {
	for _, code := range []connect.Code{connect.CodeNotFound, connect.CodeUnauthenticated, connect.CodeFailedPrecondition,
		connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeInternal} {
		t.Run(code.String(), func(t *testing.T) {
			var second atomic.Int64
			first := serveAPI(t, fakeAPI{err: connect.NewError(code, errors.New("no"))})
			good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				second.Add(1)
				http.Error(w, "not to be called", http.StatusTeapot)
			}))
			defer good.Close()
			var log lines
			s := newTestServers(&log, first, good.URL)
			_, err := getAction(s, 5*time.Second)
			if connect.CodeOf(err) != code {
				t.Fatalf("call = %v; want the first server's %v", err, code)
			}
			if i, _ := s.current(); i != 0 || second.Load() != 0 || len(log.all()) != 0 {
				t.Errorf("current %d, second server called %d times, log %q; want 0, 0, none", i, second.Load(), log.all())
			}
		})
	}
}

// switchable answers as a server when up, else 503 as a proxy in front of
// a dead one.
type switchable struct {
	up atomic.Bool
	h  http.Handler
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.up.Load() {
		http.Error(w, "no healthy upstream", http.StatusServiceUnavailable)
		return
	}
	s.h.ServeHTTP(w, r)
}

// When every server fails, the call fails (the caller backs off), the
// next call starts a new round where the last ended, the rounds after the
// first are quiet, and the first server to answer again is said.
func TestAllServersDown(t *testing.T) {
	var urls []string
	var sw []*switchable
	for i := range 2 {
		mux := http.NewServeMux()
		mux.Handle(anvilv1connect.NewAgentServiceHandler(fakeAPI{name: fmt.Sprint(i)}))
		s := &switchable{h: mux}
		srv := httptest.NewServer(s)
		defer srv.Close()
		urls, sw = append(urls, srv.URL), append(sw, s)
	}
	var log lines
	s := newTestServers(&log, urls...)
	for round := range 3 {
		if _, err := getAction(s, 5*time.Second); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("round %d: call = %v; want unavailable", round, err)
		}
		if i, _ := s.current(); i != 0 {
			t.Fatalf("round %d: current %d; want 0, where the round began", round, i)
		}
	}
	got := log.all()
	if len(got) != 2 || !strings.Contains(got[0], "moving to "+urls[1]) || !strings.Contains(got[1], "none of the 2 servers answers") {
		t.Fatalf("log after 3 rounds %q; want the first round's two moves only", got)
	}
	sw[1].up.Store(true)
	name, err := getAction(s, 5*time.Second)
	if err != nil || name != "1" {
		t.Fatalf("call = %q, %v; want the second server's answer", name, err)
	}
	got = log.all()
	if last := got[len(got)-1]; last != "anvil agent: server "+urls[1]+" answers; carrying on there" {
		t.Errorf("last line %q; want the second server said to answer", last)
	}
	// Answered: a later failure of it is told again.
	sw[1].up.Store(false)
	sw[0].up.Store(true)
	if name, err := getAction(s, 5*time.Second); err != nil || name != "0" {
		t.Fatalf("call = %q, %v; want the first server's answer", name, err)
	}
	if last := log.all()[len(log.all())-1]; !strings.Contains(last, "server "+urls[1]+" failed") {
		t.Errorf("last line %q; want the second server's failure", last)
	}
}

// Two calls failing at once on one server move on once, not past the
// next server.
func TestConcurrentFailuresMoveOnce(t *testing.T) {
	var log lines
	s := newTestServers(&log, "http://a", "http://b", "http://c")
	s.moveOn(0, "x", "y")
	s.moveOn(0, "x", "y")
	if i, _ := s.current(); i != 1 {
		t.Errorf("current %d; want 1", i)
	}
	if n := len(log.all()); n != 1 {
		t.Errorf("%d lines; want 1", n)
	}
}

// One server: nothing to move to, nothing said; the call's error is the
// server's, as before there were several.
func TestOneServerDoesNotMove(t *testing.T) {
	var log lines
	s := newTestServers(&log, serveAPI(t, fakeAPI{err: connect.NewError(connect.CodeUnavailable, errors.New("down"))}))
	if _, err := getAction(s, 5*time.Second); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("call = %v; want unavailable", err)
	}
	if len(log.all()) != 0 {
		t.Errorf("log %q; want none", log.all())
	}
}
