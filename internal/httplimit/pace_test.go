package httplimit

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestPaceRule is the deadline rule on its own, with explicit times.
func TestPaceRule(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type write struct {
		n    int64         // bytes the next write carries
		sent int64         // then: bytes it sent
		done time.Duration // at this time after t0
	}
	tests := []struct {
		name         string
		p            pace
		writes       []write
		next         int64         // the next write's size
		wantDeadline time.Duration // after t0; -1: none
		verdictAt    time.Duration // when to ask for a verdict
		want         CutReason
	}{
		{
			name: "stall only: a stall timeout after the last progress",
			p:    pace{stall: time.Minute}, writes: []write{{n: 100, sent: 100, done: 10 * time.Second}},
			next: 100, wantDeadline: 70 * time.Second,
			verdictAt: 69 * time.Second, want: "",
		},
		{
			name: "stall only: cut once the stall timeout has passed",
			p:    pace{stall: time.Minute}, writes: []write{{n: 100, sent: 100, done: 10 * time.Second}},
			next: 100, wantDeadline: 70 * time.Second,
			verdictAt: 70 * time.Second, want: CutStall,
		},
		{
			name: "min rate: the grace comes first",
			p:    pace{minRate: 1000, grace: 30 * time.Second},
			next: 1000, wantDeadline: 30 * time.Second,
			verdictAt: 29 * time.Second, want: "",
		},
		{
			name: "min rate: nothing sent by the end of the grace",
			p:    pace{minRate: 1000, grace: 30 * time.Second},
			next: 1000, wantDeadline: 30 * time.Second,
			verdictAt: 30 * time.Second, want: CutMinRate,
		},
		{
			name:   "min rate: the deadline counts the write as sent",
			p:      pace{minRate: 1000, grace: 30 * time.Second},
			writes: []write{{n: 40000, sent: 40000, done: 5 * time.Second}},
			next:   20000, wantDeadline: 60 * time.Second, // 60,000 bytes at 1,000/s
			verdictAt: 39 * time.Second, want: "", // 40,000 ≥ 39,000
		},
		{
			name:   "min rate: under it past the grace",
			p:      pace{minRate: 1000, grace: 30 * time.Second},
			writes: []write{{n: 40000, sent: 40000, done: 5 * time.Second}},
			next:   20000, wantDeadline: 60 * time.Second,
			verdictAt: 41 * time.Second, want: CutMinRate, // 40,000 < 41,000
		},
		{
			name:   "both: the earlier deadline",
			p:      pace{stall: 10 * time.Second, minRate: 1000, grace: 30 * time.Second},
			writes: []write{{n: 1 << 20, sent: 1 << 20, done: time.Second}},
			next:   1 << 20, wantDeadline: 11 * time.Second, // the rate allows ~35 min
			verdictAt: 11 * time.Second, want: CutStall,
		},
		{
			name:   "a partial write is progress",
			p:      pace{stall: 10 * time.Second},
			writes: []write{{n: 1 << 20, sent: 1000, done: 10 * time.Second}},
			next:   1 << 20, wantDeadline: 20 * time.Second,
			verdictAt: 15 * time.Second, want: "",
		},
		{
			name: "no limits: no deadline", p: pace{}, next: 100, wantDeadline: -1,
			verdictAt: time.Hour, want: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.start, p.last = t0, t0
			for _, w := range tc.writes {
				p.progress(w.sent, at(w.done))
			}
			got := p.deadline(tc.next)
			if tc.wantDeadline < 0 {
				if !got.IsZero() {
					t.Errorf("deadline(%d) = %v; want none", tc.next, got.Sub(t0))
				}
			} else if !got.Equal(at(tc.wantDeadline)) {
				t.Errorf("deadline(%d) = t0+%v; want t0+%v", tc.next, got.Sub(t0), tc.wantDeadline)
			}
			if v := p.verdict(at(tc.verdictAt)); v != tc.want {
				t.Errorf("verdict at t0+%v = %q; want %q", tc.verdictAt, v, tc.want)
			}
		})
	}
}

