package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/anvilproj/anvil/internal/atomicfile"
)

// agentKeySize is the HMAC key's length in bytes.
const agentKeySize = 32

// agentTokenPrefix versions the token format, so a later format can be told
// apart instead of failing as a bad MAC.
const agentTokenPrefix = "v1."

// AgentKey makes and checks the per-workflow tokens that boot scripts hand
// to agents (kernel argument anvil.token=). A token is an HMAC of the
// workflow's key and UID, so the server keeps no table of tokens: a
// reprovisioned workflow (a new UID) gets a new token, and a token taken
// from one machine's boot script is worth nothing for another's workflow.
type AgentKey struct{ secret []byte }

// NewAgentKey returns a key over secret (at least 16 bytes).
func NewAgentKey(secret []byte) (*AgentKey, error) {
	if len(secret) < 16 {
		return nil, fmt.Errorf("agent key: %d bytes is too short, want at least 16", len(secret))
	}
	return &AgentKey{secret: append([]byte(nil), secret...)}, nil
}

// LoadOrCreateAgentKey reads the key at path, or creates it (random, file
// mode 0600, parent directories 0700) when it does not exist yet. The same
// file gives the same tokens across restarts, so a machine that booted
// before a restart keeps working after it.
func LoadOrCreateAgentKey(path string) (*AgentKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, kerr := NewAgentKey(b)
		if kerr != nil {
			return nil, fmt.Errorf("%s: %w", path, kerr)
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("agent key: %w", err)
	}
	secret := make([]byte, agentKeySize)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("agent key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("agent key: %w", err)
	}
	// Created whole or not at all: two servers starting on one data
	// directory must not each keep a different key; the loser reads the
	// winner's.
	if err := atomicfile.Create(path, secret, 0o600); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadOrCreateAgentKey(path)
		}
		return nil, fmt.Errorf("agent key: %w", err)
	}
	return NewAgentKey(secret)
}

// Token returns the agent token of the workflow with that key
// ("namespace/name") and UID.
func (k *AgentKey) Token(workflowKey, uid string) string {
	return agentTokenPrefix + base64.RawURLEncoding.EncodeToString(k.mac(workflowKey, uid))
}

// Valid reports whether token is the agent token of that workflow, in
// constant time.
func (k *AgentKey) Valid(token, workflowKey, uid string) bool {
	if len(token) <= len(agentTokenPrefix) || token[:len(agentTokenPrefix)] != agentTokenPrefix {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(token[len(agentTokenPrefix):])
	if err != nil {
		return false
	}
	return hmac.Equal(got, k.mac(workflowKey, uid))
}

func (k *AgentKey) mac(workflowKey, uid string) []byte {
	h := hmac.New(sha256.New, k.secret)
	// NUL separators: no workflow key or UID contains one, so
	// ("a/b", "c") and ("a/bc", "") sign different messages.
	h.Write([]byte("anvil agent token\x00"))
	h.Write([]byte(workflowKey))
	h.Write([]byte{0})
	h.Write([]byte(uid))
	return h.Sum(nil)
}
