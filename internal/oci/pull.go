package oci

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/anvilproj/anvil/internal/untar"
)

// Defaults for Config's zero values.
const (
	// DefaultLimit bounds the cache at 1 GiB of unpacked images.
	DefaultLimit int64 = 1 << 30
	// DefaultHeaderTimeout bounds the wait for a registry's response
	// headers; the caller's context bounds the whole pull.
	DefaultHeaderTimeout = 60 * time.Second
)

// Subdirectories of Config.Dir.
const (
	rootfsDir  = "rootfs" // unpacked images, one directory per digest
	stagingDir = "tmp"    // pulls in progress
)

// Config configures a Puller.
type Config struct {
	// Dir holds the cache: unpacked root filesystems by digest, and pulls
	// in progress. Required. What an earlier process left there (its
	// "rootfs" and "tmp" subdirectories) is removed by New: the cache's
	// bookkeeping lived in that process's memory.
	Dir string
	// Limit bounds the bytes the cache holds: the unpacked images, and
	// while an image is pulled its compressed layers too. If 0,
	// DefaultLimit.
	Limit int64
	// Platform is the platform picked from a multi-platform image. If
	// nil, linux and this program's architecture.
	Platform *v1.Platform
	// UserAgent is sent to registries. If "", "anvil".
	UserAgent string
}

// Puller pulls images into its cache. It is safe for concurrent use; pulls
// that miss the cache take turns.
type Puller struct {
	cfg    Config
	pullMu sync.Mutex // one miss at a time: each may need the whole cache

	mu      sync.Mutex
	entries map[string]*entry // by manifest digest
	aliases map[string]string // digest an image was pinned by → manifest digest
	used    int64             // entries' sizes plus reservations
	clock   uint64            // orders uses for LRU eviction
}

// entry is one unpacked image in the cache.
type entry struct {
	digest  string
	dir     string
	size    int64
	config  v1.Config
	layers  int
	lastUse uint64
	leases  int
}

// Image is an unpacked image leased from the cache: its root filesystem
// stays until Release. Nothing may write to Rootfs: it is shared by every
// run of the image (a container gets a writable layer over it).
type Image struct {
	// Source is how it was pulled.
	Source Source
	// Digest is the digest of the image's manifest (the platform's, for a
	// multi-platform image): what the cache is keyed by.
	Digest string
	// Rootfs is the unpacked root filesystem.
	Rootfs string
	// Config is the image's configuration: entrypoint, command,
	// environment, working directory, user.
	Config v1.Config
	// Size is the bytes the image holds in the cache (its unpacked layers).
	Size int64
	// Layers is how many layers it was made of.
	Layers int
	// Cached says it was in the cache: nothing was downloaded but the
	// manifest (nothing at all for an image pinned by digest).
	Cached bool
	// Fetched is how many bytes were downloaded for it (0 when Cached).
	Fetched int64

	p        *Puller
	e        *entry
	released atomic.Bool
}

// Release returns the lease: the image may be evicted once no one holds
// it. Calling it more than once is harmless.
func (im *Image) Release() {
	if im == nil || im.released.Swap(true) {
		return
	}
	im.p.mu.Lock()
	im.e.leases--
	im.p.mu.Unlock()
}

// Progress counts a pull's downloaded bytes; it may be read while Pull
// runs (a progress reporter does).
type Progress struct {
	// Fetched is the bytes of layers and configuration downloaded so far.
	Fetched atomic.Int64
	// Total is the compressed size of the image's layers, once its
	// manifest is known; 0 before.
	Total atomic.Int64
}

// ErrTooBig is wrapped by Pull's error for an image that does not fit the
// cache.
var ErrTooBig = errors.New("too big for the image cache")

// New returns a Puller whose cache is in cfg.Dir, emptied.
func New(cfg Config) (*Puller, error) {
	if cfg.Dir == "" {
		return nil, errors.New("oci: no cache directory")
	}
	if cfg.Limit <= 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.Platform == nil {
		cfg.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "anvil"
	}
	for _, d := range []string{rootfsDir, stagingDir} {
		p := filepath.Join(cfg.Dir, d)
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("oci: clear the image cache: %w", err)
		}
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("oci: image cache: %w", err)
		}
	}
	return &Puller{cfg: cfg, entries: map[string]*entry{}, aliases: map[string]string{}}, nil
}

// Limit is the cache's size limit in bytes.
func (p *Puller) Limit() int64 { return p.cfg.Limit }

// Used is the bytes the cache holds now (images and pulls in progress).
func (p *Puller) Used() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used
}

// Pull returns the image src names, unpacked: from the cache when it is
// there (an image pinned by digest needs no registry then; a tag is always
// resolved, so a moved tag is seen), else pulled, verified and unpacked
// first. Every layer is downloaded and checked against its digest before
// any is unpacked, and nothing of a failed pull stays. prog, if not nil,
// counts the download. The error names the image and says what failed:
// the registry unreachable, no such image, a digest that does not match,
// a layer that does not decompress, an image too big for the cache.
func (p *Puller) Pull(ctx context.Context, src Source, prog *Progress) (*Image, error) {
	im, err := p.pull(ctx, src, prog)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
		}
		return nil, fmt.Errorf("pull %s: %w", src, err)
	}
	return im, nil
}

