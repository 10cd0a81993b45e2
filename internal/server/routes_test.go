package server

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/clientip"
)

func TestNormalizePathPrefix(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "", want: ""},
		{in: "/", want: ""},
		{in: "//", want: ""},
		{in: "/tink-stack/", want: "/tink-stack"},
		{in: "tink-stack", want: "/tink-stack"},
		{in: "/tink-stack", want: "/tink-stack"},
		{in: "tink-stack/", want: "/tink-stack"},
		{in: "/a/b.c/d_e~f/", want: "/a/b.c/d_e~f"},
		{in: "/a//b/", wantErr: "no empty"},
		{in: "/a/../b", wantErr: "no empty, . or .."},
		{in: "/a b/", wantErr: "only letters"},
		{in: "/a%2Fb/", wantErr: "only letters"},
		{in: "/a?x=1", wantErr: "only letters"},
		{in: "/ipxe/", wantErr: "would hide anvil's own /ipxe routes"},
		{in: "/metrics/x", wantErr: "would hide"},
		{in: "/latest", wantErr: "would hide"},
		{in: "/anvil.v1.HardwareService", wantErr: "would hide"},
		{in: "/grpc.reflection.v1.ServerReflection", wantErr: "would hide"},
		{in: "/ipxe-stack/", want: "/ipxe-stack"}, // only whole elements collide
	}
	for _, tc := range tests {
		got, err := normalizePathPrefix(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("normalizePathPrefix(%q) = %q, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("normalizePathPrefix(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestWithPathPrefix(t *testing.T) {
	var gotPath, gotRaw string
	h := withPathPrefix("/tink-stack", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		gotPath, gotRaw = r.URL.Path, r.URL.RawPath
	}))
	tests := []struct {
		target, wantPath, wantRaw string
	}{
		{target: "/tink-stack/ipxe/binary/ipxe.efi", wantPath: "/ipxe/binary/ipxe.efi"},
		{target: "/ipxe/binary/ipxe.efi", wantPath: "/ipxe/binary/ipxe.efi"},
		{target: "/tink-stack/", wantPath: "/"},
		{target: "/tink-stack", wantPath: "/"},
		{target: "/tink-stack/tink-stack/healthz", wantPath: "/tink-stack/healthz"}, // stripped once
		{target: "/tink-stackfoo/healthz", wantPath: "/tink-stackfoo/healthz"},
		{target: "/other/tink-stack/healthz", wantPath: "/other/tink-stack/healthz"},
		{target: "/tink-stack/images/a%2Fb.raw", wantPath: "/images/a/b.raw", wantRaw: "/images/a%2Fb.raw"},
		{target: "/tink-stack/latest/meta-data/hostname?x=1", wantPath: "/latest/meta-data/hostname"},
	}
	for _, tc := range tests {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tc.target, nil))
		if gotPath != tc.wantPath || gotRaw != tc.wantRaw {
			t.Errorf("%s served as path %q raw %q; want %q raw %q", tc.target, gotPath, gotRaw, tc.wantPath, tc.wantRaw)
		}
	}
	if withPathPrefix("", h) == nil {
		t.Error("withPathPrefix without a prefix returned nil")
	}
}

// TestPathPrefix runs anvil serve with --path-prefix and asks every kind of
// route with and without the prefix: an ingress may forward either.
func TestPathPrefix(t *testing.T) {
	base, _, _, _, _ := startWith(t, func(c *Config) { c.PathPrefix = "tink-stack" }) // no slashes: normalised
	pre := base + "/tink-stack"

	bin := func(url string) []byte {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d %q; want 200", url, resp.StatusCode, b)
		}
		return b
	}
	plain, prefixed := bin(base+"/ipxe/binary/ipxe.efi"), bin(pre+"/ipxe/binary/ipxe.efi")
	if len(plain) < 1024 || !bytes.Equal(plain, prefixed) {
		t.Errorf("ipxe.efi: %d bytes unprefixed, %d prefixed; want the same bytes", len(plain), len(prefixed))
	}

	for _, path := range []string{"/healthz", "/metrics"} {
		for _, b := range []string{base, pre} {
			if code, body := get(t, b+path); code != http.StatusOK {
				t.Errorf("GET %s%s = %d %q; want 200", b, path, code, body)
			}
		}
	}
	for _, b := range []string{base, pre} {
		if got := post(t, b+"/anvil.v1.HardwareService/List", `{}`); !strings.HasPrefix(got, "{") {
			t.Errorf("POST %s/anvil.v1.HardwareService/List = %q; want a JSON object", b, got)
		}
	}
	// Metadata routes are on the HTTP port too; 127.0.0.1 is no machine's.
	if code, body := get(t, pre+"/2009-04-04/meta-data/hostname"); code != http.StatusNotFound || !strings.Contains(body, "no Hardware has IP 127.0.0.1") {
		t.Errorf("GET prefixed metadata = %d %q; want the metadata service's 404", code, body)
	}
	// "/tink-stack" is served as "/tink-stack/" is: as "/".
	codeBare, _ := get(t, pre)
	codeSlash, _ := get(t, pre+"/")
	codeRoot, _ := get(t, base+"/")
	if codeBare != codeRoot || codeSlash != codeRoot {
		t.Errorf("GET /tink-stack = %d, /tink-stack/ = %d; want both as / (%d)", codeBare, codeSlash, codeRoot)
	}
	if code, _ := get(t, base+"/tink-stackx/healthz"); code != http.StatusNotFound {
		t.Errorf("GET /tink-stackx/healthz = %d; want 404", code)
	}
}

