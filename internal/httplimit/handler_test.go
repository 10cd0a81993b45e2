package httplimit

import (
	"go/build"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	clk := newClock()
	l := New(Config{Rate: 1, Burst: 2, ClientConcurrency: 1, Concurrency: 2, Clock: clk})
	release := make(chan struct{})
	entered := make(chan string, 4)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- r.URL.Path
			<-release
		}
		w.Write([]byte("ok"))
	})
	var mu sync.Mutex
	var refused []Limit
	h := NewHandler(HandlerConfig{
		Limiter: l, Next: next,
		// Clients named by a header, as a proxy-aware caller would.
		Client: func(r *http.Request) netip.Addr { return netip.MustParseAddr(r.Header.Get("Client")) },
		Refused: func(_ *http.Request, ref Refusal) {
			mu.Lock()
			refused = append(refused, ref.Limit)
			mu.Unlock()
		},
	})
	do := func(path, client string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("Client", client)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	// One slow request from 10.0.0.1 holds its place until it ends.
	slowDone := make(chan *httptest.ResponseRecorder)
	go func() { slowDone <- do("/slow", "10.0.0.1") }()
	<-entered

	tests := []struct {
		name, path, client string
		wantCode           int
		wantRetry          string
		wantBody           string
	}{
		{name: "client concurrency", path: "/", client: "10.0.0.1", wantCode: 429, wantRetry: "1", wantBody: "limit client_concurrency"},
		{name: "another client", path: "/", client: "10.0.0.2", wantCode: 200, wantBody: "ok"},
		{name: "rate", path: "/", client: "10.0.0.3", wantCode: 429, wantRetry: "1", wantBody: "limit rate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := do(tc.path, tc.client)
			if w.Code != tc.wantCode || w.Header().Get("Retry-After") != tc.wantRetry || !strings.Contains(w.Body.String(), tc.wantBody) {
				t.Errorf("GET %s from %s = %d Retry-After %q %q; want %d Retry-After %q, body with %q", tc.path, tc.client,
					w.Code, w.Header().Get("Retry-After"), w.Body, tc.wantCode, tc.wantRetry, tc.wantBody)
			}
			if tc.wantCode != 200 {
				if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
					t.Errorf("Cache-Control = %q; want no-store", cc)
				}
			}
		})
	}
	if got := l.InFlight(); got != 1 {
		t.Errorf("InFlight with the slow request running = %d; want 1", got)
	}

	// The overall concurrency limit answers 503: fill it, then ask.
	clk.Advance(time.Hour)
	go func() { slowDone <- do("/slow", "10.0.0.4") }()
	<-entered
	if w := do("/", "10.0.0.5"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
		t.Errorf("past the concurrency limit: %d Retry-After %q; want 503 Retry-After 1", w.Code, w.Header().Get("Retry-After"))
	}
	close(release)
	for range 2 {
		if w := <-slowDone; w.Code != 200 {
			t.Errorf("slow request = %d; want 200", w.Code)
		}
	}
	if got := l.InFlight(); got != 0 {
		t.Errorf("InFlight after every request ended = %d; want 0", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []Limit{LimitClientConcurrency, LimitRate, LimitConcurrency}; strings.Join(limitStrings(refused), ",") != strings.Join(limitStrings(want), ",") {
		t.Errorf("Refused saw %v; want %v", refused, want)
	}
}

func limitStrings(ls []Limit) []string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = string(l)
	}
	return s
}

// TestHandlerPeer checks the default client: the TCP peer.
func TestHandlerPeer(t *testing.T) {
	l := New(Config{ClientRate: 1, ClientBurst: 1, Clock: newClock()})
	h := NewHandler(HandlerConfig{Limiter: l, Next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
	for _, tc := range []struct {
		remote string
		want   int
	}{
		{"10.0.0.1:1000", 200},
		{"10.0.0.1:1001", 429}, // another connection, the same client
		{"[::ffff:10.0.0.1]:1002", 429},
		{"10.0.0.2:1000", 200},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("from %s: %d; want %d", tc.remote, w.Code, tc.want)
		}
	}
}

// TestImports keeps the package free of anvil: it limits any handler,
// and takes only the standard library and the clock leaf.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if imp == "github.com/anvilproj/anvil/internal/clock" {
			continue
		}
		if strings.HasPrefix(imp, "github.com/") || strings.HasPrefix(imp, "golang.org/") {
			t.Errorf("httplimit imports %s; it depends on the standard library and internal/clock only", imp)
		}
	}
}
