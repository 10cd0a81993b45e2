package tlsconf

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
)

// fakeClock is a clock the test moves.
type fakeClock = clock.Fake

func newFakeClock() *fakeClock { return clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) }

// syncBuffer is a log sink safe for a server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// selfSigned returns a PEM certificate and key for cn, valid now.
func selfSigned(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// replace writes data to name the way deployment tools do (a new file
// renamed over the old one) and moves its modification time forward, so
// that the change shows whatever the file system's timestamp granularity.
func replace(t *testing.T, name string, data []byte, mod time.Time) {
	t.Helper()
	tmp := name + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, mod, mod); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// servedCN makes a new TLS handshake with addr and returns the common name
// of the certificate the server presented.
func servedCN(t *testing.T, addr string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test looks at which certificate is served
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestFileSourceReload replaces the files under a running HTTPS server: the
// next handshake after the reload interval sees the new certificate; bad
// new files are logged once and the last good pair keeps serving.
func TestFileSourceReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	mod := time.Now().Add(-time.Hour)
	write := func(certPEM, keyPEM []byte) {
		mod = mod.Add(time.Second)
		replace(t, certFile, certPEM, mod)
		replace(t, keyFile, keyPEM, mod)
	}
	certA, keyA := selfSigned(t, "a")
	certB, keyB := selfSigned(t, "b")
	certC, keyC := selfSigned(t, "c")
	write(certA, keyA)

	clock := newFakeClock()
	logs := &syncBuffer{}
	src, err := NewFileSource(FileConfig{CertFile: certFile, KeyFile: keyFile, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), TLSConfig: ServerConfig(src.GetCertificate),
		ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	defer func() {
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS = %v", err)
		}
	}()
	addr := ln.Addr().String()

	if got := servedCN(t, addr); got != "a" {
		t.Fatalf("served %q; want a", got)
	}

	write(certB, keyB)
	if got := servedCN(t, addr); got != "a" {
		t.Errorf("within the reload interval: served %q; want a (the files are looked at once a second)", got)
	}
	clock.Advance(DefaultReloadInterval)
	if got := servedCN(t, addr); got != "b" {
		t.Fatalf("after replacing the files: served %q; want b", got)
	}

	bad := []struct {
		name          string
		certPEM, keyM []byte
	}{
		{name: "half-written certificate", certPEM: certC[:len(certC)/2], keyM: keyC},
		{name: "key of another certificate", certPEM: certC, keyM: keyA},
		{name: "empty files", certPEM: nil, keyM: nil},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			before := strings.Count(logs.String(), "cannot be used")
			write(tc.certPEM, tc.keyM)
			for range 3 {
				clock.Advance(DefaultReloadInterval)
				if got := servedCN(t, addr); got != "b" {
					t.Fatalf("served %q; want b, the last good pair", got)
				}
			}
			if n := strings.Count(logs.String(), "cannot be used") - before; n != 1 {
				t.Errorf("%d warnings for one bad change; want 1:\n%s", n, logs)
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		if err := os.Remove(keyFile); err != nil {
			t.Fatal(err)
		}
		clock.Advance(DefaultReloadInterval)
		if got := servedCN(t, addr); got != "b" {
			t.Fatalf("served %q; want b", got)
		}
	})

	write(certC, keyC)
	clock.Advance(DefaultReloadInterval)
	if got := servedCN(t, addr); got != "c" {
		t.Errorf("after a good pair again: served %q; want c", got)
	}
	if !strings.Contains(logs.String(), "TLS certificate reloaded") {
		t.Errorf("no reload line in the log:\n%s", logs)
	}
}

func TestNewFileSourceErrors(t *testing.T) {
	dir := t.TempDir()
	certA, keyA := selfSigned(t, "a")
	_, keyB := selfSigned(t, "b")
	files := map[string][]byte{"a.crt": certA, "a.key": keyA, "b.key": keyB, "garbage": []byte("not PEM\n")}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		cert, key string
		want      string
	}{
		{name: "no key", cert: "a.crt", want: "both required"},
		{name: "missing file", cert: "a.crt", key: "missing.key", want: "no such file"},
		{name: "key of another certificate", cert: "a.crt", key: "b.key", want: "does not match"},
		{name: "not PEM", cert: "garbage", key: "a.key", want: "failed to find any PEM data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := FileConfig{CertFile: filepath.Join(dir, tc.cert), Logger: slog.New(slog.DiscardHandler)}
			if tc.key != "" {
				cfg.KeyFile = filepath.Join(dir, tc.key)
			}
			_, err := NewFileSource(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewFileSource = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestServerConfig checks the protocol floor and ALPN with a real
// handshake.
func TestServerConfig(t *testing.T) {
	certPEM, keyPEM := selfSigned(t, "a")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ServerConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil })
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return // a refused TLS 1.1 client: checked on its side
				}
			}()
		}
	}()
	dial := func(c *tls.Config) (tls.ConnectionState, error) {
		c.InsecureSkipVerify = true
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), c)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer conn.Close()
		return conn.ConnectionState(), nil
	}
	for _, proto := range []string{"h2", "http/1.1"} {
		st, err := dial(&tls.Config{NextProtos: []string{proto}})
		if err != nil || st.NegotiatedProtocol != proto {
			t.Errorf("ALPN %s: negotiated %q, %v; want %s", proto, st.NegotiatedProtocol, err, proto)
		}
	}
	if _, err := dial(&tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 handshake succeeded; want TLS 1.2 at least")
	}
}

// TestFileSourceForcedReload: a pair rewritten with the old modification
// time and size looks unchanged, so only Reload (SIGHUP) serves it; a pair
// that cannot be used is Reload's error, and the last good one keeps
// serving.
func TestFileSourceForcedReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	mod := time.Now().Add(-time.Hour)
	certA, keyA := selfSigned(t, "a")
	certB, keyB := selfSigned(t, "b")
	for i := 0; len(certB) != len(certA) || len(keyB) != len(keyA); i++ { // ECDSA signatures vary in length
		if i == 100 {
			t.Fatal("no certificate of the same size")
		}
		certB, keyB = selfSigned(t, "b")
	}
	replace(t, certFile, certA, mod)
	replace(t, keyFile, keyA, mod)
	clock := newFakeClock()
	src, err := NewFileSource(FileConfig{CertFile: certFile, KeyFile: keyFile, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		t.Helper()
		c, err := src.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.Subject.CommonName
	}
	replace(t, certFile, certB, mod)
	replace(t, keyFile, keyB, mod)
	clock.Advance(DefaultReloadInterval)
	if got := cn(); got != "a" {
		t.Fatalf("the rewrite is seen without Reload (served %q): this test shows nothing", got)
	}
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := cn(); got != "b" {
		t.Errorf("after Reload: served %q; want b", got)
	}
	replace(t, keyFile, keyA, mod)
	if err := src.Reload(); err == nil || !strings.Contains(err.Error(), "still serving the previous certificate") {
		t.Errorf("Reload of a key of another certificate = %v; want an error", err)
	}
	clock.Advance(DefaultReloadInterval)
	if got := cn(); got != "b" {
		t.Errorf("after a bad Reload: served %q; want b", got)
	}
}
