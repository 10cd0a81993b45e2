package kubeproc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// credentials are the files the API server is started with.
type credentials struct {
	token     string
	caPEM     []byte
	tokenFile string // token,user,uid,"groups"
	// serverCert and serverKey are the serving certificate (signed by the
	// CA, for 127.0.0.1, localhost and the address the server listens
	// on) and its key.
	serverCert, serverKey string
	// saKey signs and verifies service account tokens; the API server
	// refuses to start without one.
	saKey string
}

// adminUser is the token's user; system:masters passes every RBAC check.
const adminUser = "kubetest-admin"

// writeCredentials makes a CA, a serving certificate, a service account
// key and a token file in dir/pki. The CA is the cluster's own so that
// the client can verify the server (no InsecureSkipVerify in tests that
// also exercise TLS configuration).
func writeCredentials(dir string, addr net.IP) (credentials, error) {
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return credentials{}, err
	}
	token, err := randomToken()
	if err != nil {
		return credentials{}, err
	}
	c := credentials{
		token:      token,
		tokenFile:  filepath.Join(pki, "tokens.csv"),
		serverCert: filepath.Join(pki, "apiserver.crt"),
		serverKey:  filepath.Join(pki, "apiserver.key"),
		saKey:      filepath.Join(pki, "service-account.key"),
	}
	now := time.Now()
	caKey, err := newKey()
	if err != nil {
		return c, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return c, fmt.Errorf("kubeproc: the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return c, err
	}
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	srvKey, err := newKey()
	if err != nil {
		return c, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), addr},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return c, fmt.Errorf("kubeproc: the serving certificate: %w", err)
	}
	saKey, err := newKey()
	if err != nil {
		return c, err
	}
	line := c.token + "," + adminUser + "," + adminUser + ",\"system:masters\"\n"
	for _, err := range []error{
		writePEM(c.serverCert, "CERTIFICATE", srvDER),
		writeKey(c.serverKey, srvKey),
		writeKey(c.saKey, saKey),
		os.WriteFile(c.tokenFile, []byte(line), 0o600),
	} {
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// newKey returns a new P-256 key: quick to make, and accepted by the API
// server for serving and for service account tokens.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
