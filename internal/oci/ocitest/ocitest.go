// Package ocitest builds container images and serves them from an
// in-process registry (go-containerregistry's pkg/registry, the registry
// its own tests use), for the tests and benchmarks of the container path.
// It also rebuilds Tinkerbell's action images from the upstream programs in
// the project's shared directory, as upstream's Dockerfiles do: FROM
// scratch, the one static binary as the entrypoint.
//
// Each helper that fails a test has a twin returning an error, for the
// benchmarks. It is for tests, benchmarks and the lab only; no command
// imports it.
package ocitest

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/untar/untartest"
)

// Registry is an in-process registry on a loopback HTTP (or HTTPS) server.
type Registry struct {
	// Server is the HTTP server; Close stops it (Cleanup does).
	Server *httptest.Server
	// Host is "127.0.0.1:PORT", the registry part of its references.
	Host string

	mu        sync.Mutex
	requests  []string // "METHOD PATH", in order
	intercept func(w http.ResponseWriter, r *http.Request) bool
	inner     http.Handler
}

// RegistryOption changes the registry NewRegistry starts.
type RegistryOption func(*registryConfig)

type registryConfig struct {
	tls  bool
	wrap func(http.Handler) http.Handler
}

// WithTLS serves HTTPS with httptest's certificate (CA returns it).
func WithTLS() RegistryOption { return func(c *registryConfig) { c.tls = true } }

// WithHandler wraps the registry's handler (authentication, for one).
func WithHandler(wrap func(http.Handler) http.Handler) RegistryOption {
	return func(c *registryConfig) { c.wrap = wrap }
}

// NewRegistry starts a registry that the test's end stops.
func NewRegistry(t testing.TB, opts ...RegistryOption) *Registry {
	t.Helper()
	r := StartRegistry(opts...)
	t.Cleanup(r.Server.Close)
	return r
}

// StartRegistry starts a registry; Server.Close stops it.
func StartRegistry(opts ...RegistryOption) *Registry {
	var c registryConfig
	for _, o := range opts {
		o(&c)
	}
	r := &Registry{inner: registry.New(registry.Logger(discardLogger()))}
	var h http.Handler = http.HandlerFunc(r.serve)
	if c.wrap != nil {
		h = c.wrap(h)
	}
	if c.tls {
		r.Server = httptest.NewTLSServer(h)
	} else {
		r.Server = httptest.NewServer(h)
	}
	r.Host = strings.TrimPrefix(strings.TrimPrefix(r.Server.URL, "http://"), "https://")
	return r
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requests = append(r.requests, req.Method+" "+req.URL.Path)
	f := r.intercept
	r.mu.Unlock()
	if f != nil && f(w, req) {
		return
	}
	r.inner.ServeHTTP(w, req)
}

// Intercept makes f see every request first; when it returns true it has
// answered and the registry does not. nil removes it.
func (r *Registry) Intercept(f func(w http.ResponseWriter, r *http.Request) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.intercept = f
}

// Requests counts the requests so far whose "METHOD PATH" contains s.
func (r *Registry) Requests(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.requests {
		if strings.Contains(q, s) {
			n++
		}
	}
	return n
}

// CA is the PEM certificate of a WithTLS registry.
func (r *Registry) CA() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Server.Certificate().Raw}))
}

// Ref is the reference of repo (with its tag or digest) in this registry.
func (r *Registry) Ref(repo string) string { return r.Host + "/" + repo }

