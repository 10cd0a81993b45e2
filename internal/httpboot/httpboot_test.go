package httpboot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/anvilproj/anvil/internal/clientip"
	"github.com/anvilproj/anvil/internal/ipxe"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/testtool"
)

// recorder is a machinelog.Sink that keeps every Event.
type recorder struct {
	mu     sync.Mutex
	events []machinelog.Event
}

func (r *recorder) Record(e machinelog.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) last(t *testing.T) machinelog.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		t.Fatal("no machinelog event recorded")
	}
	return r.events[len(r.events)-1]
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

var mac1 = macaddr.MustParse("52:54:00:ab:cd:ef")

// testScripter knows mac1 and the source 192.0.2.1; it fails for
// 52:54:00:00:00:ee.
func testScripter(got *ScriptRequest) Scripter {
	return ScripterFunc(func(_ context.Context, r ScriptRequest) (*Script, error) {
		if got != nil {
			*got = r
		}
		switch {
		case r.MAC.String() == "52:54:00:00:00:ee":
			return nil, errors.New("store: disk on fire")
		case r.MAC.String() == mac1.String(), !r.MAC.IsValid() && r.Source == netip.MustParseAddr("192.0.2.1"):
			return &Script{Body: "#!ipxe\nexit\n", Reason: "workflow default/install is PENDING: boot environment"}, nil
		case !r.MAC.IsValid():
			return nil, fmt.Errorf("%w: no Hardware has IP %s", ErrNoScript, r.Source)
		}
		return nil, fmt.Errorf("%w: no Hardware has MAC %s", ErrNoScript, r.MAC)
	})
}

func newTest(t *testing.T, cfg Config) (*Handler, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg.Events = rec
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(cfg), rec
}

func do(h http.Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil) // RemoteAddr 192.0.2.1:1234
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestScript(t *testing.T) {
	var got ScriptRequest
	h, rec := newTest(t, Config{Scripter: testScripter(&got)})
	tests := []struct {
		name, method, target string
		wantCode             int
		wantBody             string // substring
		wantMAC              macaddr.MAC
		wantOutcome          string
		wantMessage          string // substring
	}{
		{"by MAC", "GET", "/ipxe/script/52:54:00:ab:cd:ef/auto.ipxe", 200, "#!ipxe\nexit\n", mac1, OutcomeServed,
			"GET /ipxe/script/52:54:00:ab:cd:ef/auto.ipxe: workflow default/install is PENDING: boot environment"},
		{"upper case with hyphens", "GET", "/ipxe/script/52-54-00-AB-CD-EF/auto.ipxe", 200, "#!ipxe", mac1, OutcomeServed, "PENDING"},
		{"upper case", "GET", "/ipxe/script/52:54:00:AB:CD:EF/auto.ipxe", 200, "#!ipxe", mac1, OutcomeServed, "PENDING"},
		{"by IP", "GET", "/ipxe/script/auto.ipxe", 200, "#!ipxe", macaddr.MAC{}, OutcomeServed, "PENDING"},
		{"unknown MAC", "GET", "/ipxe/script/52:54:00:00:00:01/auto.ipxe", 404, "no Hardware has MAC 52:54:00:00:00:01",
			macaddr.MustParse("52:54:00:00:00:01"), OutcomeNotFound, "404: no script for this machine: no Hardware has MAC 52:54:00:00:00:01"},
		{"scripter fails", "GET", "/ipxe/script/52:54:00:00:00:ee/auto.ipxe", 500, "disk on fire",
			macaddr.MustParse("52:54:00:00:00:ee"), OutcomeError, "500: store: disk on fire"},
		{"bad MAC", "GET", "/ipxe/script/not-a-mac/auto.ipxe", 400, "is not a MAC address", macaddr.MAC{}, OutcomeBadRequest, "not a MAC"},
		{"eight-byte MAC", "GET", "/ipxe/script/01:02:03:04:05:06:07:08/auto.ipxe", 400, "is not a MAC address", macaddr.MAC{}, OutcomeBadRequest, "not a MAC"},
		{"HEAD", "HEAD", "/ipxe/script/52:54:00:ab:cd:ef/auto.ipxe", 200, "", mac1, OutcomeServed, "PENDING"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			before := rec.count()
			w := do(h, tc.method, target)
			if w.Code != tc.wantCode {
				t.Fatalf("%s %s = %d; want %d (body %q)", tc.method, target, w.Code, tc.wantCode, w.Body.String())
			}
			if !strings.Contains(w.Body.String(), tc.wantBody) {
				t.Errorf("body = %q; want it to contain %q", w.Body.String(), tc.wantBody)
			}
			if tc.method == "HEAD" && w.Body.Len() != 0 {
				t.Errorf("HEAD sent a body: %q", w.Body.String())
			}
			if ct := w.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
			if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control = %q; want no-store", cc)
			}
			if cl := w.Header().Get("Content-Length"); cl == "" || (tc.method == "GET" && cl != strconv.Itoa(w.Body.Len())) {
				t.Errorf("Content-Length = %q; body is %d bytes", cl, w.Body.Len())
			}
			if rec.count() != before+1 {
				t.Fatalf("recorded %d events; want exactly 1", rec.count()-before)
			}
			e := rec.last(t)
			if e.Service != machinelog.ServiceHTTP || e.Outcome != tc.wantOutcome || e.MAC != tc.wantMAC ||
				e.IP != netip.MustParseAddr("192.0.2.1") || !strings.Contains(e.Message, tc.wantMessage) || e.Time.IsZero() {
				t.Errorf("event = %+v; want service http, outcome %s, MAC %v, IP 192.0.2.1, message containing %q",
					e, tc.wantOutcome, tc.wantMAC, tc.wantMessage)
			}
		})
	}
}

