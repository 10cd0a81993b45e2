package keyring

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/anvilproj/anvil/internal/kubetest"
)

// files are the shared files of one replica's data directory.
func files(dir string, keys ...string) []File {
	var out []File
	for _, k := range keys {
		out = append(out, File{Key: k, Path: filepath.Join(dir, "keys", k)})
	}
	return out
}

// generate makes each missing file random, as the server's load-or-create
// functions do.
func generate(fs []File) func() error {
	return func() error {
		for _, f := range fs {
			if _, err := os.Stat(f.Path); err == nil {
				continue
			}
			b := make([]byte, 32)
			_, _ = rand.Read(b)
			if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(f.Path, b, 0o600); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestSync: the first replica's keys become the cluster's; a second
// replica's own (different) files are replaced by them; a key the Secret
// lacks is made by the replica that needs it and added for the others.
func TestSync(t *testing.T) {
	c := kubetest.Start(t)
	rc := c.RESTConfig()
	sync := func(fs []File) {
		t.Helper()
		if err := Sync(t.Context(), Config{REST: rc, Namespace: "default", Files: fs, Generate: generate(fs)}); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
	read := func(f File) []byte {
		t.Helper()
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := files(t.TempDir(), "agent.key", "seal.key")
	sync(a)
	b := files(t.TempDir(), "agent.key", "seal.key")
	if err := generate(b)(); err != nil { // b had keys of its own
		t.Fatal(err)
	}
	sync(b)
	for i := range a {
		if !bytes.Equal(read(a[i]), read(b[i])) {
			t.Errorf("%s: the second replica kept its own", a[i].Key)
		}
	}
	// A third replica shares one more file: it is added to the Secret,
	// and a fourth gets it.
	c3 := files(t.TempDir(), "agent.key", "seal.key", "tls-ca.pem")
	sync(c3)
	d := files(t.TempDir(), "agent.key", "seal.key", "tls-ca.pem")
	sync(d)
	for i := range c3 {
		if !bytes.Equal(read(c3[i]), read(d[i])) || (i < 2 && !bytes.Equal(read(a[i]), read(d[i]))) {
			t.Errorf("%s differs between replicas", c3[i].Key)
		}
	}
	if fi, err := os.Stat(d[0].Path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("written key mode = %v, %v; want 0600", fi, err)
	}
}
