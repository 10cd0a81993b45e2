// Package tlsconf provides the TLS configuration of Anvil's management API:
// the certificate either comes from files the operator names (reloaded when
// they change, without a restart) or is issued by a CA that the package
// generates once in a directory and keeps across restarts.
//
// A FileSource or a GeneratedSource supplies the certificate;
// ServerConfig turns its GetCertificate into a *tls.Config (TLS 1.2 or
// later, ALPN h2 and http/1.1). The package imports no other Anvil package.
package tlsconf

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// File names inside a GeneratedConfig.Dir.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
)

// ALPN protocol IDs (RFC 7301 §6, RFC 9113 §3.2).
const (
	alpnH2     = "h2"
	alpnHTTP11 = "http/1.1"
)

// pemCertificate and pemPrivateKey are the PEM block types written and read
// (RFC 7468 §5 and §10).
const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY"
)

// ServerConfig returns a server configuration that takes its certificate
// from getCertificate (a FileSource's or a GeneratedSource's), accepts TLS
// 1.2 and later, and offers HTTP/2 and HTTP/1.1 by ALPN. http.Server's
// ServeTLS drops the protocol its Protocols switch off.
func ServerConfig(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{alpnH2, alpnHTTP11},
		GetCertificate: getCertificate,
	}
}

// Fingerprint is the SHA-256 of a DER certificate as upper-case hex pairs
// joined by colons, the way `openssl x509 -noout -fingerprint -sha256`
// prints it.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	var b strings.Builder
	for i, c := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", c)
	}
	return b.String()
}

// ReadCA returns the PEM of the CA generated in dir (dir/ca.pem), for
// clients to trust. The error wraps fs.ErrNotExist when there is none: the
// server has not started with a generated certificate there yet.
func ReadCA(dir string) ([]byte, error) {
	name := filepath.Join(dir, CAFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read CA: %w (it is created when `anvil serve` first starts with TLS on and no --tls-cert)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	if _, err := parseCertPEM(b); err != nil {
		return nil, fmt.Errorf("read CA %s: %w", name, err)
	}
	return b, nil
}

// parseCertPEM parses the first certificate of a PEM file.
func parseCertPEM(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM certificate")
		}
		if blk.Type == pemCertificate {
			return x509.ParseCertificate(blk.Bytes)
		}
	}
}
