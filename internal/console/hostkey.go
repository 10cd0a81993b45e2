package console

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"

	"github.com/anvilproj/anvil/internal/atomicfile"
)

// HostKey reads the server's SSH host key from path (OpenSSH's private key
// format, as ssh-keygen writes it), making an Ed25519 key there first when
// there is none: the key must outlive restarts, or every operator's
// known_hosts would cry "REMOTE HOST IDENTIFICATION HAS CHANGED".
func HostKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createHostKey(path); err != nil {
			return nil, err
		}
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("console host key: %w", err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("console host key %s: %w", path, err)
	}
	return s, nil
}

func createHostKey(path string) error {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(key, "anvil console host key")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("console host key: %w", err)
	}
	// Two servers starting on one data dir: the first key wins, the other
	// reads it.
	if err := atomicfile.Create(path, pem.EncodeToMemory(block), 0o600); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("console host key: %w", err)
	}
	return nil
}
