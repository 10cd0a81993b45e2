package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"slices"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
)

// JWS algorithm names (RFC 7518 section 3.1; EdDSA: RFC 8037 section 3.1).
const (
	algRS256 = "RS256"
	algRS384 = "RS384"
	algRS512 = "RS512"
	algPS256 = "PS256"
	algPS384 = "PS384"
	algPS512 = "PS512"
	algES256 = "ES256"
	algES384 = "ES384"
	algES512 = "ES512"
	algEdDSA = "EdDSA"
	algNone  = "none"
)

// defaultAlgorithms is the allowlist when Config.Algorithms is empty.
var defaultAlgorithms = []string{algRS256, algRS384, algRS512, algES256, algES384, algPS256, algEdDSA}

// keyKind is the kind of public key an algorithm verifies with.
type keyKind int

const (
	kindRSA keyKind = iota + 1
	kindEC
	kindEd25519
)

// algSpec says which keys an asymmetric algorithm takes.
type algSpec struct {
	kind  keyKind
	curve elliptic.Curve // for kindEC
}

// asymmetric are the algorithms a Verifier can be configured with. HMAC
// (HS256…) and none are deliberately absent: a verifier holding public keys
// must never treat one as a shared secret.
var asymmetric = map[string]algSpec{
	algRS256: {kind: kindRSA},
	algRS384: {kind: kindRSA},
	algRS512: {kind: kindRSA},
	algPS256: {kind: kindRSA},
	algPS384: {kind: kindRSA},
	algPS512: {kind: kindRSA},
	algES256: {kind: kindEC, curve: elliptic.P256()},
	algES384: {kind: kindEC, curve: elliptic.P384()},
	algES512: {kind: kindEC, curve: elliptic.P521()},
	algEdDSA: {kind: kindEd25519},
}

// minRSABits is the smallest RSA modulus accepted (RFC 7518 section 3.3
// requires 2048 bits or more); smaller keys in a set are skipped.
const minRSABits = 2048

// JWK "use" and "key_ops" values (RFC 7517 sections 4.2 and 4.3).
const (
	jwkUseSig   = "sig"
	jwkOpVerify = "verify"
)

// jsonStart is how a JWK or JWKS file starts; anything else is read as PEM.
const jsonStart = '{'

// verifyKey is one trusted public key.
type verifyKey struct {
	// kid is the key's ID: the one its JWK declares, else (a PEM key, a
	// JWK without one) its RFC 7638 thumbprint, the kid the local issuer
	// signs with. A token naming a kid is verified only by keys of that
	// kid: a trusted key does not vouch for a token that names another.
	kid string
	// alg is the one algorithm the key is declared for, or "" for any that
	// fits its type.
	alg string
	pub crypto.PublicKey // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// fits reports whether k may verify a signature made with alg: the key's
// type (and curve) must be the algorithm's, and a key declared for one
// algorithm takes only that one.
func (k *verifyKey) fits(alg string) bool {
	spec, ok := asymmetric[alg]
	if !ok || (k.alg != "" && k.alg != alg) {
		return false
	}
	switch pub := k.pub.(type) {
	case *rsa.PublicKey:
		return spec.kind == kindRSA
	case *ecdsa.PublicKey:
		return spec.kind == kindEC && pub.Curve == spec.curve
	case ed25519.PublicKey:
		return spec.kind == kindEd25519
	}
	return false
}

// keySet is an immutable set of trusted keys, indexed by kid.
type keySet struct {
	byKID map[string][]*verifyKey
	all   []*verifyKey
}

func newKeySet(keys []*verifyKey) *keySet {
	s := &keySet{byKID: make(map[string][]*verifyKey), all: keys}
	for _, k := range keys {
		s.byKID[k.kid] = append(s.byKID[k.kid], k)
	}
	return s
}

// mergeKeySets returns one set holding the keys of all of sets (nil ones
// skipped).
func mergeKeySets(sets ...*keySet) *keySet {
	var all []*verifyKey
	for _, s := range sets {
		if s != nil {
			all = append(all, s.all...)
		}
	}
	return newKeySet(all)
}

// parseKeys reads a JWKS (or a single JWK) when data is JSON, else one or
// more PEM blocks (public keys, certificates' keys or private keys, of
// which only the public half is kept). Keys that cannot verify signatures
// (symmetric, encryption-only, unknown types, short RSA) are skipped and
// described in skipped; no usable key at all is an error.
func parseKeys(data []byte) (keys []*verifyKey, skipped []string, err error) {
	data = bytes.TrimSpace(data)
	var set jwk.Set
	if len(data) > 0 && data[0] == jsonStart {
		// Keys of types jwx does not know are skipped rather than fail
		// the whole set: an IdP may publish more than we use.
		set, err = jwk.Parse(data, jwk.WithIgnoreParseError(true))
	} else {
		set, err = jwk.Parse(data, jwk.WithPEM(true))
	}
	if err != nil {
		return nil, nil, err
	}
	for i := range set.Len() {
		k, _ := set.Key(i)
		vk, why := toVerifyKey(k)
		if vk == nil {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %q): %s", i, k.KeyID(), why))
			continue
		}
		keys = append(keys, vk)
	}
	if len(keys) == 0 {
		if len(skipped) > 0 {
			return nil, skipped, fmt.Errorf("no usable signature verification key (%s)", skipped[0])
		}
		return nil, nil, errors.New("no keys")
	}
	return keys, skipped, nil
}

// toVerifyKey returns k's public half as a verifyKey, or nil and why not.
func toVerifyKey(k jwk.Key) (*verifyKey, string) {
	if k.KeyType() == jwa.OctetSeq {
		return nil, "symmetric key"
	}
	if u := k.KeyUsage(); u != "" && u != jwkUseSig {
		return nil, fmt.Sprintf("use %q", u)
	}
	if ops := k.KeyOps(); len(ops) > 0 && !slices.Contains(ops, jwk.KeyOperation(jwkOpVerify)) {
		return nil, "key_ops lacks verify"
	}
	alg := ""
	if a := k.Algorithm(); a != nil {
		alg = a.String()
	}
	if alg != "" {
		if _, ok := asymmetric[alg]; !ok {
			return nil, fmt.Sprintf("alg %q is not an asymmetric signature algorithm", alg)
		}
	}
	raw, err := jwk.PublicRawKeyOf(k)
	if err != nil {
		return nil, err.Error()
	}
	switch pub := raw.(type) {
	case *rsa.PublicKey:
		if pub.N.BitLen() < minRSABits {
			return nil, fmt.Sprintf("RSA key of %d bits (want %d or more)", pub.N.BitLen(), minRSABits)
		}
	case *ecdsa.PublicKey:
		if pub.Curve != elliptic.P256() && pub.Curve != elliptic.P384() && pub.Curve != elliptic.P521() {
			return nil, "unsupported curve"
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Sprintf("unsupported key type %T", raw)
	}
	kid := k.KeyID()
	if kid == "" {
		if kid, err = thumbprint(raw); err != nil {
			return nil, err.Error()
		}
	}
	vk := &verifyKey{kid: kid, alg: alg, pub: raw}
	// A key must fit at least one algorithm, else it is dead weight.
	for a := range asymmetric {
		if vk.fits(a) {
			return vk, ""
		}
	}
	return nil, fmt.Sprintf("alg %q does not fit the key's type", alg)
}
