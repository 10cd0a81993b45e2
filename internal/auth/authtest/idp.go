// Package authtest is an identity provider for tests: it publishes a JWKS
// from an httptest server and signs tokens with real RSA, EC and Ed25519
// keys, so that tests anywhere in the repository can put genuine tokens
// through auth.Verifier and the API behind it. Keys can be rotated and
// retired mid-test, and the JWKS fetches are counted.
//
// It is for tests only: nothing outside _test.go files may import it.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/anvilproj/anvil/internal/auth"
)

// The IdP's issuer and the audience of its tokens, as Claims sets them.
const (
	Issuer   = "https://idp.anvil.test/realms/anvil"
	Audience = "anvil"
)

// The kids of the keys a new IdP holds. RSAKeyID's key signs by default.
const (
	RSAKeyID     = "rsa-1"
	ECKeyID      = "ec-1"
	Ed25519KeyID = "ed-1"
)

// rsaBits is the size of the IdP's RSA keys.
const rsaBits = 2048

// IdP is a test identity provider. Its methods are safe for concurrent
// use; they fail the test (t.Fatal) rather than return errors.
type IdP struct {
	t      testing.TB
	srv    *httptest.Server
	caFile string

	fetches atomic.Int64
	failing atomic.Bool

	mu        sync.Mutex
	keys      map[string]*key // every key made, retired ones included
	published []string        // kids in the JWKS, in order
	signing   string          // kid of the default signing key
	serial    int             // for the kids of rotated keys
}

type key struct {
	kid  string
	alg  string
	priv crypto.Signer
}

// Option configures NewIdP.
type Option func(*idpOptions)

type idpOptions struct{ tls bool }

// WithTLS serves the JWKS over HTTPS, from a certificate whose CA is in
// the file CAFile names (for auth.Config.JWKSCAFile).
func WithTLS() Option { return func(o *idpOptions) { o.tls = true } }

// NewIdP starts an IdP with an RSA key (RSAKeyID, RS256, the signing key),
// a P-256 key (ECKeyID, ES256) and an Ed25519 key (Ed25519KeyID, EdDSA),
// all published. It stops when the test ends.
func NewIdP(t testing.TB, opts ...Option) *IdP {
	t.Helper()
	var o idpOptions
	for _, opt := range opts {
		opt(&o)
	}
	p := &IdP{t: t, keys: make(map[string]*key)}
	p.add(RSAKeyID, "RS256", newRSAKey(t))
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.add(ECKeyID, "ES256", ec)
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.add(Ed25519KeyID, "EdDSA", ed)
	p.signing = RSAKeyID

	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serveJWKS))
	// TLS handshakes refused by a verifier without the CA are expected.
	p.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if o.tls {
		p.srv.StartTLS()
		p.caFile = filepath.Join(t.TempDir(), "idp-ca.pem")
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
		if err := os.WriteFile(p.caFile, ca, 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		p.srv.Start()
	}
	t.Cleanup(p.srv.Close)
	return p
}

func newRSAKey(t testing.TB) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, rsaBits)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *IdP) add(kid, alg string, priv crypto.Signer) {
	p.keys[kid] = &key{kid: kid, alg: alg, priv: priv}
	p.published = append(p.published, kid)
}

// URL is the JWKS URL, for auth.Config.JWKSURL.
func (p *IdP) URL() string { return p.srv.URL + "/jwks" }

// CAFile is the PEM file of the CA of the IdP's HTTPS certificate, or ""
// without WithTLS.
func (p *IdP) CAFile() string { return p.caFile }

// Config returns a verifier configuration trusting this IdP: its JWKS URL
// (and CA), Issuer and Audience.
func (p *IdP) Config() auth.Config {
	return auth.Config{JWKSURL: p.URL(), JWKSCAFile: p.caFile, Issuer: Issuer, Audience: Audience}
}

// Fetches is the number of JWKS requests served so far.
func (p *IdP) Fetches() int { return int(p.fetches.Load()) }

// SetFailing makes the JWKS endpoint answer 503 (true) or work again.
func (p *IdP) SetFailing(failing bool) { p.failing.Store(failing) }

// SigningKeyID is the kid of the key Sign uses by default.
func (p *IdP) SigningKeyID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.signing
}

// Rotate makes a new key of the signing key's type, publishes it next to
// the others and makes it the signing key; the old one stays published
// until Retire. It returns the new kid.
func (p *IdP) Rotate() string {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.keys[p.signing]
	var priv crypto.Signer
	var err error
	switch old.priv.(type) {
	case *rsa.PrivateKey:
		priv, err = rsa.GenerateKey(rand.Reader, rsaBits)
	case *ecdsa.PrivateKey:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.serial++
	kid := fmt.Sprintf("%s-rotated-%d", old.kid, p.serial)
	p.add(kid, old.alg, priv)
	p.signing = kid
	return kid
}

// Retire stops publishing kid. Tokens can still be signed with it
// (WithKey), to show they are refused. Retiring the signing key fails the
// test.
func (p *IdP) Retire(kid string) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if kid == p.signing {
		p.t.Fatalf("authtest: Retire(%q): it is the signing key; Rotate first", kid)
	}
	p.published = slices.DeleteFunc(p.published, func(k string) bool { return k == kid })
}

// PublicKey returns the public key of kid.
func (p *IdP) PublicKey(kid string) crypto.PublicKey {
	p.t.Helper()
	return p.key(kid).priv.Public()
}

