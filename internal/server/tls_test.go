package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/tlsconf"
)

// tlsServer is a Run with TLS on, on free loopback ports.
type tlsServer struct {
	cfg                 Config
	logs                *syncBuffer
	stop                func() error // ends Run, returns its error
	http, https, grpc   string       // host:port
	httpBase, httpsBase string       // URLs of the HTTP and HTTPS ports
	grpcTLS, grpcH2C    string       // URLs of the gRPC port, with and without TLS
}

// startTLS runs Run with TLS on and cfg's changes, and waits until the
// plain HTTP port answers.
func startTLS(t *testing.T, change func(*Config)) *tlsServer {
	t.Helper()
	s := &tlsServer{logs: newSyncBuffer()}
	s.cfg = Config{
		DataDir:        t.TempDir(),
		Bind:           "127.0.0.1",
		InsecureNoAuth: true, // authentication has its own test (auth_test.go)
		Listeners:      Listeners{HTTP: listenLocal(t), HTTPS: listenLocal(t), GRPC: listenLocal(t)},
		TLS:            true,
		Logger:         slog.New(slog.NewTextHandler(s.logs, nil)),
		// The boot services have their own tests; the HTTP boot routes
		// stay on the HTTP port.
		DisableDHCP: true, DisableTFTP: true, DisableSyslog: true, DisableMetadata: true,
	}
	if change != nil {
		change(&s.cfg)
	}
	s.http = s.cfg.Listeners.HTTP.Addr().String()
	s.https = s.cfg.Listeners.HTTPS.Addr().String()
	s.grpc = s.cfg.Listeners.GRPC.Addr().String()
	s.httpBase, s.httpsBase = "http://"+s.http, "https://"+s.https
	s.grpcTLS, s.grpcH2C = "https://"+s.grpc, "http://"+s.grpc

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s.cfg) }()
	var stopped bool
	var runErr error
	s.stop = func() error {
		if !stopped {
			cancel()
			runErr, stopped = <-done, true
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	for i := 0; ; i++ {
		resp, err := http.Get(s.httpBase + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case err := <-done:
			stopped, runErr = true, err
			t.Fatalf("Run ended during startup: %v\n%s", err, s.logs)
		case <-time.After(10 * time.Millisecond):
		}
		if i > 1000 {
			t.Fatal("server did not start")
		}
	}
}

// client returns an HTTP client that trusts roots and speaks the given
// protocols over TLS (and h2c, when asked).
func client(roots *x509.CertPool, http1, http2, h2c bool) *http.Client {
	var p http.Protocols
	p.SetHTTP1(http1)
	p.SetHTTP2(http2)
	p.SetUnencryptedHTTP2(h2c)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Protocols:       &p,
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

func manifests(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, f := range []string{"hardware.yaml", "template.yaml", "workflow.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../examples", f))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.String()
}

// bootScript waits for the example machine's boot environment script on
// the plain HTTP port (the workflow engine renders the workflow first).
func bootScript(t *testing.T, httpBase string) string {
	t.Helper()
	url := httpBase + "/ipxe/script/3c:ec:ef:12:34:07/auto.ipxe"
	var body string
	for range 1000 {
		_, body = get(t, url)
		if strings.Contains(body, "grpc_authority=") {
			return body
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("GET %s: no boot environment script:\n%s", url, body)
	return ""
}

func hasArgs(t *testing.T, script string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(script, " "+w+" ") {
			t.Errorf("boot script lacks %q:\n%s", w, script)
		}
	}
}

// TestTLS runs the server with a generated CA and calls the API with every
// protocol a client uses, trusting the CA that `anvil tls ca` exports.
func TestTLS(t *testing.T) {
	s := startTLS(t, nil)
	caPEM, err := tlsconf.ReadCA(TLSDir(s.cfg.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the exported CA is not PEM")
	}
	ctx := context.Background()

	t.Run("fingerprint in the log", func(t *testing.T) {
		blk, _ := pem.Decode(caPEM)
		if want := "ca_sha256=" + tlsconf.Fingerprint(blk.Bytes); !strings.Contains(s.logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, s.logs)
		}
		// The listeners are logged one after the other as they start
		// serving; the HTTP port may answer before the HTTPS line is out.
		for i := 0; !strings.Contains(s.logs.String(), "service=https addr="+s.https); i++ {
			if i == 500 {
				t.Errorf("log lacks the HTTPS listener:\n%s", s.logs)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("connect JSON over HTTPS, HTTP/1.1", func(t *testing.T) {
		c := client(roots, true, false, false)
		m := anvilv1connect.NewManifestServiceClient(c, s.httpsBase, connect.WithProtoJSON())
		if _, err := m.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{Source: "examples", Content: manifests(t)})); err != nil {
			t.Fatalf("Apply over HTTPS: %v", err)
		}
		resp, err := c.Post(s.httpsBase+"/anvil.v1.HardwareService/List", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/1.1" || !strings.Contains(string(body), "rack1-node07") {
			t.Errorf("POST List = %d %s %s; want 200 HTTP/1.1 listing rack1-node07", resp.StatusCode, resp.Proto, body)
		}
	})
	t.Run("gRPC over HTTPS, HTTP/2", func(t *testing.T) {
		hw := anvilv1connect.NewHardwareServiceClient(client(roots, false, true, false), s.httpsBase, connect.WithGRPC())
		list, err := hw.List(ctx, connect.NewRequest(&v1.ListRequest{}))
		if err != nil || len(list.Msg.GetItems()) != 1 {
			t.Errorf("List = %v, %v; want one Hardware", list, err)
		}
	})
	t.Run("gRPC port with TLS", func(t *testing.T) {
		hw := anvilv1connect.NewHardwareServiceClient(client(roots, false, true, false), s.grpcTLS, connect.WithGRPC())
		if _, err := hw.List(ctx, connect.NewRequest(&v1.ListRequest{})); err != nil {
			t.Errorf("List over connect-go gRPC: %v", err)
		}
		conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(roots, "")))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var list v1.HardwareList
		if err := conn.Invoke(ctx, "/anvil.v1.HardwareService/List", &v1.ListRequest{}, &list); err != nil {
			t.Errorf("List over grpc-go with TLS: %v", err)
		}
	})
	t.Run("gRPC port refuses h2c", func(t *testing.T) {
		hw := anvilv1connect.NewHardwareServiceClient(client(nil, false, false, true), s.grpcH2C, connect.WithGRPC())
		if _, err := hw.List(ctx, connect.NewRequest(&v1.ListRequest{})); err == nil {
			t.Error("List over h2c on the TLS gRPC port succeeded")
		}
	})
	t.Run("a client without the CA refuses", func(t *testing.T) {
		_, err := client(nil, true, true, false).Get(s.httpsBase + "/healthz")
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("GET without the CA = %v; want an unknown authority", err)
		}
	})
	t.Run("plain HTTP port unchanged", func(t *testing.T) {
		resp, err := http.Post(s.httpBase+"/anvil.v1.HardwareService/List", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST List on the HTTP port = %d; want 200", resp.StatusCode)
		}
		h2c := anvilv1connect.NewHardwareServiceClient(client(nil, false, false, true), s.httpBase, connect.WithGRPC())
		if _, err := h2c.List(ctx, connect.NewRequest(&v1.ListRequest{})); err != nil {
			t.Errorf("gRPC over h2c on the HTTP port: %v", err)
		}
	})
	t.Run("boot script", func(t *testing.T) {
		// Hook's worker dials the gRPC port with TLS and cannot know the
		// generated CA; Anvil's agent calls the plain HTTP port.
		hasArgs(t, bootScript(t, s.httpBase), "grpc_authority="+s.grpc, "tinkerbell_tls=true",
			"tinkerbell_insecure_tls=true", "anvil.server="+s.httpBase)
	})
	t.Run("curl", func(t *testing.T) {
		curl := testtool.RequireBinary(t, "curl", "curl")
		caFile := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(curl, "-sS", "--cacert", caFile, s.httpsBase+"/healthz").CombinedOutput()
		if err != nil || string(out) != "ok\n" {
			t.Errorf("curl --cacert /healthz = %q, %v; want ok", out, err)
		}
		out, err = exec.Command(curl, "-sS", "--cacert", caFile, "-H", "Content-Type: application/json", "-d", "{}",
			s.httpsBase+"/anvil.v1.HardwareService/List").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "rack1-node07") {
			t.Errorf("curl --cacert List = %q, %v; want rack1-node07", out, err)
		}
		// 60: "Peer certificate cannot be authenticated with known CA
		// certificates".
		err = exec.Command(curl, "-sS", "-o", "/dev/null", s.httpsBase+"/healthz").Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 60 {
			t.Errorf("curl without --cacert = %v; want exit status 60", err)
		}
	})

	// Restart: the same CA, the same certificate.
	cert := peerCert(t, s.https)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	again := startTLS(t, func(c *Config) { c.DataDir = s.cfg.DataDir })
	if got := peerCert(t, again.https); !got.Equal(cert) {
		t.Error("a restart served another certificate; want the one in DATA_DIR/tls")
	}
}