func TestScriptRequest(t *testing.T) {
	var got ScriptRequest
	h, _ := newTest(t, Config{Scripter: testScripter(&got)})
	tests := []struct {
		target              string
		platform, buildarch string
	}{
		{"/ipxe/script/52:54:00:ab:cd:ef/auto.ipxe?platform=efi&buildarch=x86_64", "efi", "x86_64"},
		{"/ipxe/script/auto.ipxe?platform=pcbios&buildarch=i386", "pcbios", "i386"},
		{"/ipxe/script/52:54:00:ab:cd:ef/auto.ipxe?platform=efi%0Ashell&buildarch=" + strings.Repeat("a", 33), "", ""},
		{"/ipxe/script/52:54:00:ab:cd:ef/auto.ipxe", "", ""},
	}
	for _, tc := range tests {
		got = ScriptRequest{}
		if w := do(h, "GET", tc.target); w.Code != 200 {
			t.Fatalf("GET %s = %d", tc.target, w.Code)
		}
		if got.Platform != tc.platform || got.BuildArch != tc.buildarch || got.Source != netip.MustParseAddr("192.0.2.1") {
			t.Errorf("GET %s: request = %+v; want platform %q, buildarch %q, source 192.0.2.1", tc.target, got, tc.platform, tc.buildarch)
		}
	}
}

// TestSourceBehindProxy checks that the source of a script request is the
// client the server's clientip middleware found, not the TCP peer (a
// trusted proxy), and that without the middleware the peer is.
func TestSourceBehindProxy(t *testing.T) {
	var got ScriptRequest
	h, rec := newTest(t, Config{Scripter: testScripter(&got)})
	trusted, err := clientip.ParseTrustedProxies([]string{"10.0.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		handler http.Handler
		remote  string
		want    string
	}{
		{name: "through a trusted proxy", handler: clientip.Resolver{Trusted: trusted}.Handler(h), remote: "10.0.0.5:4000", want: "192.0.2.1"},
		{name: "no middleware: the peer", handler: h, remote: "10.0.0.5:4000", want: "10.0.0.5"},
		{name: "untrusted peer: its own address", handler: clientip.Resolver{Trusted: trusted}.Handler(h), remote: "198.51.100.7:4000", want: "198.51.100.7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/ipxe/script/auto.ipxe", nil)
			r.RemoteAddr = tc.remote
			r.Header.Set(clientip.HeaderForwardedFor, "192.0.2.1")
			tc.handler.ServeHTTP(httptest.NewRecorder(), r)
			want := netip.MustParseAddr(tc.want)
			if got.Source != want || rec.last(t).IP != want {
				t.Errorf("source = %v, event IP %v; want %v", got.Source, rec.last(t).IP, want)
			}
		})
	}
}