func (p *Puller) pull(ctx context.Context, src Source, prog *Progress) (*Image, error) {
	var nameOpts []name.Option
	if src.PlainHTTP {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ref, err := name.ParseReference(src.Ref, nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("%q is not a valid reference: %w", src.Ref, err)
	}
	pinned, isPinned := ref.(name.Digest)
	if isPinned {
		if im := p.lease(src, p.alias(pinned.DigestStr())); im != nil {
			return im, nil
		}
	}
	if prog == nil {
		prog = &Progress{}
	}
	tr, err := transportFor(src, &prog.Fetched)
	if err != nil {
		return nil, err
	}
	opts := []remote.Option{
		remote.WithContext(ctx), remote.WithAuth(authenticator(src.Auth)), remote.WithTransport(tr),
		remote.WithPlatform(*p.cfg.Platform), remote.WithUserAgent(p.cfg.UserAgent),
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, explain(err)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, explain(err)
	}
	h, err := img.Digest()
	if err != nil {
		return nil, err
	}
	digest := h.String()
	if isPinned {
		p.mu.Lock()
		p.aliases[pinned.DigestStr()] = digest
		p.mu.Unlock()
	}
	if im := p.lease(src, digest); im != nil {
		return im, nil
	}

	p.pullMu.Lock()
	defer p.pullMu.Unlock()
	if im := p.lease(src, digest); im != nil {
		return im, nil // pulled while this one waited its turn
	}
	return p.fetch(ctx, src, img, h, prog)
}

// alias is the manifest digest an image pinned by d was found under, or d.
func (p *Puller) alias(d string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.aliases[d]; ok {
		return m
	}
	return d
}

// lease returns the cached image of digest, leased, or nil.
func (p *Puller) lease(src Source, digest string) *Image {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[digest]
	if !ok {
		return nil
	}
	p.clock++
	e.lastUse = p.clock
	e.leases++
	return &Image{Source: src, Digest: e.digest, Rootfs: e.dir, Config: e.config, Size: e.size, Layers: e.layers,
		Cached: true, p: p, e: e}
}

// fetch downloads img's blobs into a staging OCI layout (each checked
// against its digest as it arrives), then unpacks its layers into a
// staging root filesystem, and moves that into the cache.
func (p *Puller) fetch(ctx context.Context, src Source, img v1.Image, h v1.Hash, prog *Progress) (*Image, error) {
	mf, err := img.Manifest()
	if err != nil {
		return nil, explain(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, explain(err)
	}
	want := p.cfg.Platform
	if cf.OS != "" && (cf.OS != want.OS || cf.Architecture != want.Architecture) {
		return nil, fmt.Errorf("the image is for %s/%s, this machine is %s/%s", cf.OS, cf.Architecture, want.OS, want.Architecture)
	}
	var compressed int64
	for _, l := range mf.Layers {
		compressed += l.Size
	}
	prog.Total.Store(compressed)
	if compressed > p.cfg.Limit {
		return nil, fmt.Errorf("%w: its layers are %s compressed, more than the cache's limit of %s", ErrTooBig,
			mib(compressed), mib(p.cfg.Limit))
	}
	if err := p.reserve(compressed); err != nil {
		return nil, fmt.Errorf("%w: its layers are %s compressed; the cache's limit is %s, of which %s is held by images in use",
			ErrTooBig, mib(compressed), mib(p.cfg.Limit), mib(p.Used()))
	}
	reserved := compressed
	defer func() { p.unreserve(reserved) }()

	staging, err := os.MkdirTemp(filepath.Join(p.cfg.Dir, stagingDir), "pull-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	lp, err := layout.Write(filepath.Join(staging, "layout"), empty.Index)
	if err != nil {
		return nil, err
	}
	if err := lp.AppendImage(img); err != nil {
		return nil, fmt.Errorf("download: %w", explain(err))
	}
	local, err := lp.Image(h)
	if err != nil {
		return nil, err
	}

	dir := filepath.Join(staging, "rootfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	rc := mutate.Extract(local)
	counted := &reservingReader{r: rc, p: p}
	xerr := (&untar.Extractor{Root: root}).Extract(ctx, counted)
	if xerr == nil {
		// mutate.Extract writes the tar's end before it reports a layer
		// that failed (its writer is closed first): the error comes
		// after what looks like a complete, possibly empty, archive.
		_, xerr = io.Copy(io.Discard, counted)
	}
	rc.Close()
	reserved += counted.reserved
	if xerr != nil {
		if errors.Is(xerr, ErrTooBig) {
			held := ""
			if n := p.Used() - reserved; n > 0 {
				held = fmt.Sprintf(", of which %s is held by images in use", mib(n))
			}
			return nil, fmt.Errorf("%w: while it unpacks, its %s of compressed layers and more than %s unpacked exceed the cache's limit of %s%s",
				ErrTooBig, mib(compressed), mib(counted.n), mib(p.cfg.Limit), held)
		}
		return nil, fmt.Errorf("unpack its layers: %w", xerr)
	}

	final := filepath.Join(p.cfg.Dir, rootfsDir, strings.ReplaceAll(h.String(), ":", "-"))
	if err := os.Rename(dir, final); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The compressed layers go with the staging directory; the unpacked
	// image keeps its own bytes reserved.
	p.used -= reserved - counted.n
	reserved = 0
	p.clock++
	e := &entry{digest: h.String(), dir: final, size: counted.n, config: cf.Config, layers: len(mf.Layers),
		lastUse: p.clock, leases: 1}
	p.entries[e.digest] = e
	return &Image{Source: src, Digest: e.digest, Rootfs: final, Config: cf.Config, Size: e.size, Layers: e.layers,
		Fetched: prog.Fetched.Load(), p: p, e: e}, nil
}

// reserve takes n bytes of the cache, evicting the least recently used
// images no one holds until they fit. It returns ErrTooBig when they
// cannot.
func (p *Puller) reserve(n int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.used+n > p.cfg.Limit {
		if !p.evictOne() {
			return ErrTooBig
		}
	}
	p.used += n
	return nil
}

func (p *Puller) unreserve(n int64) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	p.used -= n
	p.mu.Unlock()
}

// evictOne removes the least recently used image no one holds; false when
// there is none. p.mu is held.
func (p *Puller) evictOne() bool {
	var victim *entry
	for _, e := range p.entries {
		if e.leases == 0 && (victim == nil || e.lastUse < victim.lastUse) {
			victim = e
		}
	}
	if victim == nil {
		return false
	}
	// A directory that will not go away still holds memory: keep counting
	// it, and say so, rather than pretend it is free.
	if err := os.RemoveAll(victim.dir); err != nil {
		return false
	}
	delete(p.entries, victim.digest)
	for k, v := range p.aliases {
		if v == victim.digest {
			delete(p.aliases, k)
		}
	}
	p.used -= victim.size
	return true
}

// Cached lists the digests of the images in the cache, least recently
// used first.
func (p *Puller) Cached() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	es := make([]*entry, 0, len(p.entries))
	for _, e := range p.entries {
		es = append(es, e)
	}
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].lastUse < es[j-1].lastUse; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.digest
	}
	return out
}