// peerCert returns the certificate served at addr.
func peerCert(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test compares certificates
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func TestTLSGRPCPlaintext(t *testing.T) {
	s := startTLS(t, func(c *Config) { c.GRPCPlaintext = true })
	hw := anvilv1connect.NewHardwareServiceClient(client(nil, false, false, true), s.grpcH2C, connect.WithGRPC())
	if _, err := hw.List(context.Background(), connect.NewRequest(&v1.ListRequest{})); err != nil {
		t.Errorf("List over h2c on the gRPC port: %v", err)
	}
	m := anvilv1connect.NewManifestServiceClient(client(nil, false, false, true), s.grpcH2C, connect.WithGRPC())
	if _, err := m.Apply(context.Background(), connect.NewRequest(&v1.ApplyRequest{Source: "examples", Content: manifests(t)})); err != nil {
		t.Fatal(err)
	}
	hasArgs(t, bootScript(t, s.httpBase), "tinkerbell_tls=false", "tinkerbell_insecure_tls=false")
	if _, err := os.Stat(TLSDir(s.cfg.DataDir)); err != nil {
		t.Errorf("no generated CA for the HTTPS port: %v", err)
	}
}

// TestTLSFromFiles serves the operator's certificate; the boot
// environment is told to verify it.
func TestTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, certFile, keyFile, "anvil.example.org")
	s := startTLS(t, func(c *Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	for _, addr := range []string{s.https, s.grpc} {
		if got := peerCert(t, addr).Subject.CommonName; got != "anvil.example.org" {
			t.Errorf("%s serves %q; want the certificate from --tls-cert", addr, got)
		}
	}
	if _, err := os.Stat(TLSDir(s.cfg.DataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a CA was generated although --tls-cert is given (%v)", err)
	}
	m := anvilv1connect.NewManifestServiceClient(http.DefaultClient, s.httpBase)
	if _, err := m.Apply(context.Background(), connect.NewRequest(&v1.ApplyRequest{Source: "examples", Content: manifests(t)})); err != nil {
		t.Fatal(err)
	}
	hasArgs(t, bootScript(t, s.httpBase), "tinkerbell_tls=true", "tinkerbell_insecure_tls=false")
}

// TestNoTLS: the zero Config and `anvil serve --no-tls` open no HTTPS port
// and keep gRPC on h2c (TestServe calls it so).
func TestNoTLS(t *testing.T) {
	s := startTLS(t, func(c *Config) { c.TLS = false })
	if strings.Contains(s.logs.String(), "service=https") || strings.Contains(s.logs.String(), "TLS on") {
		t.Errorf("an HTTPS listener or TLS with TLS off:\n%s", s.logs)
	}
	hw := anvilv1connect.NewHardwareServiceClient(client(nil, false, false, true), s.grpcH2C, connect.WithGRPC())
	if _, err := hw.List(context.Background(), connect.NewRequest(&v1.ListRequest{})); err != nil {
		t.Errorf("List over h2c on the gRPC port: %v", err)
	}
	if _, err := os.Stat(TLSDir(s.cfg.DataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a CA was generated with TLS off (%v)", err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "certificate with TLS off", cfg: Config{TLSCertFile: "a.crt", TLSKeyFile: "a.key"}, want: "drop --no-tls"},
		{name: "certificate without key", cfg: Config{TLS: true, TLSCertFile: "a.crt"}, want: "go together"},
		{name: "SANs with a certificate", cfg: Config{TLS: true, TLSCertFile: "a.crt", TLSKeyFile: "a.key", TLSSANs: []string{"x"}}, want: "--tls-san"},
		{name: "missing files", cfg: Config{TLS: true, TLSCertFile: "/nonexistent/a.crt", TLSKeyFile: "/nonexistent/a.key"}, want: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			_, err := newTLSConfig(tc.cfg, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("newTLSConfig = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestTLSHosts(t *testing.T) {
	got := tlsHosts(Config{Bind: "0.0.0.0", PublicIP: "192.0.2.10", TLSSANs: []string{"pxe.example.org", "198.51.100.1"}})
	want := []string{"192.0.2.10", "pxe.example.org", "198.51.100.1"}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.(*net.IPNet).IP)
		if ip = ip.Unmap(); !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			want = append(want, ip.String())
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("tlsHosts = %v; lacks %s", got, w)
		}
	}
	for _, h := range got {
		if ip, err := netip.ParseAddr(h); err == nil && ip.IsLoopback() {
			t.Errorf("tlsHosts = %v; has loopback %s (tlsconf adds those)", got, h)
		}
	}
	if got := tlsHosts(Config{Bind: "192.0.2.20"}); !slices.Contains(got, "192.0.2.20") {
		t.Errorf("tlsHosts with --bind 192.0.2.20 = %v; lacks it", got)
	}
}

// writePair writes a self-signed certificate for name and its key.
func writePair(t *testing.T, certFile, keyFile, name string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{name}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
}
