package tlsconf

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func generated(t *testing.T, dir string, clock *fakeClock, hosts ...string) *GeneratedSource {
	t.Helper()
	g, err := NewGeneratedSource(GeneratedConfig{Dir: dir, Hosts: hosts, Hostname: "forge1", Clock: clock,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// verify checks that leaf chains to ca for host at the clock's time.
func verify(t *testing.T, leaf, ca *x509.Certificate, host string, now time.Time) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: now}); err != nil {
		t.Errorf("server certificate for %s: %v", host, err)
	}
}

func TestGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	clock := newFakeClock()
	g := generated(t, dir, clock, "10.0.0.1", "anvil.example.org", "0.0.0.0", "fe80::1%eth0", "")
	ca, leaf := g.CA(), g.Certificate().Leaf

	t.Run("CA", func(t *testing.T) {
		if got, want := ca.Subject.CommonName, "Anvil CA forge1"; got != want {
			t.Errorf("CA name = %q; want %q", got, want)
		}
		key, ok := ca.PublicKey.(*ecdsa.PublicKey)
		if !ok || key.Curve != elliptic.P256() {
			t.Errorf("CA key = %T; want ECDSA P-256", ca.PublicKey)
		}
		if !ca.IsCA || !ca.MaxPathLenZero {
			t.Errorf("CA IsCA = %t, MaxPathLenZero = %t; want both", ca.IsCA, ca.MaxPathLenZero)
		}
		if got := ca.NotAfter.Sub(clock.Now()); got != CALifetime {
			t.Errorf("CA valid for %s; want %s", got, CALifetime)
		}
		if !bytes.Equal(g.CAPEM(), mustRead(t, filepath.Join(dir, CAFile))) {
			t.Error("CAPEM differs from ca.pem")
		}
	})
	t.Run("server certificate", func(t *testing.T) {
		if got := leaf.NotAfter.Sub(clock.Now()); got != ServerLifetime {
			t.Errorf("server certificate valid for %s; want %s", got, ServerLifetime)
		}
		if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
			t.Errorf("ExtKeyUsage = %v; want server auth", leaf.ExtKeyUsage)
		}
		want := []string{"localhost", "forge1", "anvil.example.org", "127.0.0.1", "::1", "10.0.0.1"}
		if got := sans(leaf); !reflect.DeepEqual(got, want) {
			t.Errorf("SANs = %v; want %v", got, want)
		}
		for _, h := range want {
			verify(t, leaf, ca, h, clock.Now())
		}
	})
	t.Run("file modes", func(t *testing.T) {
		for name, want := range map[string]fs.FileMode{CAFile: 0o644, CAKeyFile: 0o600, ServerFile: 0o644, ServerKeyFile: 0o600} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("%s mode = %v; want %v", name, got, want)
			}
		}
	})
	t.Run("ReadCA", func(t *testing.T) {
		got, err := ReadCA(dir)
		if err != nil || !bytes.Equal(got, g.CAPEM()) {
			t.Errorf("ReadCA = %q, %v; want the CA's PEM", got, err)
		}
		if _, err := ReadCA(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadCA of an empty directory = %v; want ErrNotExist", err)
		}
	})
	t.Run("fingerprint", func(t *testing.T) {
		fp := Fingerprint(ca.Raw)
		if len(fp) != 32*3-1 || strings.ToUpper(fp) != fp || strings.Count(fp, ":") != 31 {
			t.Errorf("Fingerprint = %q; want 32 upper-case hex pairs joined by colons", fp)
		}
	})
}

func TestGenerateReuse(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	first := generated(t, dir, clock, "10.0.0.1", "10.0.0.2")
	files := readAll(t, dir)

	tests := []struct {
		name  string
		after time.Duration
		hosts []string
	}{
		{name: "restart, same hosts", hosts: []string{"10.0.0.1", "10.0.0.2"}},
		{name: "a host fewer", hosts: []string{"10.0.0.2"}},
		{name: "hosts in another order and spelling", hosts: []string{"10.0.0.2", "::ffff:10.0.0.1", "FORGE1."}},
		{name: "31 days before the end", after: ServerLifetime - 31*24*time.Hour, hosts: []string{"10.0.0.1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClock()
			c.Set(clock.Now().Add(tc.after))
			g := generated(t, dir, c, tc.hosts...)
			if !bytes.Equal(g.Certificate().Leaf.Raw, first.Certificate().Leaf.Raw) {
				t.Error("the server certificate was reissued; want the one on disk")
			}
			if !reflect.DeepEqual(readAll(t, dir), files) {
				t.Error("files in the directory changed")
			}
		})
	}
}