// Smee's script paths are served as Anvil's script routes, on the boot
// path (limited and recorded as script requests), with or without the path
// prefix; a path that only looks like one is not.
func TestSmeeScriptPaths(t *testing.T) {
	base, _, _, _, _ := startWith(t, func(c *Config) { c.PathPrefix = "/tink-stack" })
	const byMAC = `anvil_http_boot_requests_total{code="404",route="/ipxe/script/{mac}/auto.ipxe"}`
	before := metricValue(t, metricsText(t, base), byMAC)
	for _, b := range []string{base, base + "/tink-stack"} {
		for path, want := range map[string]string{
			"/auto.ipxe":                   "no Hardware has IP 127.0.0.1",
			"/52:54:00:12:34:56/auto.ipxe": "no Hardware has MAC 52:54:00:12:34:56",
			"/52-54-00-12-34-56/auto.ipxe": "no Hardware has MAC 52:54:00:12:34:56",
		} {
			if code, body := get(t, b+path); code != http.StatusNotFound || !strings.Contains(body, want) {
				t.Errorf("GET %s%s = %d %q; want the script route's 404 (%s)", b, path, code, body, want)
			}
		}
	}
	if code, body := get(t, base+"/not-a-mac/auto.ipxe"); code != http.StatusNotFound || strings.Contains(body, "no Hardware") {
		t.Errorf("GET /not-a-mac/auto.ipxe = %d %q; want a plain 404, not a script route's", code, body)
	}
	if n := metricValue(t, metricsText(t, base), byMAC) - before; n != 4 {
		t.Errorf("script requests by MAC counted %v times; want 4", n)
	}
}

// metricsText returns the server's /metrics.
func metricsText(t *testing.T, base string) string {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	return body
}