func TestNilScripter(t *testing.T) {
	h, _ := newTest(t, Config{})
	if w := do(h, "GET", "/ipxe/script/52:54:00:12:34:56/auto.ipxe"); w.Code != 404 {
		t.Errorf("no Scripter: code %d; want 404", w.Code)
	}
}

func TestBinary(t *testing.T) {
	h, rec := newTest(t, Config{Binaries: ipxe.Binaries()})
	want, err := fs.ReadFile(ipxe.Binaries(), ipxe.BinaryBIOS)
	if err != nil {
		t.Fatal(err)
	}
	w := do(h, "GET", "/ipxe/binary/undionly.kpxe")
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), want) {
		t.Fatalf("GET undionly.kpxe = %d, %d bytes; want 200, %d bytes", w.Code, w.Body.Len(), len(want))
	}
	if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(len(want)) {
		t.Errorf("Content-Length = %q; want %d", cl, len(want))
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("Content-Type = %q; want application/octet-stream", ct)
	}
	etag := w.Header().Get("ETag")
	if !strings.HasPrefix(etag, `"sha256-`) {
		t.Errorf("ETag = %q; want a content hash", etag)
	}
	e := rec.last(t)
	wantMsg := fmt.Sprintf("GET /ipxe/binary/undionly.kpxe: 200, %s bytes", commas(int64(len(want))))
	if e.Message != wantMsg || e.Outcome != OutcomeServed || e.MAC.IsValid() {
		t.Errorf("event = %+v; want message %q, outcome served, no MAC", e, wantMsg)
	}

	if w := do(h, "GET", "/ipxe/binary/undionly.kpxe"); w.Header().Get("ETag") != etag {
		t.Errorf("ETag changed between requests: %q, %q", etag, w.Header().Get("ETag"))
	}
	if w := do(h, "GET", "/ipxe/binary/undionly.kpxe", "If-None-Match", etag); w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("If-None-Match: %d, %d bytes; want 304, none", w.Code, w.Body.Len())
	}
	if e := rec.last(t); e.Message != "GET /ipxe/binary/undionly.kpxe: 304, not modified" || e.Outcome != OutcomeServed {
		t.Errorf("304 event = %+v", e)
	}

	w = do(h, "HEAD", "/ipxe/binary/ipxe.efi")
	if st, _ := fs.Stat(ipxe.Binaries(), "ipxe.efi"); w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") != strconv.FormatInt(st.Size(), 10) {
		t.Errorf("HEAD ipxe.efi = %d, %d bytes, Content-Length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}

	for _, p := range []string{"/ipxe/binary/nope.efi", "/ipxe/binary/..%2fbinaries.go", "/ipxe/binary/%2e%2e"} {
		if w := do(h, "GET", p); w.Code != 404 {
			t.Errorf("GET %s = %d; want 404", p, w.Code)
		}
		if e := rec.last(t); e.Outcome != OutcomeNotFound {
			t.Errorf("GET %s: outcome %q; want not-found", p, e.Outcome)
		}
	}
}

