package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"

	"github.com/anvilproj/anvil/internal/atomicfile"
)

// The local issuer's token claims: a Verifier for it takes Issuer
// LocalIssuerName and Audience LocalAudience.
const (
	LocalIssuerName = "anvil-local"
	LocalAudience   = "anvil"
)

// Files of the local issuer, in its directory.
const (
	localKeyFile    = "signing-key.pem"
	localPubFile    = "signing-key.pub.pem"
	localDirMode    = 0o700
	localKeyMode    = 0o600
	localPubMode    = 0o644
	localKeyMaxPerm = 0o600 // anything more open (group, others) is refused
)

// PEM block types (RFC 7468 sections 10, 11 and 13).
const (
	pemPrivateKey   = "PRIVATE KEY"
	pemECPrivateKey = "EC PRIVATE KEY"
	pemPublicKey    = "PUBLIC KEY"
)

// LocalIssuerDir is the local issuer's directory under a data directory.
func LocalIssuerDir(dataDir string) string { return filepath.Join(dataDir, "auth") }

// LocalIssuerKeyFile is the local issuer's private signing key in dir
// (what EnsureLocalIssuer makes): Kubernetes mode shares it between
// replicas, so a token minted by one is good at all.
func LocalIssuerKeyFile(dir string) string { return filepath.Join(dir, localKeyFile) }

// LocalIssuer signs tokens with a key kept on this machine, so that a
// single-machine install is authenticated without an identity provider.
// Its key is an ES256 (P-256) key in a PEM file of mode 0600, created once
// and kept. It is safe for concurrent use.
type LocalIssuer struct {
	dir string
	key *ecdsa.PrivateKey
	kid string
	now func() time.Time
}

// EnsureLocalIssuer returns the issuer whose key is in dir, generating the
// key the first time (dir is created, mode 0700). A key file that others
// may read, or that does not hold a P-256 key, is an error. The public key
// is (re)written next to it as signing-key.pub.pem for Config.KeyFiles.
func EnsureLocalIssuer(dir string) (*LocalIssuer, error) {
	if err := os.MkdirAll(dir, localDirMode); err != nil {
		return nil, fmt.Errorf("local issuer: %w", err)
	}
	key, err := loadOrCreateKey(LocalIssuerKeyFile(dir))
	if err != nil {
		return nil, fmt.Errorf("local issuer: %w", err)
	}
	li := &LocalIssuer{dir: dir, key: key, now: time.Now}
	if li.kid, err = thumbprint(&key.PublicKey); err != nil {
		return nil, fmt.Errorf("local issuer: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("local issuer: %w", err)
	}
	pub := pem.EncodeToMemory(&pem.Block{Type: pemPublicKey, Bytes: der})
	if err := writeIfChanged(li.PublicKeyFile(), pub, localPubMode); err != nil {
		return nil, fmt.Errorf("local issuer: %w", err)
	}
	return li, nil
}

// PublicKeyFile is the path of the PEM public key, for Config.KeyFiles.
func (li *LocalIssuer) PublicKeyFile() string { return filepath.Join(li.dir, localPubFile) }

// KeyID is the kid of the tokens Mint signs: the key's RFC 7638 thumbprint.
func (li *LocalIssuer) KeyID() string { return li.kid }

// Mint returns a signed token (ES256) for subject in organisation org with
// roles, valid for ttl from now, issued by LocalIssuerName for
// LocalAudience, with the claims a default Config reads (sub, org_id,
// roles). Roles must be known role names; a token without the admin role
// must name an organisation.
func (li *LocalIssuer) Mint(subject, org string, roles []string, ttl time.Duration) (string, error) {
	switch {
	case subject == "":
		return "", errors.New("mint token: no subject")
	case ttl <= 0:
		return "", fmt.Errorf("mint token: lifetime %s: must be positive", ttl)
	case len(roles) == 0:
		return "", errors.New("mint token: no roles")
	}
	for _, r := range roles {
		if _, ok := grants[r]; !ok {
			return "", fmt.Errorf("mint token: unknown role %q (want %s, %s or %s)", r, RoleViewer, RoleOperator, RoleAdmin)
		}
	}
	if org == "" && !slices.Contains(roles, RoleAdmin) {
		return "", errors.New("mint token: a token without the admin role needs an organisation")
	}
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	now := li.now().Truncate(time.Second)
	b := jwt.NewBuilder().
		Issuer(LocalIssuerName).
		Audience([]string{LocalAudience}).
		Subject(subject).
		IssuedAt(now).
		NotBefore(now).
		Expiration(now.Add(ttl)).
		JwtID(base64.RawURLEncoding.EncodeToString(jti)).
		Claim(DefaultRolesClaim, slices.Clone(roles))
	if org != "" {
		b = b.Claim(DefaultOrgClaim, org)
	}
	tok, err := b.Build()
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, li.kid); err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	if err := hdr.Set(jws.TypeKey, "JWT"); err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256, li.key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	return string(signed), nil
}

// thumbprint is the RFC 7638 SHA-256 thumbprint of pub, base64url.
func thumbprint(pub crypto.PublicKey) (string, error) {
	k, err := jwk.FromRaw(pub)
	if err != nil {
		return "", err
	}
	tp, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// loadOrCreateKey reads the P-256 key at path, or creates it if there is
// none. Creation writes a temporary file and links it into place, so a
// half-written key is never seen and two processes racing keep one key.
func loadOrCreateKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := loadKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	if err := atomicfile.Create(path, pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), localKeyMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return loadKey(path) // another process made it first
		}
		return nil, fmt.Errorf("store key: %w", err)
	}
	return key, nil
}

// loadKey reads a PEM P-256 private key (PKCS #8 or SEC 1) from path.
func loadKey(path string) (*ecdsa.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&^localKeyMaxPerm != 0 {
		return nil, fmt.Errorf("signing key %s has mode %04o: others may read it; chmod 600 it (or remove it to make a new key)", path, perm)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("signing key %s: no PEM block", path)
	}
	var parsed any
	switch block.Type {
	case pemPrivateKey:
		parsed, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case pemECPrivateKey:
		parsed, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("signing key %s: PEM block %q, want %q", path, block.Type, pemPrivateKey)
	}
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("signing key %s: not a P-256 (ES256) key", path)
	}
	return key, nil
}

// writeIfChanged replaces path with data (atomically, by rename) unless it
// already holds exactly that.
func writeIfChanged(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return atomicfile.Write(path, data, mode)
}