// bigFile writes a file of size bytes (sparse: zeros) and returns its path.
func bigFile(t *testing.T, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.raw")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPacerFreesStalledSlots: downloads whose clients stop reading fill
// the concurrency limit; the pacer cuts each after the stall timeout, the
// slots are released, and a client that reads gets the whole file — over
// real TCP: plain HTTP/1.1 (the file sent by sendfile, resumable), TLS and
// h2c (pieces that cannot be resumed).
func TestPacerFreesStalledSlots(t *testing.T) {
	const size = 32 << 20 // far more than socket buffers and HTTP/2 windows hold
	path := bigFile(t, size)
	tests := []struct {
		name  string
		start func(*httptest.Server)
		// stall starts a request that is never read; reader returns a
		// client that reads.
		stall  func(t *testing.T, srv *httptest.Server)
		reader func(srv *httptest.Server) *http.Client
	}{
		{
			name:  "HTTP/1.1",
			start: (*httptest.Server).Start,
			stall: func(t *testing.T, srv *httptest.Server) {
				testtool.StalledGet(t, nil, srv.Listener.Addr().String(), "/stalled/image.raw")
			},
			reader: (*httptest.Server).Client,
		},
		{
			name:  "HTTP/1.1 over TLS",
			start: (*httptest.Server).StartTLS,
			stall: func(t *testing.T, srv *httptest.Server) {
				raw, err := (&net.Dialer{Control: testtool.SmallReceiveBuffer}).Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) // the test's own server
				t.Cleanup(func() { c.Close() })
				if _, err := io.WriteString(c, "GET /stalled/image.raw HTTP/1.1\r\nHost: anvil\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
			},
			reader: (*httptest.Server).Client,
		},
		{
			name: "h2c",
			start: func(srv *httptest.Server) {
				srv.Config.Protocols = new(http.Protocols)
				srv.Config.Protocols.SetUnencryptedHTTP2(true)
				srv.Start()
			},
			stall: func(t *testing.T, srv *httptest.Server) {
				tr := &http.Transport{Protocols: new(http.Protocols), DialContext: (&net.Dialer{Control: testtool.SmallReceiveBuffer}).DialContext}
				tr.Protocols.SetUnencryptedHTTP2(true)
				req, err := http.NewRequest(http.MethodGet, srv.URL+"/stalled/image.raw", nil)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(func() { cancel(); tr.CloseIdleConnections() })
				// The answer comes only when the test releases it: ask in
				// the background, and never read the body.
				go func() {
					if resp, err := (&http.Client{Transport: tr}).Do(req.WithContext(ctx)); err == nil {
						<-ctx.Done()
						resp.Body.Close()
					}
				}()
			},
			reader: func(*httptest.Server) *http.Client {
				tr := &http.Transport{Protocols: new(http.Protocols)}
				tr.Protocols.SetUnencryptedHTTP2(true)
				return &http.Client{Transport: tr}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(Config{Concurrency: 3})
			cuts := make(chan Cut, 10)
			file := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, path) })
			// The stalled clients ask /stalled/, paced with a short stall
			// timeout, so the test waits little (what it waits for is the
			// cut, not the time); the reading client asks /, with a
			// minute's, so a busy machine's pause in its reads is no cut.
			// The stalled downloads start writing (and their deadlines
			// running) only once the test has seen the limit full.
			release := make(chan struct{})
			held := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-release:
					file.ServeHTTP(w, r)
				case <-r.Context().Done():
				}
			})
			mux := http.NewServeMux()
			mux.Handle("/stalled/", NewPacer(PacerConfig{Next: held, StallTimeout: 300 * time.Millisecond,
				Cut: func(_ *http.Request, c Cut) { cuts <- c }}))
			mux.Handle("/", NewPacer(PacerConfig{Next: file, StallTimeout: time.Minute,
				Cut: func(_ *http.Request, c Cut) { cuts <- c }}))
			h := NewHandler(HandlerConfig{Limiter: l, Next: mux})
			srv := httptest.NewUnstartedServer(h)
			tc.start(srv)
			// Registered before the stalled clients: cleanups run last
			// first, so they are gone before Close waits for their
			// handlers (which, unpaced, would never return).
			t.Cleanup(srv.Close)

			for range 3 {
				tc.stall(t, srv)
			}
			// The limit fills: a fourth request is refused while they hang.
			testtool.WaitFor(t, "3 requests in flight", func() bool { return l.InFlight() == 3 })
			client := tc.reader(srv)
			resp, err := client.Get(srv.URL + "/image.raw")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("GET with the limit full of stalled downloads = %d; want 503", resp.StatusCode)
			}
			close(release)
			for range 3 {
				c := testtool.Receive(t, cuts, "a stalled download cut")
				if c.Reason != CutStall || c.Bytes <= 0 || c.Bytes >= size {
					t.Errorf("cut %+v; want reason stall after some but not all of the file", c)
				}
			}
			testtool.WaitFor(t, "every slot released", func() bool { return l.InFlight() == 0 })

			// A client that reads gets the whole file, uncut.
			resp, err = client.Get(srv.URL + "/image.raw")
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err != nil || n != size {
				t.Errorf("GET after the cuts = %d, %d bytes, %v; want 200 and %d bytes", resp.StatusCode, n, err, size)
			}
			select {
			case c := <-cuts:
				t.Errorf("a reading client was cut: %+v", c)
			default:
			}
		})
	}
}

