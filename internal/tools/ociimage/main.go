// Command ociimage builds Anvil's container image without a container
// engine (`make image`): from a static anvil binary, one layer on an empty
// base holding /anvil, the CA certificates Go's TLS reads and the
// directories the server writes to, and a config whose entrypoint is
// `/anvil serve --store kubernetes`, run as user 65532. It writes the
// image as an OCI image layout directory (crane push, skopeo copy oci:…)
// and/or a tarball as `docker save` writes it (docker load, kind load
// image-archive, crane push).
//
// The image is reproducible: every time in it is -created (default
// $SOURCE_DATE_EPOCH, else the Unix epoch), files are written in a fixed
// order with fixed owners and modes, and the layer's gzip is
// deterministic, so the same binary gives the same digest wherever and
// whenever it is built. It refuses a binary that would not run on the
// empty base (dynamically linked) and takes the image's platform from
// the binary itself.
//
// It owns the image's layout only; the binary is `make binary`'s, and the
// Dockerfile at the module's root builds the same contract (entrypoint,
// user, labels) with a container engine. It is a build-time program: the
// anvil binary does not link it.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image promises; the Dockerfile at the module's root says the
// same.
var (
	// entrypoint runs the server against the cluster it is in; the
	// Deployment's args follow it.
	entrypoint = []string{"/anvil", "serve", "--store", "kubernetes"}
)

const (
	// user is distroless' "nonroot" (uid and gid 65532): the image runs
	// as no one in particular unless the pod says otherwise.
	user = "65532:65532"
	// defaultSource is the org.opencontainers.image.source label.
	defaultSource = "https://github.com/anvilproj/anvil"
	// caPath is where Go's crypto/x509 first looks for CAs on Linux.
	caPath = "etc/ssl/certs/ca-certificates.crt"
	// dataDir is serve's default --data-dir, owned by user so the image
	// runs without a volume there (the Deployment mounts one).
	dataDir = "var/lib/anvil"
	// refNameAnnotation names an image in an OCI layout's index.
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// userID is user's uid and gid, for the files it owns.
const userID = 65532

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its inputs explicit.
func run(args []string, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	fs.SetOutput(errOut)
	binary := fs.String("binary", "", "static anvil binary to put at /anvil (required)")
	caBundle := fs.String("ca-bundle", "", "PEM file of CA certificates to put at /"+caPath+" (empty: none; TLS to registries and BMCs then fails)")
	version := fs.String("version", "", "org.opencontainers.image.version label (required)")
	revision := fs.String("revision", "", "org.opencontainers.image.revision label: the commit (required)")
	source := fs.String("source", defaultSource, "org.opencontainers.image.source label")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "the image's time, every file's included, in Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	tag := fs.String("tag", "", "reference the outputs name the image by, e.g. registry.example.org/anvil:v1 (required)")
	ociDir := fs.String("oci-layout", "", "write an OCI image layout to this directory (replaced if it holds one)")
	tarPath := fs.String("tarball", "", "write a docker save tarball to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(errOut, "ociimage: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected arguments %q", fs.Args())
	case *binary == "" || *version == "" || *revision == "" || *tag == "":
		return usage("-binary, -version, -revision and -tag are required")
	case *ociDir == "" && *tarPath == "":
		return usage("nothing to write: give -oci-layout, -tarball or both")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return usage("-tag %q: %v", *tag, err)
	}
	when := time.Unix(0, 0)
	if *created != "" {
		sec, err := strconv.ParseInt(*created, 10, 64)
		if err != nil || sec < 0 {
			return usage("-created %q: want Unix seconds", *created)
		}
		when = time.Unix(sec, 0)
	}

	spec := Spec{Version: *version, Revision: *revision, Source: *source, Created: when}
	if spec.Binary, err = os.ReadFile(*binary); err != nil {
		fmt.Fprintf(errOut, "ociimage: %v\n", err)
		return 1
	}
	if *caBundle != "" {
		if spec.CABundle, err = os.ReadFile(*caBundle); err != nil {
			fmt.Fprintf(errOut, "ociimage: %v\n", err)
			return 1
		}
	}
	img, err := Build(spec)
	if err == nil && *ociDir != "" {
		err = WriteLayout(*ociDir, ref, img)
	}
	if err == nil && *tarPath != "" {
		err = tarball.WriteToFile(*tarPath, ref, img)
	}
	var digest v1.Hash
	if err == nil {
		digest, err = img.Digest()
	}
	if err != nil {
		fmt.Fprintf(errOut, "ociimage: %s: %v\n", *binary, err)
		return 1
	}
	fmt.Fprintf(out, "%s@%s\n", ref, digest)
	return 0
}

// Spec is what goes into the image.
type Spec struct {
	// Binary is the static anvil executable, put at /anvil.
	Binary []byte
	// CABundle, if not empty, is put at /etc/ssl/certs/ca-certificates.crt.
	CABundle []byte
	// Version, Revision and Source are the OCI labels'.
	Version, Revision, Source string
	// Created is the image's time and every file's.
	Created time.Time
}

// Build returns the image of s. Its platform is the binary's.
func Build(s Spec) (v1.Image, error) {
	arch, err := platform(s.Binary)
	if err != nil {
		return nil, err
	}
	created := s.Created.UTC().Truncate(time.Second)
	files, err := layerTar(s, created)
	if err != nil {
		return nil, err
	}
	// Compressed once here: given a gzip stream, the layer keeps it as
	// its blob instead of compressing the tar again for every digest and
	// every output.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz) // no name, no time in its header
	if _, err := zw.Write(files); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: created},
		CreatedBy: "internal/tools/ociimage: /anvil " + s.Version,
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = arch, "linux"
	cfg.Created = v1.Time{Time: created}
	cfg.Config = v1.Config{
		Entrypoint: entrypoint,
		User:       user,
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.version":  s.Version,
			"org.opencontainers.image.revision": s.Revision,
			"org.opencontainers.image.source":   s.Source,
		},
	}
	return mutate.ConfigFile(img, cfg)
}