func TestRange(t *testing.T) {
	h, rec := newTest(t, Config{Binaries: ipxe.Binaries()})
	want, err := fs.ReadFile(ipxe.Binaries(), ipxe.BinaryEFIx8664)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rng      string
		code     int
		from, to int // inclusive
	}{
		{"bytes=0-99", 206, 0, 99},
		{"bytes=1000-1999", 206, 1000, 1999},
		{fmt.Sprintf("bytes=-%d", 10), 206, len(want) - 10, len(want) - 1},
		{fmt.Sprintf("bytes=%d-", len(want)-5), 206, len(want) - 5, len(want) - 1},
		{fmt.Sprintf("bytes=%d-", len(want)+5), 416, 0, -1},
	}
	for _, tc := range tests {
		w := do(h, "GET", "/ipxe/binary/ipxe.efi", "Range", tc.rng)
		if w.Code != tc.code {
			t.Fatalf("Range %s: %d; want %d", tc.rng, w.Code, tc.code)
		}
		if tc.code != 206 {
			if e := rec.last(t); e.Outcome != OutcomeBadRequest {
				t.Errorf("Range %s: outcome %q; want bad-request", tc.rng, e.Outcome)
			}
			continue
		}
		if !bytes.Equal(w.Body.Bytes(), want[tc.from:tc.to+1]) {
			t.Errorf("Range %s: wrong bytes", tc.rng)
		}
		wantCR := fmt.Sprintf("bytes %d-%d/%d", tc.from, tc.to, len(want))
		if cr := w.Header().Get("Content-Range"); cr != wantCR {
			t.Errorf("Range %s: Content-Range %q; want %q", tc.rng, cr, wantCR)
		}
		e := rec.last(t)
		wantMsg := fmt.Sprintf("206, %s bytes", commas(int64(tc.to-tc.from+1)))
		if !strings.Contains(e.Message, wantMsg) || !strings.Contains(e.Message, tc.rng) {
			t.Errorf("Range %s: event message %q; want %q and the range", tc.rng, e.Message, wantMsg)
		}
	}
}

func TestBootEnv(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	kernel := bytes.Repeat([]byte("kernel"), 5000)
	write := func(p string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "vmlinuz-x86_64"), kernel)
	write(filepath.Join(dir, "sub", "initramfs-x86_64"), []byte("initramfs"))
	write(filepath.Join(outside, "secret"), []byte("secret"))
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	mt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "vmlinuz-x86_64"), mt, mt); err != nil {
		t.Fatal(err)
	}
	bootEnv, err := DirFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, rec := newTest(t, Config{BootEnv: bootEnv})

	w := do(h, "GET", "/bootenv/vmlinuz-x86_64")
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), kernel) {
		t.Fatalf("GET vmlinuz = %d, %d bytes", w.Code, w.Body.Len())
	}
	if lm := w.Header().Get("Last-Modified"); lm != mt.Format(http.TimeFormat) {
		t.Errorf("Last-Modified = %q; want %q", lm, mt.Format(http.TimeFormat))
	}
	wantETag := fmt.Sprintf(`"%x-%x"`, len(kernel), mt.UnixNano())
	if et := w.Header().Get("ETag"); et != wantETag {
		t.Errorf("ETag = %q; want %q", et, wantETag)
	}
	if e := rec.last(t); e.Message != "GET /bootenv/vmlinuz-x86_64: 200, 30,000 bytes" {
		t.Errorf("event message = %q", e.Message)
	}
	if w := do(h, "GET", "/bootenv/vmlinuz-x86_64", "If-Modified-Since", mt.Add(time.Hour).Format(http.TimeFormat)); w.Code != 304 {
		t.Errorf("If-Modified-Since later: %d; want 304", w.Code)
	}
	if w := do(h, "GET", "/bootenv/sub/initramfs-x86_64"); w.Code != 200 || w.Body.String() != "initramfs" {
		t.Errorf("GET sub/initramfs = %d %q", w.Code, w.Body.String())
	}

	// A changed file gets a new ETag.
	write(filepath.Join(dir, "vmlinuz-x86_64"), []byte("new kernel"))
	if w := do(h, "GET", "/bootenv/vmlinuz-x86_64"); w.Header().Get("ETag") == wantETag || w.Body.String() != "new kernel" {
		t.Errorf("after rewrite: ETag %q, body %q", w.Header().Get("ETag"), w.Body.String())
	}

	for _, p := range []string{"/bootenv/", "/bootenv/sub", "/bootenv/escape", "/bootenv/..%2f..%2fetc%2fpasswd",
		"/bootenv/sub/..%2f..%2fsecret", "/bootenv/nope"} {
		w := do(h, "GET", p)
		if w.Code != 404 {
			t.Errorf("GET %s = %d; want 404 (body %q)", p, w.Code, w.Body.String())
		}
	}
	// The mux cleans "..": the client is redirected inside /bootenv or out of it, never served.
	if w := do(h, "GET", "/bootenv/../../etc/passwd"); w.Code == 200 {
		t.Errorf("GET /bootenv/../../etc/passwd served %q", w.Body.String())
	}

	none, _ := newTest(t, Config{})
	if w := do(none, "GET", "/bootenv/vmlinuz-x86_64"); w.Code != 404 {
		t.Errorf("no BootEnv: %d; want 404", w.Code)
	}
}