// TestPacerMinRate: a client that reads, but too slowly, is cut for its
// rate once the grace has passed; one that reads fast is not. The slow
// reader takes 4 KiB every 10 ms (at most 400 KiB/s) against a minimum
// of 2 MiB/s, which loopback beats many times over even on a busy machine:
// far apart, so neither outcome depends on the machine's speed.
func TestPacerMinRate(t *testing.T) {
	const size = 16 << 20
	path := bigFile(t, size)
	cuts := make(chan Cut, 10)
	srv := httptest.NewServer(NewPacer(PacerConfig{
		Next:    http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, path) }),
		MinRate: 2 << 20, Grace: 200 * time.Millisecond,
		Cut: func(_ *http.Request, c Cut) { cuts <- c },
	}))
	t.Cleanup(srv.Close) // after the slow reader's conn is closed (see TestPacerFreesStalledSlots)

	c := testtool.StalledGet(t, nil, srv.Listener.Addr().String(), "/image.raw")
	var read atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { // the slow reader
		buf := make([]byte, 4<<10)
		for ctx.Err() == nil {
			n, err := c.Read(buf)
			read.Add(int64(n))
			if err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // its pace, not an assertion
		}
	}()
	got := testtool.Receive(t, cuts, "the slow reader cut")
	if got.Reason != CutMinRate {
		t.Errorf("slow reader cut %+v; want min_rate", got)
	}
	stop()

	// A fast reader (here, the same machine's loopback) is not cut, and
	// gets every byte of what the server says.
	resp, err := http.Get(srv.URL + "/image.raw")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Errorf("fast reader: %d bytes, %v; want %d", n, err, size)
	}
	select {
	case c := <-cuts:
		t.Errorf("the fast reader was cut: %+v", c)
	default:
	}
}

// TestPacerPassesTheRestThrough: writes, headers and flushes of a paced
// response reach the client as they were.
func TestPacerPassesTheRestThrough(t *testing.T) {
	srv := httptest.NewServer(NewPacer(PacerConfig{
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Test", "yes")
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, strings.Repeat("x", 100<<10)) // several pieces
			http.NewResponseController(w).Flush()
		}),
		StallTimeout: time.Minute, MinRate: 1, Grace: time.Minute,
	}))
	defer srv.Close()
	for range 2 { // the second on the same connection: no deadline left behind
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Test") != "yes" || len(b) != 100<<10 {
			t.Errorf("paced response = %d %q, %d bytes; want 418 yes, %d bytes", resp.StatusCode, resp.Header.Get("X-Test"), len(b), 100<<10)
		}
	}
}