// metricValue returns the value of the series (name with labels, as
// /metrics writes it) in text, 0 when absent.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// TestBootLimits runs anvil serve with small per-client limits behind a
// "proxy" (127.0.0.1 trusted): clients named by X-Forwarded-For are limited
// one by one, a client cannot escape by lying from an untrusted address,
// the answer is 429 with Retry-After, and neither /healthz nor the API is
// limited.
func TestBootLimits(t *testing.T) {
	tftpDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(tftpDir, "small.bin"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _, _, _, _ := startWith(t, func(c *Config) {
		c.TFTPDir = tftpDir
		c.TrustedProxies = []string{"127.0.0.1"}
		c.BootClientRate, c.BootClientBurst = 0.001, 2 // two requests per client, then nothing for the test's life
	})
	file := base + "/ipxe/binary/small.bin"
	before := metricsText(t, base)

	getAs := func(local, client, url string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if client != "" {
			req.Header.Set(clientip.HeaderForwardedFor, client)
		}
		resp, err := clientFrom(local).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	steps := []struct {
		name         string
		local        string // source address of the connection
		client       string // X-Forwarded-For
		url          string
		want         int
		wantRetryMin int
	}{
		{name: "client A 1", local: "127.0.0.1", client: "10.20.0.1", url: file, want: 200},
		{name: "client A 2 (metadata counts too)", local: "127.0.0.1", client: "10.20.0.1", url: base + "/latest/meta-data/hostname", want: 404},
		{name: "client A 3: limited", local: "127.0.0.1", client: "10.20.0.1", url: file, want: 429, wantRetryMin: 1},
		{name: "client A, another boot route: limited", local: "127.0.0.1", client: "10.20.0.1", url: base + "/ipxe/script/auto.ipxe", want: 429, wantRetryMin: 1},
		{name: "client B has its own limit", local: "127.0.0.1", client: "10.20.0.2", url: file, want: 200},
		// 127.0.0.2 is not trusted: its header is ignored, it is one client.
		{name: "untrusted 1", local: "127.0.0.2", client: "10.20.0.3", url: file, want: 200},
		{name: "untrusted 2, another lie", local: "127.0.0.2", client: "10.20.0.4", url: file, want: 200},
		{name: "untrusted 3: limited whatever it claims", local: "127.0.0.2", client: "10.20.0.5", url: file, want: 429, wantRetryMin: 1},
	}
	for _, s := range steps {
		resp := getAs(s.local, s.client, s.url)
		if resp.StatusCode != s.want {
			t.Fatalf("%s: GET %s = %d; want %d", s.name, s.url, resp.StatusCode, s.want)
		}
		if s.wantRetryMin > 0 {
			if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < s.wantRetryMin {
				t.Errorf("%s: Retry-After %q; want at least %d seconds", s.name, resp.Header.Get("Retry-After"), s.wantRetryMin)
			}
		}
	}
	// Client A is out of requests; what is not the boot path still answers it.
	for _, path := range []string{"/healthz", "/metrics"} {
		if resp := getAs("127.0.0.1", "10.20.0.1", base+path); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s as a limited client = %d; want 200", path, resp.StatusCode)
		}
	}
	// /readyz may still say 503 while the engine starts; never 429.
	if resp := getAs("127.0.0.1", "10.20.0.1", base+"/readyz"); resp.StatusCode == http.StatusTooManyRequests {
		t.Errorf("GET /readyz as a limited client = 429; it is not the boot path")
	}
	req, err := http.NewRequest(http.MethodPost, base+"/anvil.v1.HardwareService/List", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(clientip.HeaderForwardedFor, "10.20.0.1")
	resp, err := clientFrom("127.0.0.1").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("API List as a limited client = %d; want 200", resp.StatusCode)
	}

	after := metricsText(t, base)
	series := `anvil_http_boot_limited_total{limit="client_rate"}`
	if d := metricValue(t, after, series) - metricValue(t, before, series); d != 3 {
		t.Errorf("%s went up by %v; want 3", series, d)
	}
	if !strings.Contains(after, "anvil_http_boot_requests_in_flight ") {
		t.Error("/metrics lacks anvil_http_boot_requests_in_flight")
	}
	for _, l := range []string{"rate", "concurrency", "client_concurrency"} {
		if s := `anvil_http_boot_limited_total{limit="` + l + `"}`; !strings.Contains(after, s) {
			t.Errorf("/metrics lacks %s (every limit's series starts at 0)", s)
		}
	}
}

// TestMetadataPortLimited checks that the metadata service's own listener
// shares the boot path's limits and accepts the path prefix.
func TestMetadataPortLimited(t *testing.T) {
	mdLn := listenLocal(t)
	base, _, _, _, _ := startWith(t, func(c *Config) {
		c.DisableMetadata, c.Listeners.Metadata = false, mdLn
		c.PathPrefix = "/tink-stack/"
		c.BootClientRate, c.BootClientBurst = 0.001, 1
	})
	md := "http://" + mdLn.Addr().String()
	if code, _ := get(t, md+"/tink-stack/latest/meta-data/hostname"); code != http.StatusNotFound {
		t.Fatalf("first metadata request = %d; want 404 (127.0.0.1 is no machine's)", code)
	}
	// The limit is shared: the HTTP port's boot path now refuses 127.0.0.1 too.
	for _, url := range []string{md + "/latest/meta-data/hostname", base + "/metadata"} {
		if code, _ := get(t, url); code != http.StatusTooManyRequests {
			t.Errorf("GET %s = %d; want 429", url, code)
		}
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d; want 200", code)
	}
}

// TestAssetsLimited checks that /assets/ — the files, SHA256SUMS and the
// listing — is the boot path: --assets-dir is served there, under the
// per-client limits, and under --path-prefix too.
func TestAssetsLimited(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "flatcar.raw"), []byte("sysext"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _, _, _, _ := startWith(t, func(c *Config) {
		c.AssetsDir = dir
		c.PathPrefix = "/tink-stack/"
		c.BootClientRate, c.BootClientBurst = 0.001, 3 // three requests, then nothing for the test's life
	})
	for _, s := range []struct {
		path string
		want int
		body string
	}{
		{"/assets/flatcar.raw", 200, "sysext"},
		{"/tink-stack/assets/SHA256SUMS", 200, "  flatcar.raw\n"},
		{"/assets/", 200, `"name": "flatcar.raw"`},
		{"/assets/flatcar.raw", 429, ""},
		{"/assets/SHA256SUMS", 429, ""},
	} {
		resp, err := http.Get(base + s.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != s.want || !strings.Contains(string(b), s.body) {
			t.Errorf("GET %s = %d %q; want %d with %q", s.path, resp.StatusCode, b, s.want, s.body)
		}
	}
}