// TestImages: OS images are served from their own directory at /images/,
// with a length and ranges (image2disk resumes with them), and nothing
// of the boot environment leaks there.
func TestImages(t *testing.T) {
	dir := t.TempDir()
	img := bytes.Repeat([]byte("0123456789"), 1000)
	if err := os.WriteFile(filepath.Join(dir, "os.raw.zst"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	images, err := DirFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, rec := newTest(t, Config{Images: images, BootEnv: fstest.MapFS{"vmlinuz-x86_64": {Data: []byte("k")}}})
	w := do(h, "GET", "/images/os.raw.zst")
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), img) || w.Header().Get("Content-Length") != "10000" {
		t.Fatalf("GET /images/os.raw.zst = %d, %d bytes, Content-Length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}
	if e := rec.last(t); e.Message != "GET /images/os.raw.zst: 200, 10,000 bytes" {
		t.Errorf("event message = %q", e.Message)
	}
	w = do(h, "GET", "/images/os.raw.zst", "Range", "bytes=9990-")
	if w.Code != 206 || w.Body.String() != "0123456789" {
		t.Errorf("range: %d %q", w.Code, w.Body.String())
	}
	for _, p := range []string{"/images/vmlinuz-x86_64", "/images/", "/images/nope"} {
		if w := do(h, "GET", p); w.Code != 404 {
			t.Errorf("GET %s = %d; want 404", p, w.Code)
		}
	}
}

// seqFS serves files that cannot seek, as some fs.FS implementations do.
type seqFS struct{ fstest.MapFS }

type seqFile struct{ fs.File }

func (s seqFS) Open(name string) (fs.File, error) {
	f, err := s.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	return seqFile{f}, nil
}

func TestNonSeekableFile(t *testing.T) {
	h, rec := newTest(t, Config{BootEnv: seqFS{fstest.MapFS{"k": {Data: []byte("0123456789")}}}})
	w := do(h, "GET", "/bootenv/k")
	if w.Code != 200 || w.Body.String() != "0123456789" || w.Header().Get("Content-Length") != "10" {
		t.Errorf("GET k = %d %q, Content-Length %q", w.Code, w.Body.String(), w.Header().Get("Content-Length"))
	}
	if e := rec.last(t); e.Message != "GET /bootenv/k: 200, 10 bytes" {
		t.Errorf("event message = %q", e.Message)
	}
}

func counter(t *testing.T, c *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestMetrics(t *testing.T) {
	h, _ := newTest(t, Config{Binaries: ipxe.Binaries(), Scripter: testScripter(nil)})
	const route = "/ipxe/binary/{name}"
	reqs, sent := counter(t, requestsTotal, route, "206"), counter(t, bytesTotal, route)
	scripts404 := counter(t, requestsTotal, "/ipxe/script/{mac}/auto.ipxe", "404")
	do(h, "GET", "/ipxe/binary/snponly.efi", "Range", "bytes=0-9")
	do(h, "GET", "/ipxe/script/52:54:00:00:00:01/auto.ipxe")
	if got := counter(t, requestsTotal, route, "206"); got != reqs+1 {
		t.Errorf("requests{route=%s,code=206} = %v; want %v", route, got, reqs+1)
	}
	if got := counter(t, bytesTotal, route); got != sent+10 {
		t.Errorf("bytes{route=%s} = %v; want %v", route, got, sent+10)
	}
	if got := counter(t, requestsTotal, "/ipxe/script/{mac}/auto.ipxe", "404"); got != scripts404+1 {
		t.Errorf("requests{route=script,code=404} = %v; want %v", got, scripts404+1)
	}
}

// TestCurlRange fetches part of a binary with a real client over a real
// socket, as an operator would when checking a server.
func TestCurlRange(t *testing.T) {
	curl := testtool.RequireBinary(t, "curl", "curl")
	h, rec := newTest(t, Config{Binaries: ipxe.Binaries()})
	srv := httptest.NewServer(h)
	defer srv.Close()
	want, err := fs.ReadFile(ipxe.Binaries(), ipxe.BinarySNPOnly)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "part")
	cmd := exec.CommandContext(t.Context(), curl, "--silent", "--show-error", "--fail", "--range", "4096-8191",
		"--output", out, "--write-out", "%{http_code}", srv.URL+"/ipxe/binary/snponly.efi")
	code, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	if string(code) != "206" {
		t.Errorf("curl got HTTP %s; want 206", code)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want[4096:8192]) {
		t.Errorf("curl got %d bytes, not bytes 4096-8191 of snponly.efi", len(got))
	}
	e := rec.last(t)
	if !strings.Contains(e.Message, "206, 4,096 bytes") || e.IP != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("event = %+v; want a 206 of 4,096 bytes from 127.0.0.1", e)
	}
}

func TestCommas(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 8123456: "8,123,456", -1234: "-1,234"} {
		if got := commas(in); got != want {
			t.Errorf("commas(%d) = %q; want %q", in, got, want)
		}
	}
}

