package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvilproj/anvil/internal/atomicfile"
	"github.com/anvilproj/anvil/internal/clock"
)

// Lifetimes of what NewGeneratedSource issues.
const (
	// CALifetime is the generated CA's validity: clients trust it once.
	CALifetime = 10 * 365 * 24 * time.Hour
	// ServerLifetime is the server certificate's validity.
	ServerLifetime = 365 * 24 * time.Hour
	// RenewBefore: a server certificate this close to its end is reissued.
	RenewBefore = 30 * 24 * time.Hour

	// backdate covers clocks a little behind the server's.
	backdate = time.Hour
	// retryIssue spaces out attempts to reissue that failed (a full disk).
	retryIssue = time.Hour
)

// defaultHosts are covered by every generated server certificate, for
// clients on the server's own machine.
var defaultHosts = []string{"localhost", "127.0.0.1", "::1"}

// GeneratedConfig configures NewGeneratedSource.
type GeneratedConfig struct {
	// Dir holds the CA and the server certificate (CAFile, CAKeyFile,
	// ServerFile, ServerKeyFile); it is created if missing. Required.
	Dir string
	// Hosts are the DNS names and IP addresses the server certificate must
	// cover, besides localhost, 127.0.0.1, ::1 and Hostname. Unspecified
	// addresses (0.0.0.0) and empty strings are ignored.
	Hosts []string
	// Hostname names the CA ("Anvil CA <Hostname>") and is covered by the
	// server certificate. If empty, uses os.Hostname().
	Hostname string
	// Clock dates certificates and decides their renewal. If nil,
	// clock.Real.
	Clock clock.Clock
	// Logger gets a line when a certificate is issued. If nil, uses
	// slog.Default().
	Logger *slog.Logger
}

// GeneratedSource serves a server certificate signed by a CA of its own,
// both kept in GeneratedConfig.Dir: the CA is created once (ECDSA P-256,
// CALifetime) and never replaced; the server certificate (ServerLifetime)
// is reissued by the same CA when it does not cover the configured hosts,
// or comes within RenewBefore of its end — at start, and while serving.
// Private keys are written 0600. It is safe for concurrent use.
type GeneratedSource struct {
	cfg   GeneratedConfig
	log   *slog.Logger
	hosts []string // required, normalised
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	caPEM []byte

	mu          sync.Mutex
	cert        *tls.Certificate
	lastAttempt time.Time // of a reissue while serving that failed
}

// NewGeneratedSource loads the CA and the server certificate from Dir,
// creating the CA if there is none and (re)issuing the server certificate
// if needed. A CA that is only half there, unreadable or expired is an
// error, not replaced: clients trust it.
func NewGeneratedSource(cfg GeneratedConfig) (*GeneratedSource, error) {
	if cfg.Dir == "" {
		return nil, errors.New("no directory for the generated CA")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("hostname: %w", err)
		}
		cfg.Hostname = h
	}
	g := &GeneratedSource{cfg: cfg, log: cfg.Logger}
	if g.log == nil {
		g.log = slog.Default()
	}
	g.hosts = normaliseHosts(append(append(slices.Clone(defaultHosts), cfg.Hostname), cfg.Hosts...))
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("tls directory: %w", err)
	}
	if err := g.loadOrCreateCA(); err != nil {
		return nil, err
	}
	cert, reason := g.loadServer()
	if reason != "" {
		var err error
		if cert, err = g.issue(reason); err != nil {
			return nil, err
		}
	}
	g.cert = cert
	return g, nil
}

