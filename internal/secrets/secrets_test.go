package secrets_test

import (
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/secrets"
)

func open(t *testing.T, dir string) *secrets.Store {
	t.Helper()
	s, err := secrets.Open(secrets.Config{Dir: dir})
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	return s
}

func TestFormats(t *testing.T) {
	tests := []struct {
		kind string
		want *regexp.Regexp
	}{
		{secrets.KindKubeadmToken, regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)},
		{secrets.KindHex32, regexp.MustCompile(`^[0-9a-f]{64}$`)},
		{secrets.KindPassword, regexp.MustCompile(`^[A-Za-z0-9_-]{24}$`)},
		{secrets.KindSSHEd25519, regexp.MustCompile(`(?s)^-----BEGIN OPENSSH PRIVATE KEY-----\n.*-----END OPENSSH PRIVATE KEY-----\n$`)},
	}
	s := open(t, t.TempDir())
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			// Several values, so a format that only sometimes fails shows.
			for i := range 20 {
				v, err := s.Secret("ns", tc.kind+string(rune('a'+i)), tc.kind)
				if err != nil {
					t.Fatal(err)
				}
				if !tc.want.MatchString(v) {
					t.Fatalf("Secret(%s) = %q; want a match of %s", tc.kind, v, tc.want)
				}
				if tc.kind == secrets.KindSSHEd25519 {
					if blk, _ := pem.Decode([]byte(v)); blk == nil {
						t.Fatalf("ssh-ed25519 value is not PEM")
					}
					k, err := ssh.ParsePrivateKey([]byte(v))
					if err != nil || k.PublicKey().Type() != ssh.KeyAlgoED25519 {
						t.Fatalf("ssh.ParsePrivateKey = %v, %v; want an ed25519 key", k, err)
					}
				}
			}
		})
	}
}

func TestGeneratedOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s, err := secrets.Open(secrets.Config{Dir: dir, Clock: clock.NewFake(now)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Secret("default", "join", secrets.KindKubeadmToken)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Secret("default", "join", secrets.KindKubeadmToken)
	if err != nil || again != first {
		t.Fatalf("second Secret = %q, %v; want %q", again, err, first)
	}
	other, err := s.Secret("other", "join", secrets.KindKubeadmToken)
	if err != nil || other == first {
		t.Fatalf("Secret in another namespace = %q, %v; want a different value", other, err)
	}

	reopened := open(t, dir)
	v, info, err := reopened.Get("default", "join")
	if err != nil || v != first {
		t.Fatalf("Get after reopening = %q, %v; want %q", v, err, first)
	}
	if info.Kind != secrets.KindKubeadmToken || !info.Created.Equal(now) {
		t.Errorf("Get info = %+v; want kind %s created %v", info, secrets.KindKubeadmToken, now)
	}
	if v, err := reopened.Secret("default", "join", secrets.KindKubeadmToken); err != nil || v != first {
		t.Errorf("Secret after reopening = %q, %v; want %q", v, err, first)
	}
	list := reopened.List()
	if len(list) != 2 || list[0].Namespace != "default" || list[1].Namespace != "other" || list[0].Name != "join" {
		t.Errorf("List = %+v; want default/join and other/join", list)
	}

	fi, err := os.Stat(filepath.Join(dir, secrets.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("secrets file mode = %#o; want 0600", perm)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.Secret("ns", "k", secrets.KindHex32); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Secret("ns", "k", secrets.KindPassword); err == nil || !strings.Contains(err.Error(), "is of kind hex32, not password") {
		t.Errorf("Secret with another kind = %v; want a kind error", err)
	}
	if _, err := s.Secret("ns", "new", "rsa-4096"); err == nil || !strings.Contains(err.Error(), `unknown kind "rsa-4096"`) {
		t.Errorf("Secret with an unknown kind = %v; want an unknown kind error", err)
	}
	if _, _, err := s.Get("ns", "new"); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("Get of a failed secret = %v; want ErrNotFound", err)
	}
	if _, err := s.Secret("ns", "", secrets.KindHex32); err == nil {
		t.Errorf("Secret with an empty name = nil error")
	}

	if err := os.Chmod(filepath.Join(dir, secrets.FileName), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Open(secrets.Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "want 0600") {
		t.Errorf("Open of a 0644 secrets file = %v; want a mode error", err)
	}
}

func TestConcurrentFirstUse(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	const n = 16
	vals := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { vals[i], errs[i] = s.Secret("ns", "join", secrets.KindKubeadmToken) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || vals[i] != vals[0] {
			t.Fatalf("goroutine %d got %q, %v; want %q like goroutine 0", i, vals[i], errs[i], vals[0])
		}
	}
	if v, _, err := open(t, dir).Get("ns", "join"); err != nil || v != vals[0] {
		t.Errorf("kept value = %q, %v; want %q", v, err, vals[0])
	}
}

// TestImport: secrets moved from another store (anvil restore) are kept
// across a reopen and read back by All and Secret; a name that exists is
// refused, none of the batch added, unless replace; an unknown kind is
// refused.
func TestImport(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	mine, err := s.Secret("site-a", "join", secrets.KindKubeadmToken)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	moved := []secrets.Generated{
		{Info: secrets.Info{Namespace: "site-a", Name: "root-pw", Kind: secrets.KindPassword, Created: created}, Value: "moved-password"},
		{Info: secrets.Info{Namespace: "site-a", Name: "join", Kind: secrets.KindKubeadmToken, Created: created}, Value: "abcdef.0123456789abcdef"},
	}
	if err := s.Import(moved, false); !errors.Is(err, secrets.ErrExists) || !strings.Contains(err.Error(), "site-a/join") {
		t.Errorf("Import over an existing name = %v; want ErrExists naming it", err)
	}
	if _, _, err := s.Get("site-a", "root-pw"); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("a refused Import added root-pw (Get: %v)", err)
	}
	if v, err := s.Secret("site-a", "join", secrets.KindKubeadmToken); err != nil || v != mine {
		t.Errorf("after a refused Import, join = %q, %v; want the value it had", v, err)
	}
	bad := []secrets.Generated{{Info: secrets.Info{Namespace: "d", Name: "x", Kind: "rot13"}, Value: "v"}}
	if err := s.Import(bad, false); err == nil || !strings.Contains(err.Error(), `unknown kind "rot13"`) {
		t.Errorf("Import of an unknown kind = %v; want refused", err)
	}
	if err := s.Import(moved, true); err != nil {
		t.Fatal(err)
	}
	again := open(t, dir)
	all := again.All()
	if len(all) != 2 || all[0] != moved[1] || all[1] != moved[0] {
		t.Errorf("All after a reopen = %+v; want the moved secrets, by name", all)
	}
	if v, err := again.Secret("site-a", "root-pw", secrets.KindPassword); err != nil || v != "moved-password" {
		t.Errorf("Secret(root-pw) = %q, %v; want the moved value, not a new one", v, err)
	}
}
