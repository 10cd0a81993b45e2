package oci_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/oci/ocitest"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/untar/untartest"
)

// newPuller is a Puller with its cache in a temporary directory.
func newPuller(t *testing.T, limit int64) (*oci.Puller, string) {
	t.Helper()
	testtool.RequireRoot(t, "unpacking images gives their files their owners")
	dir := t.TempDir()
	p, err := oci.New(oci.Config{Dir: dir, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	return p, dir
}

// plain is how a test pulls from its own registry: plain HTTP allowed.
func plain(ref string) oci.Source { return oci.Source{Image: ref, Ref: ref, PlainHTTP: true} }

// checkClean fails t if a pull left a staging directory or holds cache
// space beyond want.
func checkClean(t *testing.T, p *oci.Puller, dir string, want int64) {
	t.Helper()
	left, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	if len(left) > 0 {
		t.Errorf("a pull left %d staging directories", len(left))
	}
	if got := p.Used(); got != want {
		t.Errorf("the cache holds %d bytes; want %d", got, want)
	}
}

// twoLayers is an image of two layers: the second changes a file and
// deletes another (an OCI whiteout), as image builds do.
func twoLayers(t *testing.T) v1.Image {
	return ocitest.Image(t, v1.Config{Entrypoint: []string{"/bin/tool"}, Env: []string{"A=1"}, WorkingDir: "/work"},
		ocitest.Layer(t, []untartest.Entry{
			{Name: "bin/", Type: tar.TypeDir, Mode: 0o755},
			{Name: "bin/tool", Mode: 0o755, Body: "v1"},
			{Name: "etc/old.conf", Body: "gone"},
			{Name: "etc/keep.conf", Body: "kept"},
		}),
		ocitest.Layer(t, []untartest.Entry{
			{Name: "bin/tool", Mode: 0o755, Body: "v2"},
			{Name: "etc/.wh.old.conf"},
		}))
}

func TestPullUnpacksAndCaches(t *testing.T) {
	p, dir := newPuller(t, 0)
	reg := ocitest.NewRegistry(t)
	ref := reg.Ref("tinkerbell/actions/tool:v1")
	digest := reg.Push(t, ref, twoLayers(t))

	var prog oci.Progress
	im, err := p.Pull(context.Background(), plain(ref), &prog)
	if err != nil {
		t.Fatal(err)
	}
	if im.Cached || im.Digest != digest || im.Layers != 2 || im.Fetched == 0 || prog.Total.Load() == 0 {
		t.Errorf("first pull: %+v (total %d); want a download of 2 layers, digest %s", im, prog.Total.Load(), digest)
	}
	read := func(p string) string { b, _ := os.ReadFile(filepath.Join(im.Rootfs, p)); return string(b) }
	if read("bin/tool") != "v2" || read("etc/keep.conf") != "kept" {
		t.Errorf("rootfs: bin/tool %q, etc/keep.conf %q; want the upper layer's v2 and the kept file", read("bin/tool"), read("etc/keep.conf"))
	}
	for _, gone := range []string{"etc/old.conf", "etc/.wh.old.conf"} {
		if _, err := os.Lstat(filepath.Join(im.Rootfs, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after the whiteout: %v", gone, err)
		}
	}
	if im.Config.WorkingDir != "/work" || im.Config.Entrypoint[0] != "/bin/tool" {
		t.Errorf("config %+v", im.Config)
	}
	im.Release()
	checkClean(t, p, dir, im.Size)

	// Warm: the tag is resolved (one manifest request) and no blob is
	// fetched again.
	blobs := reg.Requests("/blobs/")
	again, err := p.Pull(context.Background(), plain(ref), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release()
	if !again.Cached || again.Rootfs != im.Rootfs || reg.Requests("/blobs/") != blobs {
		t.Errorf("second pull: cached %v, %d new blob requests; want the cached image and none", again.Cached, reg.Requests("/blobs/")-blobs)
	}
}

// TestPullPinnedOffline: an image pinned by digest is found in the cache
// without the registry, even when it is gone.
func TestPullPinnedOffline(t *testing.T) {
	p, _ := newPuller(t, 0)
	reg := ocitest.NewRegistry(t)
	digest := reg.Push(t, reg.Ref("a/b:v1"), twoLayers(t))
	pinned := reg.Ref("a/b@" + digest)
	im, err := p.Pull(context.Background(), plain(pinned), nil)
	if err != nil {
		t.Fatal(err)
	}
	im.Release()
	reg.Server.Close()
	im, err = p.Pull(context.Background(), plain(pinned), nil)
	if err != nil {
		t.Fatalf("pinned pull with the registry down: %v", err)
	}
	im.Release()
	if !im.Cached {
		t.Error("not from the cache")
	}
}

// TestPullMovedTag: a tag that now names another image pulls that image.
func TestPullMovedTag(t *testing.T) {
	p, _ := newPuller(t, 0)
	reg := ocitest.NewRegistry(t)
	ref := reg.Ref("a/b:latest")
	first := reg.Push(t, ref, ocitest.ProgramImage(t, []byte("one"), "/bin/x"))
	im, err := p.Pull(context.Background(), plain(ref), nil)
	if err != nil {
		t.Fatal(err)
	}
	im.Release()
	second := reg.Push(t, ref, ocitest.ProgramImage(t, []byte("two"), "/bin/x"))
	im, err = p.Pull(context.Background(), plain(ref), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Release()
	if b, _ := os.ReadFile(filepath.Join(im.Rootfs, "bin/x")); im.Digest != second || im.Cached || string(b) != "two" {
		t.Errorf("after the tag moved from %s to %s: pulled %s (cached %v) holding %q", first, second, im.Digest, im.Cached, b)
	}
}

// TestPullPicksPlatform: from a multi-platform index, this machine's image.
func TestPullPicksPlatform(t *testing.T) {
	p, _ := newPuller(t, 0)
	reg := ocitest.NewRegistry(t)
	arm := ocitest.Configure(t, ocitest.ProgramImage(t, []byte("arm64"), "/bin/x"), v1.Config{Entrypoint: []string{"/bin/x"}}, "arm64")
	amd := ocitest.ProgramImage(t, []byte("amd64"), "/bin/x")
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	reg.PushIndex(t, reg.Ref("multi/x:1"), idx)
	im, err := p.Pull(context.Background(), plain(reg.Ref("multi/x:1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Release()
	want, _ := amd.Digest()
	if b, _ := os.ReadFile(filepath.Join(im.Rootfs, "bin/x")); string(b) != "amd64" || im.Digest != want.String() {
		t.Errorf("pulled %s holding %q; want the amd64 image %s", im.Digest, b, want)
	}

	// An image built for another platform alone is refused, not run.
	reg.Push(t, reg.Ref("arm/only:1"), arm)
	if _, err := p.Pull(context.Background(), plain(reg.Ref("arm/only:1")), nil); err == nil ||
		!strings.Contains(err.Error(), "the image is for linux/arm64, this machine is linux/amd64") {
		t.Errorf("arm64 image: %v; want it refused naming both platforms", err)
	}
}

// TestPullEvictsLeastRecentlyUsed: a full cache drops the image used
// longest ago that no one holds, never one in use.
func TestPullEvictsLeastRecentlyUsed(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	refs := map[string]string{}
	var size int64
	for _, n := range []string{"a", "b", "c"} {
		refs[n] = reg.Ref("lru/" + n + ":1")
		reg.Push(t, refs[n], ocitest.ProgramImage(t, bytes.Repeat([]byte(n), 400<<10), "/bin/"+n))
	}
	// Each image unpacks to a little over 400 KiB: room for two, not
	// three.
	p, _ := newPuller(t, 1<<20)
	pull := func(n string) *oci.Image {
		t.Helper()
		im, err := p.Pull(context.Background(), plain(refs[n]), nil)
		if err != nil {
			t.Fatalf("pull %s: %v", n, err)
		}
		size = im.Size
		return im
	}
	pull("a").Release()
	pull("b").Release()
	pull("a").Release() // a is now more recent than b
	pull("c").Release() // evicts b
	got := p.Cached()
	if len(got) != 2 {
		t.Fatalf("cached %v; want two images (each %d bytes, limit 1 MiB)", got, size)
	}
	if im := pull("a"); !im.Cached {
		t.Error("a was evicted; b was the least recently used")
	} else {
		im.Release()
	}

	// Held images are never evicted: with a and c leased, b does not fit.
	a, c := pull("a"), pull("c")
	defer a.Release()
	defer c.Release()
	_, err := p.Pull(context.Background(), plain(refs["b"]), nil)
	if !errors.Is(err, oci.ErrTooBig) || !strings.Contains(err.Error(), "is held by images in use") {
		t.Errorf("pull b with the others held: %v; want ErrTooBig saying the cache is held", err)
	}
	if _, err := os.Stat(a.Rootfs); err != nil {
		t.Errorf("a leased image was evicted: %v", err)
	}
}

// TestPullBadInput: every way a pull fails names the image and the cause,
// leaves nothing in the cache, and leaves the Puller usable.
func TestPullBadInput(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	good := reg.Ref("good/img:1")
	goodDigest := reg.Push(t, good, twoLayers(t))

	notGzip := ocitest.Image(t, v1.Config{}, ocitest.DamagedLayer(t))
	reg.Push(t, reg.Ref("bad/notgzip:1"), notGzip)
	// 4 MiB of zeros: a few KiB compressed, too big unpacked for 2 MiB.
	reg.Push(t, reg.Ref("bad/bomb:1"), ocitest.ProgramImage(t, make([]byte, 4<<20), "/bin/zeros"))
	// An image whose layer is 3 MiB compressed: random bytes.
	random := make([]byte, 3<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	reg.Push(t, reg.Ref("bad/big:1"), ocitest.ProgramImage(t, random, "/bin/big"))

	// A registry that sends other bytes for the good image's first layer.
	layers, _ := twoLayers(t).Layers()
	layerDigest, _ := layers[0].Digest()
	wrongDigest := "sha256:" + strings.Repeat("ab", 32)

	down := ocitest.NewRegistry(t)
	down.Server.Close()

	tests := []struct {
		name      string
		ref       string
		intercept func(w http.ResponseWriter, r *http.Request) bool
		want      []string
		tooBig    bool
	}{
		{name: "registry down", ref: down.Ref("x/y:1"), want: []string{"pull " + down.Ref("x/y:1"), "cannot reach the registry", "connection refused"}},
		{name: "image does not exist", ref: reg.Ref("no/such:1"), want: []string{"pull " + reg.Ref("no/such:1"), "the registry has no such image", "NAME_UNKNOWN"}},
		{name: "pinned digest the registry does not have", ref: reg.Ref("good/img@" + wrongDigest), want: []string{"pull " + reg.Ref("good/img@"+wrongDigest), "the registry has no such image"}},
		{name: "registry sends another manifest for the pinned digest", ref: reg.Ref("good/img@" + wrongDigest),
			intercept: func(w http.ResponseWriter, r *http.Request) bool {
				if strings.Contains(r.URL.Path, "/manifests/"+wrongDigest) {
					r2 := r.Clone(r.Context())
					r2.URL.Path = strings.Replace(r.URL.Path, wrongDigest, goodDigest, 1)
					http.Redirect(w, r, r2.URL.Path, http.StatusTemporaryRedirect)
					return true
				}
				return false
			},
			want: []string{"pull " + reg.Ref("good/img@"+wrongDigest), "does not match requested digest", wrongDigest}},
		{name: "layer bytes do not match their digest", ref: good,
			intercept: func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+layerDigest.String()) {
					size, _ := layers[0].Size()
					w.Header().Set("Content-Length", fmt.Sprint(size))
					w.Write(bytes.Repeat([]byte{'x'}, int(size)))
					return true
				}
				return false
			},
			want: []string{"pull " + good, "download", "verifying sha256 checksum", layerDigest.Hex}},
		{name: "layer does not decompress", ref: reg.Ref("bad/notgzip:1"), want: []string{"pull " + reg.Ref("bad/notgzip:1"), "unpack its layers", "flate: corrupt input"}},
		{name: "too big unpacked", ref: reg.Ref("bad/bomb:1"), tooBig: true,
			want: []string{"pull " + reg.Ref("bad/bomb:1"), "too big for the image cache: while it unpacks", "exceed the cache's limit of 2.0 MiB"}},
		{name: "too big compressed", ref: reg.Ref("bad/big:1"), tooBig: true,
			want: []string{"pull " + reg.Ref("bad/big:1"), "too big for the image cache: its layers are", "more than the cache's limit of 2.0 MiB"}},
	}
	p, dir := newPuller(t, 2<<20)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg.Intercept(tc.intercept)
			defer reg.Intercept(nil)
			_, err := p.Pull(context.Background(), plain(tc.ref), nil)
			if err == nil {
				t.Fatal("pull succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if errors.Is(err, oci.ErrTooBig) != tc.tooBig {
				t.Errorf("errors.Is(err, ErrTooBig) = %v; want %v", !tc.tooBig, tc.tooBig)
			}
			checkClean(t, p, dir, 0)
		})
	}
	// Usable after all that: the good image pulls.
	im, err := p.Pull(context.Background(), plain(good), nil)
	if err != nil {
		t.Fatalf("the good image after the failures: %v", err)
	}
	im.Release()
}

// TestPullAuth: basic auth, the registry token flow (a 401 with a Bearer
// challenge, a token fetched with the credentials) and a static bearer
// token, each against a registry that refuses anonymous pulls.
func TestPullAuth(t *testing.T) {
	const user, pass, token = "robot", "s3cret", "tok-123"
	tests := []struct {
		name string
		auth authn.AuthConfig
		wrap func(tokenURL *string) func(http.Handler) http.Handler
	}{
		{name: "basic", auth: authn.AuthConfig{Username: user, Password: pass},
			wrap: func(*string) func(http.Handler) http.Handler {
				return func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
							w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
							http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
							return
						}
						h.ServeHTTP(w, r)
					})
				}
			}},
		{name: "token service", auth: authn.AuthConfig{Username: user, Password: pass},
			wrap: func(tokenURL *string) func(http.Handler) http.Handler {
				return func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path == "/token" {
							if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
								http.Error(w, "bad credentials", http.StatusUnauthorized)
								return
							}
							fmt.Fprintf(w, `{"token":%q}`, token)
							return
						}
						if r.Header.Get("Authorization") != "Bearer "+token {
							w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q,service="test"`, *tokenURL))
							http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`, http.StatusUnauthorized)
							return
						}
						h.ServeHTTP(w, r)
					})
				}
			}},
		{name: "registry token", auth: authn.AuthConfig{RegistryToken: token},
			wrap: func(tokenURL *string) func(http.Handler) http.Handler {
				return func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path == "/token" {
							http.Error(w, "no token service: the token is given", http.StatusUnauthorized)
							return
						}
						if r.Header.Get("Authorization") != "Bearer "+token {
							w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q`, *tokenURL))
							http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`, http.StatusUnauthorized)
							return
						}
						h.ServeHTTP(w, r)
					})
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tokenURL string
			open := ocitest.NewRegistry(t) // pushes go here, then are served behind auth
			reg := ocitest.NewRegistry(t, ocitest.WithHandler(func(h http.Handler) http.Handler {
				return tc.wrap(&tokenURL)(open.Server.Config.Handler)
			}))
			tokenURL = reg.Server.URL + "/token"
			ref := "a/b:1"
			open.Push(t, open.Ref(ref), twoLayers(t))
			p, _ := newPuller(t, 0)
			src := plain(reg.Ref(ref))
			if _, err := p.Pull(context.Background(), src, nil); err == nil || !strings.Contains(err.Error(), "the registry refused access") {
				t.Errorf("anonymous pull: %v; want it refused", err)
			}
			src.Auth = tc.auth
			im, err := p.Pull(context.Background(), src, nil)
			if err != nil {
				t.Fatalf("pull with %s: %v", src.AuthKind(), err)
			}
			im.Release()
		})
	}
}