// Push pushes img as ref (a full reference: "127.0.0.1:PORT/repo:tag"),
// and returns its digest.
func (r *Registry) Push(t testing.TB, ref string, img v1.Image) string {
	t.Helper()
	d, err := r.PushImage(ref, img)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PushImage is Push for programs without a testing.TB (benchmarks).
func (r *Registry) PushImage(ref string, img v1.Image) (string, error) {
	n, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(n, img, r.remoteOptions()...); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// PushIndex pushes a multi-platform index as ref and returns its digest.
func (r *Registry) PushIndex(t testing.TB, ref string, idx v1.ImageIndex) string {
	t.Helper()
	n, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(n, idx, r.remoteOptions()...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func (r *Registry) remoteOptions() []remote.Option {
	if r.Server == nil || r.Server.TLS == nil { // another registry (Host only), or plain HTTP
		return nil
	}
	pool := x509.NewCertPool()
	pool.AddCert(r.Server.Certificate())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	return []remote.Option{remote.WithTransport(tr)}
}

// Layer is a gzip-compressed layer holding entries.
func Layer(t testing.TB, entries []untartest.Entry) v1.Layer {
	t.Helper()
	v, err := LayerOf(entries)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// LayerOf is Layer for programs without a testing.TB (benchmarks).
func LayerOf(entries []untartest.Entry) (v1.Layer, error) {
	data, err := untartest.TarBytes(entries)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// Image is a linux/amd64 image of layers (bottom first) with cfg as its
// configuration.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	v, err := ImageOf(cfg, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ImageOf is Image for programs without a testing.TB (benchmarks).
func ImageOf(cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	return configure(img, cfg, "amd64")
}

// Configure sets img's configuration and platform (linux/arch).
func Configure(t testing.TB, img v1.Image, cfg v1.Config, arch string) v1.Image {
	t.Helper()
	v, err := configure(img, cfg, arch)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func configure(img v1.Image, cfg v1.Config, arch string) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, cfg
	return mutate.ConfigFile(img, cf)
}

// DamagedLayer is a gzip layer damaged after its header, as a layer
// corrupted after it was built is: its digest is of the damaged bytes (so
// it downloads and verifies), its diff ID of the tar it was made from, and
// it fails to decompress ("flate: corrupt input").
func DamagedLayer(t testing.TB) v1.Layer {
	t.Helper()
	data := untartest.Tar(t, []untartest.Entry{{Name: "f", Body: strings.Repeat("data ", 1000)}})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	damaged := gz.Bytes()
	for i := 20; i < len(damaged)-8; i += 7 {
		damaged[i] ^= 0x5a
	}
	diffID, _, err := v1.SHA256(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return withDiffID{static.NewLayer(damaged, types.DockerLayer), diffID}
}

// withDiffID is a layer with the given diff ID.
type withDiffID struct {
	v1.Layer
	diffID v1.Hash
}

func (l withDiffID) DiffID() (v1.Hash, error) { return l.diffID, nil }

// ProgramImage is an image made as upstream's action Dockerfiles make
// theirs: FROM scratch, the program at path (mode 0755) as the
// entrypoint, and extra files beside it.
func ProgramImage(t testing.TB, program []byte, path string, extra ...untartest.Entry) v1.Image {
	t.Helper()
	v, err := ProgramImageOf(program, path, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ProgramImageOf is ProgramImage for programs without a testing.TB
// (benchmarks).
func ProgramImageOf(program []byte, path string, extra ...untartest.Entry) (v1.Image, error) {
	entries := append([]untartest.Entry{{Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Body: string(program)}}, extra...)
	l, err := LayerOf(entries)
	if err != nil {
		return nil, err
	}
	return ImageOf(v1.Config{
		Entrypoint: []string{path},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}, l)
}

// TinkerbellDir is the directory of the upstream Tinkerbell programs
// (README there): $ANVIL_TINKERBELL_DIR, else ../shared/tinkerbell next to
// the repository. It fails (CI) or skips t when it is missing.
func TinkerbellDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("ANVIL_TINKERBELL_DIR"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	// A git worktree of the repository sits beside the main checkout.
	for _, d := range []string{filepath.Join(dir, "..", "shared", "tinkerbell"), "/work/shared/tinkerbell"} {
		if _, err := os.Stat(filepath.Join(d, "README.md")); err == nil {
			return d
		}
	}
	const what = "the upstream Tinkerbell programs (../shared/tinkerbell, or $ANVIL_TINKERBELL_DIR)"
	if testtool.InCI() {
		t.Fatalf("this test needs %s", what)
	}
	t.Skipf("this test needs %s", what)
	return ""
}

var (
	upstreamMu    sync.Mutex
	upstreamCache = map[string][]byte{}
)

// UpstreamAction is the upstream program of the Tinkerbell action name
// ("image2disk", "writefile", "cexec", …), decompressed from
// action-NAME.xz.
func UpstreamAction(t testing.TB, action string) []byte {
	t.Helper()
	return UpstreamProgram(t, "action-"+action+".xz")
}

// UpstreamProgram is the program file (tink-agent.xz, action-NAME.xz) of
// TinkerbellDir, decompressed with xz(1), once per test binary. xz(1)
// reads the file in large blocks: a Go xz reader on the bare file reads
// it a byte per system call, which on the shared directory's file system
// took over 13 minutes in a CI run.
func UpstreamProgram(t testing.TB, file string) []byte {
	t.Helper()
	upstreamMu.Lock()
	defer upstreamMu.Unlock()
	if b, ok := upstreamCache[file]; ok {
		return b
	}
	src := filepath.Join(TinkerbellDir(t), file)
	xz := testtool.RequireBinary(t, "xz", "xz-utils")
	b, err := exec.Command(xz, "-dc", src).Output()
	if err != nil {
		t.Fatalf("xz -dc %s: %v", src, err)
	}
	upstreamCache[file] = b
	return b
}

// UpstreamImage is the upstream action's image as its Dockerfile makes it:
// FROM scratch, /usr/bin/NAME as the entrypoint.
func UpstreamImage(t testing.TB, action string) v1.Image {
	t.Helper()
	return ProgramImage(t, UpstreamAction(t, action), "/usr/bin/"+action)
}

// discardLogger keeps the registry's request log out of the test output.
func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }
