package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	testTag     = "registry.example.org/anvil:v1.2.3"
	testCreated = "1764201600" // 2025-11-27 00:00:00 UTC
	greeting    = "hello from /anvil"
)

// staticBinary builds a tiny static Go program, standing in for anvil:
// the image tool only needs a static executable, and running the one it
// put in the layer proves the layer holds it whole.
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	prog := "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"" + greeting + "\\n\") }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "anvil")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// build runs the tool as `make image` does and returns the reference it
// printed (TAG@DIGEST).
func build(t *testing.T, bin, ca, oci, tarPath string, extra ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	args := append([]string{"-binary", bin, "-ca-bundle", ca, "-version", "v1.2.3", "-revision", "0123456789abcdef0123456789abcdef01234567",
		"-created", testCreated, "-tag", testTag, "-oci-layout", oci, "-tarball", tarPath}, extra...)
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("ociimage %q: exit %d: %s", args, code, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// TestReproducible: two builds of the same binary give the same image,
// byte for byte, although the input files' times differ; another -created
// gives another image.
func TestReproducible(t *testing.T) {
	bin := staticBinary(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nnot parsed\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := t.TempDir(), t.TempDir()
	refA := build(t, bin, ca, filepath.Join(a, "oci"), filepath.Join(a, "image.tar"))
	for _, f := range []string{bin, ca} {
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	refB := build(t, bin, ca, filepath.Join(b, "oci"), filepath.Join(b, "image.tar"))
	if refA != refB || !strings.HasPrefix(refA, testTag+"@sha256:") {
		t.Fatalf("two builds: %s and %s; want the same %s@sha256:…", refA, refB, testTag)
	}
	for _, f := range []string{"image.tar", "oci/index.json"} {
		x, errX := os.ReadFile(filepath.Join(a, f))
		y, errY := os.ReadFile(filepath.Join(b, f))
		if errX != nil || errY != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between the two builds (%v, %v)", f, errX, errY)
		}
	}

	c := t.TempDir()
	refC := build(t, bin, ca, filepath.Join(c, "oci"), filepath.Join(c, "image.tar"), "-created", "1764288000")
	if refC == refA {
		t.Errorf("-created changed, digest did not: %s", refC)
	}
}

// TestImage reads back what the tool wrote and checks the image's
// contract: a valid OCI image for the binary's platform, entrypoint
// `/anvil serve --store kubernetes`, user 65532, the OCI labels, and one
// layer with /anvil executable (run from the layer), the CA bundle and
// the writable directories, every time the fixed one.
func TestImage(t *testing.T) {
	bin := staticBinary(t)
	ca := "/etc/ssl/certs/ca-certificates.crt"
	caBytes, err := os.ReadFile(ca)
	if err != nil {
		ca = filepath.Join(t.TempDir(), "ca.pem")
		caBytes = []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
		if err := os.WriteFile(ca, caBytes, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	ref := build(t, bin, ca, filepath.Join(dir, "oci"), filepath.Join(dir, "image.tar"))

	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[refNameAnnotation] != testTag {
		t.Fatalf("OCI layout index: %+v; want one image named %s", im.Manifests, testTag)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, img)
	if d, _ := img.Digest(); ref != testTag+"@"+d.String() {
		t.Errorf("printed %s; the layout's image is %s", ref, d)
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2025, 11, 27, 0, 0, 0, 0, time.UTC)
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/anvil", "serve", "--store", "kubernetes"}) ||
		cfg.Config.User != "65532:65532" || cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH ||
		!cfg.Created.Time.Equal(created) {
		t.Errorf("config: entrypoint %q, user %q, platform %s/%s, created %v", cfg.Config.Entrypoint, cfg.Config.User,
			cfg.OS, cfg.Architecture, cfg.Created.Time)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  "v1.2.3",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.source":   "https://github.com/anvilproj/anvil",
	} {
		if cfg.Config.Labels[k] != v {
			t.Errorf("label %s = %q; want %q", k, cfg.Config.Labels[k], v)
		}
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want 1", len(layers), err)
	}
	files := readLayer(t, layers[0], created)
	want, _ := os.ReadFile(bin)
	anvil := files["anvil"]
	if anvil == nil || anvil.mode != 0o755 || !bytes.Equal(anvil.data, want) {
		t.Fatalf("the layer's anvil: %+v; want the binary, mode 0755", anvil)
	}
	if f := files[caPath]; f == nil || !bytes.Equal(f.data, caBytes) {
		t.Errorf("the layer has no %s with the CA bundle", caPath)
	}
	if f := files["var/lib/anvil/"]; f == nil || f.uid != 65532 {
		t.Errorf("var/lib/anvil/: %+v; want a directory of uid 65532", f)
	}
	if f := files["tmp/"]; f == nil || f.mode != 0o1777 {
		t.Errorf("tmp/: %+v; want a directory of mode 1777", f)
	}
	extracted := filepath.Join(t.TempDir(), "anvil")
	if err := os.WriteFile(extracted, anvil.data, os.FileMode(anvil.mode)); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(extracted).Output(); err != nil || strings.TrimSpace(string(out)) != greeting {
		t.Errorf("running the layer's /anvil: %q, %v; want %q", out, err, greeting)
	}

	// The docker save tarball holds the same image: same config, same
	// layer.
	tag, _ := name.NewTag(testTag)
	fromTar, err := tarball.ImageFromPath(filepath.Join(dir, "image.tar"), &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfgA, _ := img.ConfigName()
	cfgB, errB := fromTar.ConfigName()
	if errB != nil || cfgA != cfgB {
		t.Errorf("the tarball's config %s (%v); the layout's %s", cfgB, errB, cfgA)
	}
}

// verify checks that every blob of img is what the manifest and the
// config say: the config's digest, each layer's digest (compressed) and
// diff ID (uncompressed), and the manifest's media types, as a registry
// and a container runtime check them.
func verify(t *testing.T, img v1.Image) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("media types: manifest %s, config %s; want OCI's", m.MediaType, m.Config.MediaType)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := v1.SHA256(bytes.NewReader(raw)); h != m.Config.Digest {
		t.Errorf("config digest %s; the manifest says %s", h, m.Config.Digest)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != len(m.Layers) || len(layers) != len(cfg.RootFS.DiffIDs) {
		t.Fatalf("%d layers (%v); the manifest lists %d, the config %d", len(layers), err, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	for i, l := range layers {
		for _, c := range []struct {
			what string
			open func() (io.ReadCloser, error)
			want v1.Hash
		}{{"digest", l.Compressed, m.Layers[i].Digest}, {"diff ID", l.Uncompressed, cfg.RootFS.DiffIDs[i]}} {
			rc, err := c.open()
			if err != nil {
				t.Fatal(err)
			}
			h, _, err := v1.SHA256(rc)
			rc.Close()
			if err != nil || h != c.want {
				t.Errorf("layer %d: %s %s (%v); want %s", i, c.what, h, err, c.want)
			}
		}
		if m.Layers[i].MediaType != types.OCILayer {
			t.Errorf("layer %d: media type %s; want %s", i, m.Layers[i].MediaType, types.OCILayer)
		}
	}
}

type file struct {
	mode int64
	uid  int
	data []byte
}

// readLayer returns the files of a layer by name, failing t if one's time
// is not created.
func readLayer(t *testing.T, l v1.Layer, created time.Time) map[string]*file {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]*file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: time %v; want %v", h.Name, h.ModTime, created)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = &file{mode: h.Mode, uid: h.Uid, data: data}
	}
}

// TestRefusals: bad input is refused with a message naming its cause, and
// nothing is written over a directory that is not an image layout.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notLayout := filepath.Join(dir, "precious")
	if err := os.MkdirAll(notLayout, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(notLayout, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	static := staticBinary(t)
	dynamic, err := exec.LookPath("sh") // Debian's /bin/sh (dash) links libc
	if err != nil {
		t.Fatal(err)
	}

	base := []string{"-version", "v1", "-revision", "abc", "-tag", testTag}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no binary", []string{"-version", "v1", "-revision", "abc", "-tag", testTag, "-tarball", filepath.Join(dir, "x.tar")}, 2, "-binary, -version, -revision and -tag are required"},
		{"no output", append([]string{"-binary", static}, base...), 2, "nothing to write"},
		{"bad tag", []string{"-binary", static, "-version", "v1", "-revision", "abc", "-tag", "Not A Tag", "-tarball", filepath.Join(dir, "x.tar")}, 2, `-tag "Not A Tag"`},
		{"bad created", append([]string{"-binary", static, "-created", "yesterday", "-tarball", filepath.Join(dir, "x.tar")}, base...), 2, "want Unix seconds"},
		{"missing binary", append([]string{"-binary", filepath.Join(dir, "nope"), "-tarball", filepath.Join(dir, "x.tar")}, base...), 1, "no such file"},
		{"not ELF", append([]string{"-binary", text, "-tarball", filepath.Join(dir, "x.tar")}, base...), 1, "not an ELF executable"},
		{"dynamic", append([]string{"-binary", dynamic, "-tarball", filepath.Join(dir, "x.tar")}, base...), 1, "dynamically linked (interpreter /"},
		{"layout over other files", append([]string{"-binary", static, "-oci-layout", notLayout}, base...), 1, "not an OCI image layout; not replacing it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, &out, &errOut)
			if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("exit %d, %q; want exit %d and %q", code, errOut.String(), tc.code, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Errorf("%s: %q, %v; want it untouched", keep, b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.tar")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused build left x.tar (%v)", err)
	}
}