// TestPullCA: a registry with its own certificate is refused until its CA
// is given.
func TestPullCA(t *testing.T) {
	reg := ocitest.NewRegistry(t, ocitest.WithTLS())
	ref := reg.Ref("tls/img:1")
	reg.Push(t, ref, twoLayers(t))
	p, _ := newPuller(t, 0)
	_, err := p.Pull(context.Background(), oci.Source{Image: ref, Ref: ref}, nil)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v; want a certificate error", err)
	}
	im, err := p.Pull(context.Background(), oci.Source{Image: ref, Ref: ref, CA: reg.CA()}, nil)
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	im.Release()
}

// TestPullThroughMirror: Settings.Resolve's source for an image of
// another registry pulls it from the mirror, under a path prefix.
func TestPullThroughMirror(t *testing.T) {
	mirror := ocitest.NewRegistry(t)
	mirror.Push(t, mirror.Ref("quay/tinkerbell/actions/tool:v1"), twoLayers(t))
	s, err := oci.Settings{Mirrors: map[string]string{"quay.io": "http://" + mirror.Host + "/quay"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	src, err := s.Resolve("quay.io/tinkerbell/actions/tool:v1")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := newPuller(t, 0)
	im, err := p.Pull(context.Background(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	im.Release()
	if mirror.Requests("GET /v2/quay/tinkerbell/actions/tool/manifests/v1") == 0 {
		t.Error("the mirror was not asked for the image under its prefix")
	}
}
