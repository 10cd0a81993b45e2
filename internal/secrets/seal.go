package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/anvilproj/anvil/internal/atomicfile"
	"github.com/anvilproj/anvil/internal/model"
)

// KeyFileName is the name of the sealing key's file inside Config.Dir when
// the server is given no other.
const KeyFileName = "seal.key"

// sealedPrefix versions the sealed form: "v1:" + base64(nonce | AES-256-GCM
// ciphertext), so a later key or cipher can be told apart.
const sealedPrefix = "v1:"

// keyBytes is the size of the AES-256 key.
const keyBytes = 32

// Sealer encrypts Secret data for the store (AES-256-GCM under a key kept in
// a file of its own, mode 0600), so that the store file — and its backups —
// hold no credential in the clear. It is safe for concurrent use.
//
// The key sits apart from the store on purpose: a copy of the store alone
// reveals nothing. Whoever reads the key file and the store can decrypt;
// put the key on another volume (anvil serve --seal-key-file) to separate
// them further.
type Sealer struct {
	aead cipher.AEAD
	// clusterKept: see ClusterKept.
	clusterKept bool
}

// ClusterKept returns a Sealer for a store that keeps Secrets itself: the
// Kubernetes API, whose Secrets other tools (kubectl, Rufio, GitOps)
// write and read in the clear, protected by the cluster's RBAC and its
// encryption at rest. Seal then checks a Secret but leaves its data as it
// is; Open reads an unsealed Secret as it is, and a sealed one (moved
// from the embedded store) with k's key.
func (k *Sealer) ClusterKept() *Sealer {
	c := *k
	c.clusterKept = true
	return &c
}

// OpenSealer loads the key in path, creating it (32 random bytes from r,
// or crypto/rand when r is nil) when the file does not exist. A key file
// others can read, or of the wrong size, is refused.
func OpenSealer(path string, r io.Reader) (*Sealer, error) {
	if r == nil {
		r = rand.Reader
	}
	key, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		key = make([]byte, keyBytes)
		if _, err := io.ReadFull(r, key); err != nil {
			return nil, fmt.Errorf("seal key: read random: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("seal key: %w", err)
		}
		if err := atomicfile.Write(path, key, 0o600); err != nil {
			return nil, fmt.Errorf("seal key: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("seal key: %w", err)
	default:
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("seal key: %w", err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return nil, fmt.Errorf("seal key: %s has mode %#o; want 0600 (chmod 600 it)", path, perm)
		}
		if len(key) != keyBytes {
			return nil, fmt.Errorf("seal key: %s holds %d bytes; want %d", path, len(key), keyBytes)
		}
	}
	return NewSealer(key)
}

// NewSealer returns a Sealer with a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != keyBytes {
		return nil, fmt.Errorf("seal key: %d bytes; want %d", len(key), keyBytes)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// aad binds a ciphertext to its Secret: one sealed value copied onto
// another Secret does not open.
func aad(s *model.Secret) []byte { return []byte(model.KindSecret + " " + s.Namespace + "/" + s.Name) }

// Seal replaces s's Data and StringData by Sealed and Keys. A Secret
// already sealed (no Data, no StringData, Sealed set) is left as it is.
func (k *Sealer) Seal(s *model.Secret) error {
	if s.Sealed != "" && len(s.Data) == 0 && len(s.StringData) == 0 {
		return nil
	}
	plain, err := s.Plain()
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if k.clusterKept {
		return nil
	}
	b, err := json.Marshal(plain) // []byte values encode as base64
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(b)+k.aead.Overhead())
	if _, err := io.ReadFull(rand.Reader, nonce); err != nil {
		return fmt.Errorf("secret %s/%s: read random: %w", s.Namespace, s.Name, err)
	}
	sealed := k.aead.Seal(nonce, nonce, b, aad(s))
	keys := make([]string, 0, len(plain))
	for key := range plain {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	s.Sealed = sealedPrefix + base64.StdEncoding.EncodeToString(sealed)
	s.Keys = keys
	s.Data, s.StringData = nil, nil
	return nil
}

// Open returns the values of a sealed Secret. The error never holds a
// value.
func (k *Sealer) Open(s *model.Secret) (map[string][]byte, error) {
	if s.Sealed == "" && k.clusterKept {
		plain, err := s.Plain()
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		return plain, nil
	}
	if s.Sealed == "" {
		if len(s.Data) > 0 || len(s.StringData) > 0 {
			return nil, fmt.Errorf("secret %s/%s is not sealed", s.Namespace, s.Name)
		}
		return map[string][]byte{}, nil
	}
	raw, ok := strings.CutPrefix(s.Sealed, sealedPrefix)
	if !ok {
		return nil, fmt.Errorf("secret %s/%s: sealed with an unknown scheme", s.Namespace, s.Name)
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(b) < k.aead.NonceSize() {
		return nil, fmt.Errorf("secret %s/%s: sealed data is corrupt", s.Namespace, s.Name)
	}
	plain, err := k.aead.Open(nil, b[:k.aead.NonceSize()], b[k.aead.NonceSize():], aad(s))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: cannot unseal (was it sealed with another key? the server's seal key file may have changed)", s.Namespace, s.Name)
	}
	var out map[string][]byte
	if err := json.Unmarshal(plain, &out); err != nil {
		return nil, fmt.Errorf("secret %s/%s: sealed data is corrupt", s.Namespace, s.Name)
	}
	return out, nil
}
