package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/metadata"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

// Two machines on loopback addresses (Linux routes all of 127/8 to lo), so
// that each can call from its own.
const metadataFixtures = `
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: node1}
spec:
  userData: "#cloud-config\nhostname: node1\n"
  metadata:
    instance:
      hostname: node1
      storage: {disks: [{device: /dev/vda}]}
  interfaces:
    - dhcp: {mac: "02:00:00:00:00:01", ip: {address: 127.0.0.1}}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: node2}
spec:
  metadata: {instance: {hostname: node2}}
  interfaces:
    - dhcp: {mac: "02:00:00:00:00:02", ip: {address: 127.0.0.2}}
`

// clientFrom returns an HTTP client whose connections come from local.
func clientFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

func getFrom(t *testing.T, local, url string) (int, string) {
	t.Helper()
	resp, err := clientFrom(local).Get(url)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", url, local, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func post(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s = %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// TestMetadataService: `anvil serve` answers metadata on its own port and
// on the HTTP port, each machine its own, and files the requests in the
// machines' records.
func TestMetadataService(t *testing.T) {
	httpLn, mdLn := listenLocal(t), listenLocal(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := newSyncBuffer()
	go func() {
		done <- Run(ctx, Config{DataDir: t.TempDir(), Bind: "127.0.0.1", InsecureNoAuth: true, DisableGRPC: true,
			Listeners: Listeners{HTTP: httpLn, Metadata: mdLn}, DisableDHCP: true, DisableTFTP: true, DisableSyslog: true,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	base, md := "http://"+httpLn.Addr().String(), "http://"+mdLn.Addr().String()
	for i := 0; ; i++ {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 500 {
			t.Fatal("server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	apply, err := json.Marshal(map[string]string{"source": "fixtures.yaml", "content": metadataFixtures})
	if err != nil {
		t.Fatal(err)
	}
	post(t, base+"/anvil.v1.ManifestService/Apply", string(apply))

	for _, b := range []struct{ name, url string }{{"metadata port", md}, {"HTTP port", base}} {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range []struct {
				from, path string
				wantCode   int
				want       string
			}{
				{"127.0.0.1", "/2009-04-04/meta-data/hostname", 200, "node1"},
				{"127.0.0.2", "/2009-04-04/meta-data/hostname", 200, "node2"},
				{"127.0.0.1", "/latest/user-data", 200, "#cloud-config\nhostname: node1\n"},
				{"127.0.0.2", "/latest/user-data", 200, ""},
				{"127.0.0.1", "/metadata", 200, `{"metadata":{"instance":{"hostname":"node1","storage":{"disks":[{"device":"/dev/vda"}]}}}}`},
				{"127.0.0.3", "/metadata", 404, "anvil metadata: no Hardware has IP 127.0.0.3 in spec.interfaces[].dhcp.ip.address, so there is no metadata for this caller\n"},
			} {
				code, body := getFrom(t, tc.from, b.url+tc.path)
				if code != tc.wantCode || body != tc.want {
					t.Errorf("GET %s from %s = %d %q; want %d %q", tc.path, tc.from, code, body, tc.wantCode, tc.want)
				}
			}
		})
	}
	// The metadata port serves metadata only.
	if code, _ := getFrom(t, "127.0.0.1", md+"/healthz"); code != http.StatusNotFound {
		t.Errorf("GET /healthz on the metadata port = %d; want 404", code)
	}
	if !strings.Contains(logs.String(), "service=metadata addr="+mdLn.Addr().String()) {
		t.Errorf("no listening line for the metadata port:\n%s", logs)
	}

	// Each request is in its machine's record.
	for i := 0; ; i++ {
		out := post(t, base+"/anvil.v1.LogService/GetLogs", `{"hardware":"node2"}`)
		if strings.Contains(out, "GET /2009-04-04/meta-data/hostname: 200") {
			if strings.Contains(out, "node1") || strings.Contains(out, "user-data: 200, 30 bytes") {
				t.Errorf("node2's record has node1's requests:\n%s", out)
			}
			break
		}
		if i > 500 {
			t.Fatalf("node2's record never showed its metadata requests:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The metrics count them by route and outcome.
	_, body := getFrom(t, "127.0.0.1", base+"/metrics")
	for _, want := range []string{
		`anvil_metadata_requests_total{outcome="served",route="/{version}/meta-data/hostname"}`,
		`anvil_metadata_requests_total{outcome="unknown-ip",route="/metadata"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestMetadataPortErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := Config{Bind: "127.0.0.1", InsecureNoAuth: true, DisableHTTP: true, DisableGRPC: true, DisableDHCP: true, DisableTFTP: true,
		DisableSyslog: true, Logger: quiet}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{name: "port busy", cfg: func(c *Config) { c.MetadataPort = busy.Addr().(*net.TCPAddr).Port },
			want: "--metadata-port, or switch the listener off with --no-metadata"},
		{name: "bad trusted proxy", cfg: func(c *Config) {
			c.DisableMetadata = true
			c.TrustedProxies = []string{"10.0.0.0/8", "proxy.lab"}
		}, want: `--trusted-proxies: trusted proxy "proxy.lab" is neither an IP address nor a CIDR prefix`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.DataDir = t.TempDir()
			tc.cfg(&cfg)
			err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestStoreFinder: the Finder over the store's IP index answers the one
// Hardware with the address, and refuses an address two Hardware claim.
func TestStoreFinder(t *testing.T) {
	st, err := bolt.Open(t.TempDir()+"/anvil.db", bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	mk := func(ns, name, ip string) {
		h := &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name}, Spec: model.HardwareSpec{
			Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: "02:00:00:00:00:01", IP: &model.IP{Address: ip}}}}}}
		if _, err := st.Create(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	mk("default", "a", "10.0.0.1")
	mk("default", "b", "10.0.0.2")
	mk("lab", "b", "10.0.0.2")
	f := storeFinder{st}
	for _, tc := range []struct {
		ip      string
		want    string
		wantErr error
	}{
		{ip: "10.0.0.1", want: "default/a"},
		{ip: "::ffff:10.0.0.1", want: "default/a"},
		{ip: "10.0.0.2", wantErr: metadata.ErrAmbiguousIP},
		{ip: "10.0.0.3", wantErr: metadata.ErrUnknownIP},
	} {
		hw, err := f.HardwareByIP(ctx, netip.MustParseAddr(tc.ip))
		switch {
		case tc.wantErr != nil:
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("HardwareByIP(%s) = %v, %v; want %v", tc.ip, hw, err, tc.wantErr)
			}
		case err != nil || hw.Key() != tc.want:
			t.Errorf("HardwareByIP(%s) = %v, %v; want %s", tc.ip, hw, err, tc.want)
		}
	}
	if _, err := f.HardwareByIP(ctx, netip.MustParseAddr("10.0.0.2")); err == nil ||
		!strings.Contains(err.Error(), "default/b, lab/b") {
		t.Errorf("ambiguous error %v does not name both Hardware", err)
	}
}

// BenchmarkMetadata measures one EC2-style item and the /metadata document
// through the handler and the store-backed Finder with 10,000 Hardware.
func BenchmarkMetadata(b *testing.B) {
	st, err := bolt.Open(b.TempDir()+"/anvil.db", bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const n = 10000
	objs := make([]model.Object, 0, n)
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String()
		mac := net.HardwareAddr{2, 0, 0, 0, byte(i >> 8), byte(i)}.String()
		objs = append(objs, &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "m" + strconv.Itoa(i)}, Spec: model.HardwareSpec{
			Metadata:   &model.HardwareMetadata{Instance: &model.MetadataInstance{Hostname: "m" + strconv.Itoa(i), SSHKeys: []string{"ssh-ed25519 AAAA k"}}},
			Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: mac, IP: &model.IP{Address: ip}}}}}})
	}
	if _, err := st.Apply(context.Background(), objs); err != nil {
		b.Fatal(err)
	}
	h, err := metadata.New(metadata.Config{Finder: storeFinder{st}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	for _, path := range []string{"/2009-04-04/meta-data/hostname", "/metadata"} {
		b.Run(path, func(b *testing.B) {
			r, err := http.NewRequest(http.MethodGet, path, nil)
			if err != nil {
				b.Fatal(err)
			}
			r.RemoteAddr = "10.1.20.7:40000"
			for b.Loop() {
				w := &discardWriter{h: http.Header{}}
				h.ServeHTTP(w, r)
				if w.code != http.StatusOK {
					b.Fatalf("GET %s = %d", path, w.code)
				}
			}
		})
	}
}

type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
