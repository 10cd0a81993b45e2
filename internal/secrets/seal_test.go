package secrets

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

func testSecret() *model.Secret {
	return &model.Secret{
		ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "bm-auth"},
		Data:       map[string]string{"username": "YWRtaW4="},        // admin
		StringData: map[string]string{"password": "hunter2-correct"}, // wins over data
	}
}

func TestSealRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k", KeyFileName)
	k, err := OpenSealer(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := testSecret()
	if err := k.Seal(s); err != nil {
		t.Fatal(err)
	}
	if s.Data != nil || s.StringData != nil || !strings.HasPrefix(s.Sealed, sealedPrefix) || strings.Join(s.Keys, ",") != "password,username" {
		t.Fatalf("sealed secret = %+v", s)
	}
	if strings.Contains(s.Sealed, "hunter2") || strings.Contains(s.Sealed, "YWRtaW4") {
		t.Fatalf("sealed form shows the plain text: %s", s.Sealed)
	}
	// The key file persists: a second Sealer on it opens what the first sealed.
	k2, err := OpenSealer(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k2.Open(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(got["username"]) != "admin" || string(got["password"]) != "hunter2-correct" {
		t.Errorf("Open = %q", got)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %#o, want 0600", fi.Mode().Perm())
	}
}

func TestSealRefusals(t *testing.T) {
	k, err := NewSealer(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	s := testSecret()
	if err := k.Seal(s); err != nil {
		t.Fatal(err)
	}
	// Moved onto another Secret's name: refused (bound by name).
	moved := *s
	moved.Name = "other"
	if _, err := k.Open(&moved); err == nil || !strings.Contains(err.Error(), "cannot unseal") {
		t.Errorf("Open of a moved ciphertext: %v", err)
	}
	// Another key: refused, and the error says what to check.
	other, _ := NewSealer(bytes.Repeat([]byte{2}, 32))
	if _, err := other.Open(s); err == nil || !strings.Contains(err.Error(), "seal key file") {
		t.Errorf("Open with another key: %v", err)
	}
	// A key file others may read: refused.
	path := filepath.Join(t.TempDir(), KeyFileName)
	if err := os.WriteFile(path, bytes.Repeat([]byte{3}, 32), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSealer(path, nil); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("OpenSealer of a 0644 key: %v", err)
	}
	// Bad base64 in data: named by key, value not repeated.
	bad := &model.Secret{ObjectMeta: model.ObjectMeta{Name: "x"}, Data: map[string]string{"password": "%%hunter2%%"}}
	err = k.Seal(bad)
	if err == nil || !strings.Contains(err.Error(), "data.password") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Seal of bad base64: %v", err)
	}
}

// FuzzOpen: a sealed value not made by Seal with this key (corrupt,
// truncated, forged, another scheme) never opens and never panics; a value
// Seal makes always opens to what was sealed.
func FuzzOpen(f *testing.F) {
	k, err := NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("v1:dFzb2xFjcOlqx/IsqpUFsuFpPK13JCQsA+5TQYhft73a7cmhkWHihazd1ySf7qCw", "pw") // well-formed, forged
	f.Add("v1:", "")                                                                   // empty body
	f.Add("v1:!!!notbase64", "x")                                                      // bad base64
	f.Add("v2:AAAA", "x")                                                              // unknown scheme
	f.Fuzz(func(t *testing.T, sealed, password string) {
		s := &model.Secret{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "f"}, Sealed: sealed}
		if _, err := k.Open(s); err == nil && sealed != "" {
			t.Fatalf("Open(%q) succeeded", sealed)
		}
		s = &model.Secret{ObjectMeta: model.ObjectMeta{Name: "f"}, StringData: map[string]string{"password": password}}
		if err := k.Seal(s); err != nil {
			t.Fatal(err)
		}
		got, err := k.Open(s)
		if err != nil || string(got["password"]) != password {
			t.Fatalf("round trip of %q: %q, %v", password, got["password"], err)
		}
	})
}

// TestClusterKept: with Kubernetes keeping Secrets, a Secret stays as
// kubectl wrote it and opens as it is; one sealed by the embedded store's
// server (moved into the cluster) still opens with the key; bad base64 is
// refused by name, not shown.
func TestClusterKept(t *testing.T) {
	k, err := OpenSealer(filepath.Join(t.TempDir(), KeyFileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	ck := k.ClusterKept()
	s := testSecret()
	if err := ck.Seal(s); err != nil {
		t.Fatal(err)
	}
	if s.Sealed != "" || s.Data["username"] != "YWRtaW4=" || s.StringData["password"] != "hunter2-correct" {
		t.Fatalf("cluster-kept Seal changed the secret: %+v", s)
	}
	got, err := ck.Open(s)
	if err != nil || string(got["username"]) != "admin" || string(got["password"]) != "hunter2-correct" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := k.Open(s); err == nil {
		t.Error("the embedded store's sealer opened an unsealed Secret; it must refuse")
	}

	moved := testSecret()
	if err := k.Seal(moved); err != nil {
		t.Fatal(err)
	}
	if got, err := ck.Open(moved); err != nil || string(got["password"]) != "hunter2-correct" {
		t.Errorf("Open of a sealed Secret by the cluster-kept sealer = %q, %v", got, err)
	}

	bad := &model.Secret{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "b"}, Data: map[string]string{"password": "not base64!"}}
	if err := ck.Seal(bad); err == nil || !strings.Contains(err.Error(), "data.password") || strings.Contains(err.Error(), "not base64!") {
		t.Errorf("Seal of bad base64 = %v; want an error naming data.password without its value", err)
	}
}
