package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// credentials are the files the API server is started with.
type credentials struct {
	token     string
	caPEM     []byte
	tokenFile string // token,user,uid,"groups"
	// serverCert and serverKey are the serving certificate (signed by the
	// CA, for 127.0.0.1 and localhost) and its key.
	serverCert, serverKey string
	// saKey signs and verifies service account tokens; the API server
	// refuses to start without one.
	saKey string
}

// testUser is the token's user; system:masters passes every RBAC check.
const testUser = "kubetest-admin"

// writeCredentials makes a CA, a serving certificate, a service account
// key and a token file in dir/pki. The CA is the test's own so that the
// client can verify the server (no InsecureSkipVerify in tests that will
// also exercise TLS configuration).
func writeCredentials(t testing.TB, dir string) credentials {
	t.Helper()
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	c := credentials{
		token:      randomToken(t),
		tokenFile:  filepath.Join(pki, "tokens.csv"),
		serverCert: filepath.Join(pki, "apiserver.crt"),
		serverKey:  filepath.Join(pki, "apiserver.key"),
		saKey:      filepath.Join(pki, "service-account.key"),
	}
	now := time.Now()
	caKey := newKey(t)
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
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	srvKey := newKey(t)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, c.serverCert, "CERTIFICATE", srvDER)
	writeKey(t, c.serverKey, srvKey)
	writeKey(t, c.saKey, newKey(t))
	line := c.token + "," + testUser + "," + testUser + ",\"system:masters\"\n"
	if err := os.WriteFile(c.tokenFile, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// newKey returns a new P-256 key: quick to make, and accepted by the API
// server for serving and for service account tokens.
func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeKey(t testing.TB, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
