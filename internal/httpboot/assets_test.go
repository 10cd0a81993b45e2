package httpboot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// assetsDir makes an assets directory: a kernel, a sysext image and its
// .conf in a subdirectory, awkward names, a link inside and one out.
func assetsDir(t *testing.T) (dir string, files map[string][]byte) {
	t.Helper()
	dir, outside := t.TempDir(), t.TempDir()
	files = map[string][]byte{
		"vmlinuz":                            bytes.Repeat([]byte("kernel"), 5000),
		"flatcar/sysext/kubernetes.raw":      bytes.Repeat([]byte{0, 1, 2, 3}, 10000),
		"flatcar/sysext/kubernetes.conf":     []byte("[Unit]\n"),
		"with space.conf":                    []byte("x"),
		`back\slash`:                         []byte("y"),
		"flatcar/sysext/kubernetes-link.raw": nil, // a link to kubernetes.raw
	}
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if b == nil {
			if err := os.Symlink("kubernetes.raw", p); err != nil {
				t.Fatal(err)
			}
			files[name] = files["flatcar/sysext/kubernetes.raw"]
			continue
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape-dir")); err != nil {
		t.Fatal(err)
	}
	return dir, files
}

func newAssetsTest(t *testing.T) (*Handler, *recorder, string, map[string][]byte) {
	t.Helper()
	dir, files := assetsDir(t)
	assets, err := DirFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, rec := newTest(t, Config{Assets: assets})
	return h, rec, dir, files
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestAssetsFile(t *testing.T) {
	h, rec, _, files := newAssetsTest(t)
	raw := files["flatcar/sysext/kubernetes.raw"]

	w := do(h, "GET", "/assets/flatcar/sysext/kubernetes.raw")
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), raw) || w.Header().Get("Content-Length") != "40000" {
		t.Fatalf("GET kubernetes.raw = %d, %d bytes, Content-Length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}
	if e := rec.last(t); e.Message != "GET /assets/flatcar/sysext/kubernetes.raw: 200, 40,000 bytes" {
		t.Errorf("event message = %q", e.Message)
	}
	etag, lm := w.Header().Get("ETag"), w.Header().Get("Last-Modified")

	w = do(h, "GET", "/assets/flatcar/sysext/kubernetes.raw", "Range", "bytes=100-199")
	if w.Code != 206 || !bytes.Equal(w.Body.Bytes(), raw[100:200]) || w.Header().Get("Content-Range") != "bytes 100-199/40000" {
		t.Errorf("Range 100-199 = %d, %d bytes, Content-Range %q", w.Code, w.Body.Len(), w.Header().Get("Content-Range"))
	}
	if w := do(h, "GET", "/assets/flatcar/sysext/kubernetes.raw", "If-None-Match", etag); w.Code != 304 || w.Body.Len() != 0 {
		t.Errorf("If-None-Match %s = %d; want 304", etag, w.Code)
	}
	if w := do(h, "GET", "/assets/flatcar/sysext/kubernetes.raw", "If-Modified-Since", lm); w.Code != 304 {
		t.Errorf("If-Modified-Since %s = %d; want 304", lm, w.Code)
	}
	if w := do(h, "HEAD", "/assets/vmlinuz"); w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") != "30000" {
		t.Errorf("HEAD vmlinuz = %d, %d bytes, Content-Length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}
	if w := do(h, "GET", "/assets/flatcar/sysext/kubernetes-link.raw"); w.Code != 200 || !bytes.Equal(w.Body.Bytes(), raw) {
		t.Errorf("a link inside the directory = %d; want 200 and its target", w.Code)
	}
	for _, p := range []string{"/assets/escape", "/assets/escape-dir/secret", "/assets/..%2f..%2fetc%2fpasswd",
		"/assets/flatcar/..%2f..%2fsecret", "/assets/flatcar", "/assets/nope"} {
		if w := do(h, "GET", p); w.Code != 404 {
			t.Errorf("GET %s = %d; want 404 (body %q)", p, w.Code, w.Body.String())
		}
	}
	if w := do(h, "GET", "/assets/../../etc/passwd"); w.Code == 200 {
		t.Errorf("GET /assets/../../etc/passwd served %q", w.Body.String())
	}
	none, _ := newTest(t, Config{})
	for _, p := range []string{"/assets/vmlinuz", "/assets/", "/assets/SHA256SUMS"} {
		if w := do(none, "GET", p); w.Code != 404 {
			t.Errorf("no Assets: GET %s = %d; want 404", p, w.Code)
		}
	}
}

// TestAssetsSums checks SHA256SUMS with the real sha256sum, the JSON
// listing against the files, and that a digest is computed once per
// version of a file.
func TestAssetsSums(t *testing.T) {
	sha256sum := testtool.RequireBinary(t, "sha256sum", "coreutils")
	h, rec, dir, files := newAssetsTest(t)

	w := do(h, "GET", "/assets/SHA256SUMS")
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("GET SHA256SUMS = %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	sums := w.Body.String()
	if got := strings.Count(sums, "\n"); got != len(files) {
		t.Errorf("SHA256SUMS has %d lines; want %d (escape links left out):\n%s", got, len(files), sums)
	}
	if e := rec.last(t); !strings.Contains(e.Message, "200, 6 files listed") {
		t.Errorf("event message = %q", e.Message)
	}
	check := func(when string) {
		t.Helper()
		cmd := exec.Command(sha256sum, "--check", "--strict", "-")
		cmd.Dir, cmd.Stdin = dir, strings.NewReader(sums)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: sha256sum -c: %v\n%s\nSHA256SUMS:\n%s", when, err, out, sums)
		}
	}
	check("first listing")
	if h.sums.hashed != len(files) {
		t.Errorf("first listing hashed %d files; want %d", h.sums.hashed, len(files))
	}

	var list AssetList
	w = do(h, "GET", "/assets/")
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /assets/: %v, Content-Type %q:\n%s", err, w.Header().Get("Content-Type"), w.Body.String())
	}
	if len(list.Files) != len(files) {
		t.Errorf("listing has %d files; want %d", len(list.Files), len(files))
	}
	for _, f := range list.Files {
		if b, ok := files[f.Name]; !ok || f.Size != int64(len(b)) || f.SHA256 != sha256Hex(b) || f.ModTime.IsZero() {
			t.Errorf("listing entry %+v; want size %d sha256 %s", f, len(b), sha256Hex(b))
		}
	}
	if h.sums.hashed != len(files) {
		t.Errorf("second listing hashed again: %d files hashed in all; want %d", h.sums.hashed, len(files))
	}
	etag := w.Header().Get("ETag")
	if w := do(h, "GET", "/assets/", "If-None-Match", etag); w.Code != 304 {
		t.Errorf("listing If-None-Match = %d; want 304", w.Code)
	}

	// A rewritten file is hashed again, and only it; a removed one leaves.
	later := time.Now().Add(time.Minute)
	vmlinuz := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(vmlinuz, []byte("new kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(vmlinuz, later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "with space.conf")); err != nil {
		t.Fatal(err)
	}
	before := h.sums.hashed
	sums = do(h, "GET", "/assets/SHA256SUMS").Body.String()
	if !strings.Contains(sums, sha256Hex([]byte("new kernel"))+"  vmlinuz\n") || strings.Contains(sums, "with space") {
		t.Errorf("after a rewrite and a removal SHA256SUMS =\n%s", sums)
	}
	if got := h.sums.hashed - before; got != 1 {
		t.Errorf("after one file changed, %d files were hashed; want 1", got)
	}
	check("after a change")
	if w := do(h, "GET", "/assets/", "If-None-Match", etag); w.Code != 200 {
		t.Errorf("listing If-None-Match with the old ETag after a change = %d; want 200", w.Code)
	}
}