// reservingReader reserves cache space for the unpacked image as its
// flattened tar stream goes by (its size is known only at its end), and
// fails with ErrTooBig when the cache cannot give more.
type reservingReader struct {
	r        io.Reader
	p        *Puller
	n        int64 // bytes read
	reserved int64
}

func (r *reservingReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.n += int64(n)
	if n > 0 {
		if rerr := r.p.reserve(int64(n)); rerr != nil {
			return n, rerr
		}
		r.reserved += int64(n)
	}
	return n, err
}

// authenticator is the credentials of a (non-zero) AuthConfig, or
// anonymous.
func authenticator(a authn.AuthConfig) authn.Authenticator {
	if a == (authn.AuthConfig{}) {
		return authn.Anonymous
	}
	return authn.FromConfig(a)
}

// transportFor is the HTTP transport to src's registry: its CA trusted
// besides the system's, and every downloaded body but manifests counted in
// fetched.
func transportFor(src Source, fetched *atomic.Int64) (http.RoundTripper, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = DefaultHeaderTimeout
	if src.CA != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM([]byte(src.CA)) {
			return nil, errors.New("the registry's CA is not a PEM certificate")
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return countingTransport{base: t, n: fetched}, nil
}

// countingTransport counts the bytes of response bodies other than
// manifests: layers and configuration (and the registry's small token and
// ping answers).
type countingTransport struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err != nil || resp.Body == nil || strings.Contains(req.URL.Path, "/manifests/") {
		return resp, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: c.n}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// explain says in words what a registry error means, keeping its text.
func explain(err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch {
		case terr.StatusCode == http.StatusNotFound || hasCode(terr, transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode):
			return fmt.Errorf("the registry has no such image: %w", err)
		case terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden:
			return fmt.Errorf("the registry refused access (check its credentials): %w", err)
		}
		return fmt.Errorf("the registry answered with an error: %w", err)
	}
	var uerr *url.Error
	var nerr *net.OpError
	var cerr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &cerr):
		return fmt.Errorf("the registry's certificate is not trusted (give its CA): %w", err)
	case errors.As(err, &nerr), errors.As(err, &uerr) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot reach the registry: %w", err)
	}
	return err
}

func hasCode(e *transport.Error, codes ...transport.ErrorCode) bool {
	for _, d := range e.Errors {
		for _, c := range codes {
			if d.Code == c {
				return true
			}
		}
	}
	return false
}

// mib writes a byte count in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