// PublicKeyPEM returns the public key of kid as a PEM "PUBLIC KEY" block
// (what a key file holds, and the bytes of the HS256 confusion attack).
func (p *IdP) PublicKeyPEM(kid string) []byte {
	p.t.Helper()
	der, err := x509.MarshalPKIXPublicKey(p.PublicKey(kid))
	if err != nil {
		p.t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func (p *IdP) key(kid string) *key {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, ok := p.keys[kid]
	if !ok {
		p.t.Fatalf("authtest: no key %q", kid)
	}
	return k
}

// JWKS returns the published key set as JSON (RFC 7517 section 5), as the
// endpoint serves it.
func (p *IdP) JWKS() []byte {
	p.t.Helper()
	b, err := p.jwks()
	if err != nil {
		p.t.Fatal(err)
	}
	return b
}

// jwks is JWKS without the test: the server's goroutine must not call
// t.Fatal.
func (p *IdP) jwks() ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := jwk.NewSet()
	for _, kid := range p.published {
		k := p.keys[kid]
		jk, err := jwk.FromRaw(k.priv.Public())
		if err != nil {
			return nil, err
		}
		for name, v := range map[string]any{jwk.KeyIDKey: k.kid, jwk.AlgorithmKey: k.alg, jwk.KeyUsageKey: "sig"} {
			if err := jk.Set(name, v); err != nil {
				return nil, err
			}
		}
		if err := set.AddKey(jk); err != nil {
			return nil, err
		}
	}
	return json.Marshal(set)
}

func (p *IdP) serveJWKS(w http.ResponseWriter, r *http.Request) {
	p.fetches.Add(1)
	if r.URL.Path != "/jwks" {
		http.NotFound(w, r)
		return
	}
	if p.failing.Load() {
		http.Error(w, "IdP unavailable", http.StatusServiceUnavailable)
		return
	}
	b, err := p.jwks()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Write(b)
}

// Claims returns the claims of a good token from this IdP for sub in org
// with roles: iss Issuer, aud Audience, sub, org_id, roles, iat now and
// exp in an hour. Tests change or delete entries to make bad ones.
func Claims(sub, org string, roles ...string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss":    Issuer,
		"aud":    Audience,
		"sub":    sub,
		"org_id": org,
		"roles":  roles,
		"iat":    now.Unix(),
		"exp":    now.Add(time.Hour).Unix(),
	}
}

// SignOption changes how Sign makes a token.
type SignOption func(*signOptions)

type signOptions struct {
	kid     string // key to sign with
	alg     string
	hdrKID  *string
	headers map[string]any
}

// WithKey signs with the key kid (by default with its algorithm) instead
// of the signing key; retired keys may be used.
func WithKey(kid string) SignOption { return func(o *signOptions) { o.kid = kid } }

// WithAlg signs with alg (and says so in the header) instead of the key's
// own algorithm; it must be one the key can make (PS256 with an RSA key).
func WithAlg(alg string) SignOption { return func(o *signOptions) { o.alg = alg } }

// WithKID puts kid in the header instead of the signing key's; "" leaves
// the kid out.
func WithKID(kid string) SignOption { return func(o *signOptions) { o.hdrKID = &kid } }

// WithHeader adds a header parameter (or replaces one Sign sets).
func WithHeader(name string, value any) SignOption {
	return func(o *signOptions) {
		if o.headers == nil {
			o.headers = make(map[string]any)
		}
		o.headers[name] = value
	}
}

// Sign returns a compact JWS of claims, by default signed with the signing
// key, its algorithm and kid, and typ JWT.
func (p *IdP) Sign(claims map[string]any, opts ...SignOption) string {
	p.t.Helper()
	c, err := json.Marshal(claims)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.SignPayload(c, opts...)
}

// SignPayload is Sign for a payload of any bytes, JSON or not.
func (p *IdP) SignPayload(payload []byte, opts ...SignOption) string {
	p.t.Helper()
	var o signOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.kid == "" {
		o.kid = p.SigningKeyID()
	}
	k := p.key(o.kid)
	if o.alg == "" {
		o.alg = k.alg
	}
	hdr := map[string]any{"alg": o.alg, "typ": "JWT", "kid": k.kid}
	if o.hdrKID != nil {
		if *o.hdrKID == "" {
			delete(hdr, "kid")
		} else {
			hdr["kid"] = *o.hdrKID
		}
	}
	for name, v := range o.headers {
		hdr[name] = v
	}
	h, err := json.Marshal(hdr)
	if err != nil {
		p.t.Fatal(err)
	}
	input := Segment(h) + "." + Segment(payload)
	signer, err := jws.NewSigner(jwa.SignatureAlgorithm(o.alg))
	if err != nil {
		p.t.Fatal(err)
	}
	sig, err := signer.Sign([]byte(input), k.priv)
	if err != nil {
		p.t.Fatalf("authtest: sign %s with %s: %v", o.alg, k.kid, err)
	}
	return Join(input, sig)
}

// SigningInput returns the JWS signing input of header and claims
// (RFC 7515 section 5.1: BASE64URL(header) "." BASE64URL(payload)), for
// tests that sign by hand.
func SigningInput(t testing.TB, header, claims map[string]any) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return Segment(h) + "." + Segment(c)
}

// Join appends the signature to a signing input, making a compact JWS.
func Join(input string, sig []byte) string { return input + "." + Segment(sig) }

// Segment is the base64url encoding of a JWS part (no padding).
func Segment(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