// GetCertificate returns the server certificate, reissuing it first when it
// comes within RenewBefore of its end. It suits tls.Config.GetCertificate.
func (g *GeneratedSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Clock.Now()
	if now.Before(g.cert.Leaf.NotAfter.Add(-RenewBefore)) || now.Sub(g.lastAttempt) < retryIssue ||
		!g.cert.Leaf.NotAfter.Before(g.ca.NotAfter) { // the CA ends first: a new one would end as soon
		return g.cert, nil
	}
	cert, err := g.issue("it expires within 30 days")
	if err != nil {
		g.lastAttempt = now
		g.log.Error("TLS: cannot reissue the server certificate; serving the old one", "err", err,
			"not_after", g.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		return g.cert, nil
	}
	g.cert = cert
	return g.cert, nil
}

// Certificate returns the server certificate served now.
func (g *GeneratedSource) Certificate() *tls.Certificate {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cert
}

// CA returns the CA certificate.
func (g *GeneratedSource) CA() *x509.Certificate { return g.ca }

// CAPEM returns the CA certificate as PEM, what clients trust.
func (g *GeneratedSource) CAPEM() []byte { return slices.Clone(g.caPEM) }

// CAFile returns the path of the CA certificate.
func (g *GeneratedSource) CAFile() string { return filepath.Join(g.cfg.Dir, CAFile) }

func (g *GeneratedSource) path(name string) string { return filepath.Join(g.cfg.Dir, name) }

// loadOrCreateCA reads the CA, or creates it when neither of its files
// exists.
func (g *GeneratedSource) loadOrCreateCA() error {
	certPEM, certErr := os.ReadFile(g.path(CAFile))
	keyPEM, keyErr := os.ReadFile(g.path(CAKeyFile))
	if errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist) {
		return g.createCA()
	}
	advice := fmt.Sprintf("move %s away to generate a new CA (every client must then trust the new one)", g.cfg.Dir)
	if err := errors.Join(certErr, keyErr); err != nil {
		return fmt.Errorf("read the CA: %w; %s", err, advice)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("load the CA from %s: %w; %s", g.cfg.Dir, err, advice)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !pair.Leaf.IsCA {
		return fmt.Errorf("%s is not an ECDSA CA; %s", g.path(CAFile), advice)
	}
	if !g.cfg.Clock.Now().Before(pair.Leaf.NotAfter) {
		return fmt.Errorf("the CA in %s expired on %s; %s", g.path(CAFile), pair.Leaf.NotAfter.UTC().Format(time.DateOnly), advice)
	}
	g.ca, g.caKey, g.caPEM = pair.Leaf, key, certPEM
	return nil
}

func (g *GeneratedSource) createCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate the CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return err
	}
	now := g.cfg.Clock.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Anvil CA " + g.cfg.Hostname, Organization: []string{"Anvil"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs server certificates only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return fmt.Errorf("create the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("create the CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der})
	// The key first: a CA certificate on disk always has its key.
	if err := atomicfile.Write(g.path(CAKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := atomicfile.Write(g.path(CAFile), certPEM, 0o644); err != nil {
		return err
	}
	g.ca, g.caKey, g.caPEM = ca, key, certPEM
	g.log.Info("TLS: generated a CA", "file", g.path(CAFile), "subject", ca.Subject.CommonName,
		"not_after", ca.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// loadServer reads the server certificate; it returns why a new one is
// needed instead, if one is.
func (g *GeneratedSource) loadServer() (*tls.Certificate, string) {
	cert, err := tls.LoadX509KeyPair(g.path(ServerFile), g.path(ServerKeyFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, "there is none"
	case err != nil:
		return nil, fmt.Sprintf("the one on disk cannot be used (%v)", err)
	}
	leaf := cert.Leaf
	if err := leaf.CheckSignatureFrom(g.ca); err != nil {
		return nil, "the one on disk is not signed by the CA"
	}
	if !g.cfg.Clock.Now().Before(leaf.NotAfter.Add(-RenewBefore)) {
		return nil, "the one on disk expires within 30 days"
	}
	if missing := uncovered(leaf, g.hosts); len(missing) > 0 {
		return nil, "the one on disk does not cover " + strings.Join(missing, ", ")
	}
	return &cert, ""
}

// issue creates a server certificate for the hosts, signed by the CA, and
// writes it.
func (g *GeneratedSource) issue(reason string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the server key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := g.cfg.Clock.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: g.cfg.Hostname, Organization: []string{"Anvil"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(ServerLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(g.ca.NotAfter) {
		tmpl.NotAfter = g.ca.NotAfter
	}
	for _, h := range g.hosts {
		if ip, err := netip.ParseAddr(h); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, g.ca, key.Public(), g.caKey)
	if err != nil {
		return nil, fmt.Errorf("issue the server certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("issue the server certificate: %w", err)
	}
	// Key then certificate: a crash in between leaves a pair that does not
	// match, which the next start reissues.
	if err := atomicfile.Write(g.path(ServerKeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(g.path(ServerFile), certPEM, 0o644); err != nil {
		return nil, err
	}
	if tmpl.NotAfter.Equal(g.ca.NotAfter) {
		g.log.Warn("TLS: the CA ends before a year is up; so does the server certificate. Move the TLS directory away to generate a new CA",
			"dir", g.cfg.Dir, "ca_not_after", g.ca.NotAfter.UTC().Format(time.RFC3339))
	}
	g.log.Info("TLS: issued a server certificate", "why", reason, "file", g.path(ServerFile),
		"sans", sans(cert.Leaf), "not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return &cert, nil
}

// normaliseHosts returns hosts without duplicates, blanks and unspecified
// addresses, IP addresses in canonical form and names in lower case, in
// their first order.
func normaliseHosts(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip, err := netip.ParseAddr(h); err == nil {
			ip = ip.Unmap()
			if ip.IsUnspecified() || ip.Zone() != "" {
				continue // a zone cannot go in a certificate
			}
			h = ip.String()
		} else {
			h = strings.ToLower(strings.TrimSuffix(h, "."))
		}
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// uncovered returns the hosts leaf is not valid for.
func uncovered(leaf *x509.Certificate, hosts []string) []string {
	var missing []string
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			missing = append(missing, h)
		}
	}
	return missing
}

// sans lists a certificate's subject alternative names, for logs.
func sans(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), nil
}
