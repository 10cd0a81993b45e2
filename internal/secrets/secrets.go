// Package secrets keeps named cluster bootstrap secrets (a kubeadm bootstrap
// token, a certificate key, a password, an SSH host key): each is generated
// once, on first use, and kept durably in a JSON file so every later
// rendering and every restart sees the same value.
//
// In Kubernetes mode InStore keeps them as Secret objects in the cluster
// instead, so that every replica hands out the same value.
//
// Values leave the Store only through Secret (used by config templates, see
// internal/render) and Get (for admins); List shows names, kinds and
// creation times only.
//
// It also owns the sealing of the credentials users apply as core v1
// Secret objects (seal.go): the store keeps them encrypted under a key file
// of their own, and only the BMC job executor opens them.
package secrets

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/anvilproj/anvil/internal/atomicfile"
	"github.com/anvilproj/anvil/internal/clock"
)

// Kinds of secret.
const (
	// KindKubeadmToken is a kubeadm bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}.
	KindKubeadmToken = "kubeadm-token"
	// KindHex32 is 32 random bytes in hex (64 characters), e.g. a kubeadm
	// certificate key.
	KindHex32 = "hex32"
	// KindPassword is 24 URL-safe characters (18 random bytes, base64url).
	KindPassword = "password"
	// KindSSHEd25519 is an OpenSSH ed25519 private key (PEM, "OPENSSH
	// PRIVATE KEY"); internal/render's sshPublicKey derives its public key.
	KindSSHEd25519 = "ssh-ed25519"
)

// Kinds lists every kind a Store generates.
var Kinds = []string{KindKubeadmToken, KindHex32, KindPassword, KindSSHEd25519}

// FileName is the name of the file a Store keeps its secrets in, inside
// Config.Dir.
const FileName = "secrets.json"

// ErrNotFound is returned (wrapped) by Get for a secret that does not exist.
var ErrNotFound = errors.New("secret not found")

// ErrExists is returned (wrapped) by Import for a secret that exists.
var ErrExists = errors.New("secret exists")

// Config configures a Store.
type Config struct {
	// Dir is the directory of the secrets file; it is created (0700) if
	// missing. Required.
	Dir string
	// Clock gives the time recorded as a secret's creation time. If nil,
	// clock.Real.
	Clock clock.Clock
	// Rand is the source of randomness. If nil, uses crypto/rand.Reader.
	Rand io.Reader
}

// Info describes a secret without its value.
type Info struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Created   time.Time `json:"created"`
}

// Generated is a secret with its value, as kept on disk and as a move
// between stores carries it (All, Import).
type Generated struct {
	Info
	Value string `json:"value"`
}

// file is the JSON document on disk.
type file struct {
	Secrets []Generated `json:"secrets"`
}

type key struct{ namespace, name string }

// Store is a set of named secrets kept in Config.Dir/secrets.json (mode
// 0600). It is safe for concurrent use within one process; two processes
// must not share a directory.
type Store struct {
	path string
	now  func() time.Time
	rand io.Reader

	mu      sync.Mutex
	entries map[key]Generated
}

// Open loads the Store in cfg.Dir, creating the directory if needed. A
// secrets file that others can read (mode wider than 0600) is refused.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("open secrets: no directory")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open secrets: %w", err)
	}
	s := &Store{
		path:    filepath.Join(cfg.Dir, FileName),
		now:     clock.Or(cfg.Clock).Now,
		rand:    cfg.Rand,
		entries: map[key]Generated{},
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	fi, err := os.Stat(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open secrets: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("open secrets: %s has mode %#o; want 0600 (chmod 600 it)", s.path, perm)
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("open secrets: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("open secrets: parse %s: %w", s.path, err)
	}
	for _, e := range f.Secrets {
		s.entries[key{e.Namespace, e.Name}] = e
	}
	return s, nil
}

// Secret returns the value of the secret name of kind in namespace,
// generating it and writing it to disk first if it does not exist. Concurrent
// first uses get the same value. The same name with a different kind is an
// error.
func (s *Store) Secret(namespace, name, kind string) (string, error) {
	if name == "" {
		return "", errors.New("secret: empty name")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{namespace, name}
	if e, ok := s.entries[k]; ok {
		if e.Kind != kind {
			return "", fmt.Errorf("secret %q is of kind %s, not %s", name, e.Kind, kind)
		}
		return e.Value, nil
	}
	v, err := generate(s.rand, kind)
	if err != nil {
		return "", fmt.Errorf("secret %q: %w", name, err)
	}
	e := Generated{Info: Info{Namespace: namespace, Name: name, Kind: kind, Created: s.now().UTC()}, Value: v}
	s.entries[k] = e
	if err := s.save(); err != nil {
		delete(s.entries, k)
		return "", fmt.Errorf("secret %q: %w", name, err)
	}
	return v, nil
}

// Get returns the value and description of an existing secret, or an error
// wrapping ErrNotFound. It never generates one.
func (s *Store) Get(namespace, name string) (string, Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key{namespace, name}]
	if !ok {
		return "", Info{}, fmt.Errorf("secret %s/%s: %w", namespace, name, ErrNotFound)
	}
	return e.Value, e.Info, nil
}

// List describes every secret, sorted by namespace and name, without values.
func (s *Store) List() []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Info, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e.Info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// All returns every secret with its value, sorted by namespace and name:
// for `anvil export`, which moves them to another store.
func (s *Store) All() []Generated {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Generated, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e)
	}
	sortGenerated(out)
	return out
}