// elfArch is the image architecture of each ELF machine Anvil builds for.
var elfArch = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
	elf.EM_RISCV:   "riscv64",
}

// platform returns the architecture of the executable b, and an error if
// it is not a statically linked Linux executable, which an image with
// nothing else in it could not start.
func platform(b []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("not an executable (ELF type %v)", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(io.LimitReader(p.Open(), 256))
			return "", fmt.Errorf("dynamically linked (interpreter %s), and the image has no libraries: build it with CGO_ENABLED=0 (make binary)",
				bytes.TrimRight(interp, "\x00"))
		}
	}
	arch, ok := elfArch[f.Machine]
	if !ok {
		return "", fmt.Errorf("built for %v, not an architecture the image knows", f.Machine)
	}
	return arch, nil
}

// layerTar returns the image's only layer, uncompressed: the same bytes
// for the same s and created, whatever the files' times on disk.
func layerTar(s Spec, created time.Time) ([]byte, error) {
	type entry struct {
		name     string
		mode     int64
		uid      int
		contents []byte
		dir      bool
	}
	// Parents before children, in a fixed order.
	entries := []entry{{name: "anvil", mode: 0o755, contents: s.Binary}}
	if len(s.CABundle) > 0 {
		entries = append(entries,
			entry{name: "etc/", mode: 0o755, dir: true},
			entry{name: "etc/ssl/", mode: 0o755, dir: true},
			entry{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			entry{name: caPath, mode: 0o644, contents: s.CABundle})
	}
	entries = append(entries,
		// os.TempDir, for a container run without a volume there.
		entry{name: "tmp/", mode: 0o1777, dir: true},
		entry{name: "var/", mode: 0o755, dir: true},
		entry{name: "var/lib/", mode: 0o755, dir: true},
		entry{name: dataDir + "/", mode: 0o700, uid: userID, dir: true})

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: created,
			Typeflag: tar.TypeReg, Size: int64(len(e.contents)), Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.contents); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as the only image of an OCI image layout in dir,
// named ref. A dir that already holds a layout is replaced (so that a
// rebuild does not pile images up); one that holds anything else is
// refused rather than deleted.
func WriteLayout(dir string, ref name.Reference, img v1.Image) error {
	if err := clearLayout(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: ref.Name()}))
}

// clearLayout removes dir if it is an OCI image layout, and refuses to
// touch it if it is anything else but missing or empty.
func clearLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(entries) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("-oci-layout %s: not empty and not an OCI image layout; not replacing it", dir)
	}
	return os.RemoveAll(dir)
}