// readFromRecorder is a ResponseWriter with net/http's zero-copy entry: a
// ReadFrom, which records how much came through it from a file (what net
// hands to sendfile).
type readFromRecorder struct {
	*httptest.ResponseRecorder
	fromFile int64
}

func (r *readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	file := src
	if lr, ok := src.(*io.LimitedReader); ok {
		file = lr.R
	}
	n, err := io.Copy(writerOnly{r.ResponseRecorder}, src)
	if _, ok := file.(*os.File); ok {
		r.fromFile += n
	}
	return n, err
}

// writerOnly hides the recorder's own io.ReaderFrom from io.Copy.
type writerOnly struct{ io.Writer }

// TestFileReachesReadFrom: a file's body is handed, as the file itself (or
// a section of it), to the ReadFrom of the writer the handler was given —
// the request's counting writer passes the zero-copy path through — for a
// full GET and a Range GET, and the counted bytes reach the record.
func TestFileReachesReadFrom(t *testing.T) {
	dir := t.TempDir()
	img := bytes.Repeat([]byte("0123456789"), 100_000)
	if err := os.WriteFile(filepath.Join(dir, "os.raw"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	images, err := DirFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, rec := newTest(t, Config{Images: images})
	for _, tc := range []struct {
		rng    string
		code   int
		body   []byte
		record string
	}{
		{"", 200, img, "GET /images/os.raw: 200, 1,000,000 bytes"},
		{"bytes=10-500009", 206, img[10:500010], "GET /images/os.raw: 206, 500,000 bytes (of 1,000,000, bytes=10-500009)"},
	} {
		r := httptest.NewRequest("GET", "/images/os.raw", nil)
		if tc.rng != "" {
			r.Header.Set("Range", tc.rng)
		}
		w := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
		h.ServeHTTP(w, r)
		if w.Code != tc.code || !bytes.Equal(w.Body.Bytes(), tc.body) {
			t.Fatalf("Range %q: %d with %d bytes; want %d with %d", tc.rng, w.Code, w.Body.Len(), tc.code, len(tc.body))
		}
		if w.fromFile != int64(len(tc.body)) {
			t.Errorf("Range %q: %d of %d body bytes came through ReadFrom from the file; want all", tc.rng, w.fromFile, len(tc.body))
		}
		if e := rec.last(t); e.Message != tc.record {
			t.Errorf("Range %q: record %q; want %q", tc.rng, e.Message, tc.record)
		}
	}
}