// Import adds secrets made elsewhere (`anvil restore` from another store)
// in one write. A secret whose name exists is an error wrapping
// ErrExists, and none is added, unless replace is set.
func (s *Store) Import(gs []Generated, replace bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range gs {
		if _, ok := s.entries[key{g.Namespace, g.Name}]; ok && !replace {
			return fmt.Errorf("secret %s/%s: %w", g.Namespace, g.Name, ErrExists)
		}
		if err := checkKind(g.Kind); err != nil {
			return fmt.Errorf("secret %s/%s: %w", g.Namespace, g.Name, err)
		}
	}
	old := maps.Clone(s.entries)
	for _, g := range gs {
		s.entries[key{g.Namespace, g.Name}] = g
	}
	if err := s.save(); err != nil {
		s.entries = old
		return err
	}
	return nil
}

// save writes every secret to a temporary file in the same directory, syncs
// it, renames it over the secrets file and syncs the directory. s.mu is held.
func (s *Store) save() error {
	f := file{Secrets: make([]Generated, 0, len(s.entries))}
	for _, e := range s.entries {
		f.Secrets = append(f.Secrets, e)
	}
	sortGenerated(f.Secrets)
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode secrets: %w", err)
	}
	if err := atomicfile.Write(s.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save secrets: %w", err)
	}
	return nil
}

func sortGenerated(gs []Generated) {
	sort.Slice(gs, func(i, j int) bool {
		a, b := gs[i], gs[j]
		return a.Namespace < b.Namespace || (a.Namespace == b.Namespace && a.Name < b.Name)
	})
}

// checkKind refuses a kind that is not one of Kinds.
func checkKind(kind string) error {
	if slices.Contains(Kinds, kind) {
		return nil
	}
	return fmt.Errorf("unknown kind %q (want one of %v)", kind, Kinds)
}

// alnum is the alphabet of kubeadm bootstrap tokens.
const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"

// generate makes a new value of kind.
func generate(r io.Reader, kind string) (string, error) {
	switch kind {
	case KindKubeadmToken:
		id, err := randomString(r, alnum, 6)
		if err != nil {
			return "", err
		}
		sec, err := randomString(r, alnum, 16)
		if err != nil {
			return "", err
		}
		return id + "." + sec, nil
	case KindHex32:
		b := make([]byte, 32)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", fmt.Errorf("read random: %w", err)
		}
		return hex.EncodeToString(b), nil
	case KindPassword:
		b := make([]byte, 18)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", fmt.Errorf("read random: %w", err)
		}
		return base64.RawURLEncoding.EncodeToString(b), nil
	case KindSSHEd25519:
		_, priv, err := ed25519.GenerateKey(r)
		if err != nil {
			return "", fmt.Errorf("generate ed25519 key: %w", err)
		}
		blk, err := ssh.MarshalPrivateKey(priv, "")
		if err != nil {
			return "", fmt.Errorf("encode ed25519 key: %w", err)
		}
		return string(pem.EncodeToMemory(blk)), nil
	}
	return "", checkKind(kind)
}

// randomString returns n characters drawn uniformly from alphabet (fewer
// than 256 characters), by rejection sampling.
func randomString(r io.Reader, alphabet string, n int) (string, error) {
	limit := 256 - 256%len(alphabet)
	out := make([]byte, 0, n)
	buf := make([]byte, n*2)
	for len(out) < n {
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("read random: %w", err)
		}
		for _, c := range buf {
			if int(c) < limit && len(out) < n {
				out = append(out, alphabet[int(c)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}