func TestGenerateReissue(t *testing.T) {
	tests := []struct {
		name    string
		after   time.Duration
		hosts   []string
		prepare func(t *testing.T, dir string)
		why     string
	}{
		{name: "29 days before the end", after: ServerLifetime - 29*24*time.Hour, why: "expires within 30 days"},
		{name: "expired", after: ServerLifetime + time.Hour, why: "expires within 30 days"},
		{name: "a new address", hosts: []string{"10.0.0.1", "192.0.2.7"}, why: "does not cover 192.0.2.7"},
		{name: "a new name", hosts: []string{"10.0.0.1", "pxe.example.org"}, why: "does not cover pxe.example.org"},
		{name: "key missing", why: "there is none", prepare: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, ServerKeyFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "signed by another CA", why: "not signed by the CA", prepare: func(t *testing.T, dir string) {
			other := t.TempDir()
			generated(t, other, newFakeClock(), "10.0.0.1")
			for _, name := range []string{ServerFile, ServerKeyFile} {
				if err := os.WriteFile(filepath.Join(dir, name), mustRead(t, filepath.Join(other, name)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			first := generated(t, dir, clock, "10.0.0.1")
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			hosts := tc.hosts
			if hosts == nil {
				hosts = []string{"10.0.0.1"}
			}
			clock.Advance(tc.after)
			logs := &syncBuffer{}
			g, err := NewGeneratedSource(GeneratedConfig{Dir: dir, Hosts: hosts, Hostname: "forge1", Clock: clock,
				Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(g.CA().Raw, first.CA().Raw) {
				t.Fatal("the CA changed; want the same CA for ever")
			}
			leaf := g.Certificate().Leaf
			if bytes.Equal(leaf.Raw, first.Certificate().Leaf.Raw) {
				t.Fatal("the server certificate was not reissued")
			}
			if !strings.Contains(logs.String(), tc.why) {
				t.Errorf("log does not say %q:\n%s", tc.why, logs)
			}
			for _, h := range hosts {
				verify(t, leaf, g.CA(), h, clock.Now())
			}
			if got := leaf.NotAfter.Sub(clock.Now()); got != ServerLifetime {
				t.Errorf("reissued certificate valid for %s; want %s", got, ServerLifetime)
			}
			// And it is what the next start finds.
			again := generated(t, dir, clock, hosts...)
			if !bytes.Equal(again.Certificate().Leaf.Raw, leaf.Raw) {
				t.Error("the next start reissued again")
			}
		})
	}
}

// TestGenerateRenewWhileServing: a server running for 11 months gets a new
// certificate at a handshake, without a restart.
func TestGenerateRenewWhileServing(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	g := generated(t, dir, clock, "10.0.0.1")
	old := g.Certificate()

	clock.Advance(ServerLifetime - 31*24*time.Hour)
	if got, _ := g.GetCertificate(nil); got != old {
		t.Fatal("reissued 31 days before the end; want the same certificate")
	}
	clock.Advance(2 * 24 * time.Hour)
	got, err := g.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got == old || !got.Leaf.NotAfter.After(old.Leaf.NotAfter) {
		t.Fatalf("29 days before the end: certificate until %s; want a new one", got.Leaf.NotAfter)
	}
	verify(t, got.Leaf, g.CA(), "10.0.0.1", clock.Now())
	onDisk, err := os.ReadFile(filepath.Join(dir, ServerFile))
	if err != nil {
		t.Fatal(err)
	}
	if leaf, err := parseCertPEM(onDisk); err != nil || !bytes.Equal(leaf.Raw, got.Leaf.Raw) {
		t.Errorf("server.pem holds another certificate (%v); want the reissued one", err)
	}
	if again, _ := g.GetCertificate(nil); again != got {
		t.Error("the next handshake reissued again")
	}
}

// TestGenerateCAErrors: a CA that is half there, broken or expired is
// never replaced (clients trust it); the error says what to do.
func TestGenerateCAErrors(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, dir string)
		after   time.Duration
		want    string
	}{
		{name: "key missing", want: "move", prepare: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "certificate broken", want: "load the CA", prepare: func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, CAFile), []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "expired", after: CALifetime, want: "expired"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			generated(t, dir, clock)
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			before := readAll(t, dir)
			clock.Advance(tc.after)
			_, err := NewGeneratedSource(GeneratedConfig{Dir: dir, Hostname: "forge1", Clock: clock,
				Logger: slog.New(slog.DiscardHandler)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewGeneratedSource = %v; want an error containing %q", err, tc.want)
			}
			if !reflect.DeepEqual(readAll(t, dir), before) {
				t.Error("files in the directory changed")
			}
		})
	}
}

// TestGenerateCAEndsFirst: near the CA's end the server certificate ends
// with it, and handshakes do not reissue it again and again.
func TestGenerateCAEndsFirst(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	generated(t, dir, clock)
	clock.Advance(CALifetime - 20*24*time.Hour)
	g := generated(t, dir, clock)
	cert := g.Certificate()
	if !cert.Leaf.NotAfter.Equal(g.CA().NotAfter) {
		t.Errorf("server certificate until %s; want the CA's end %s", cert.Leaf.NotAfter, g.CA().NotAfter)
	}
	if got, _ := g.GetCertificate(nil); got != cert {
		t.Error("a handshake reissued a certificate that cannot last longer")
	}
}

func TestNormaliseHosts(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{name: "duplicates", in: []string{"a", "A", "a."}, want: []string{"a"}},
		{name: "mapped IPv4", in: []string{"::ffff:10.0.0.1", "10.0.0.1"}, want: []string{"10.0.0.1"}},
		{name: "unspecified and zoned", in: []string{"0.0.0.0", "::", "fe80::1%eth0", " "}, want: nil},
		{name: "IPv6 canonical", in: []string{"2001:DB8:0:0::1"}, want: []string{"2001:db8::1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := normaliseHosts(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("normaliseHosts(%q) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readAll returns every file of dir by name.
func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range entries {
		m[e.Name()] = string(mustRead(t, filepath.Join(dir, e.Name())))
	}
	return m
}
