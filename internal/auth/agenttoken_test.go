package auth

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAgentToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "auth", "agent.key")
	k1, err := LoadOrCreateAgentKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	k2, err := LoadOrCreateAgentKey(path)
	if err != nil {
		t.Fatal(err)
	}
	tok := k1.Token("default/wf1", "uid-1")
	if !k2.Valid(tok, "default/wf1", "uid-1") {
		t.Fatal("a token is not valid with the key loaded again from its file")
	}
	other, err := LoadOrCreateAgentKey(filepath.Join(dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, token, key, uid string
		k                     *AgentKey
	}{
		{"other workflow", tok, "default/wf2", "uid-1", k1},
		{"reprovisioned (new UID)", tok, "default/wf1", "uid-2", k1},
		{"separator shift", k1.Token("default/wf", "1uid-1"), "default/wf1", "uid-1", k1},
		{"other server's key", tok, "default/wf1", "uid-1", other},
		{"empty", "", "default/wf1", "uid-1", k1},
		{"prefix only", "v1.", "default/wf1", "uid-1", k1},
		{"no prefix", tok[3:], "default/wf1", "uid-1", k1},
		{"bad base64", "v1.!!!", "default/wf1", "uid-1", k1},
		{"truncated", tok[:len(tok)-2], "default/wf1", "uid-1", k1},
	} {
		if c.k.Valid(c.token, c.key, c.uid) {
			t.Errorf("%s: token accepted", c.name)
		}
	}
	if _, err := NewAgentKey([]byte("short")); err == nil {
		t.Error("a 5-byte key was accepted")
	}
}
