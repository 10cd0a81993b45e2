package actions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/oci/ocitest"
	"github.com/anvilproj/anvil/internal/untar/untartest"
)

// TestMain lets this test binary be a container's init.
func TestMain(m *testing.M) {
	container.InitIfChild()
	os.Exit(m.Run())
}

func TestSelect(t *testing.T) {
	off := New(Config{})
	on := New(Config{Images: &oci.Puller{}, Containers: &container.Runtime{}}) // Select only asks whether they are there
	tests := []struct {
		name    string
		c       *Catalog
		spec    Spec
		path    Path
		why     string
		wantErr string
	}{
		{name: "native image", c: on, spec: Spec{Image: "quay.io/tinkerbell/actions/image2disk:v1.0.0"}, path: PathNative, why: "native image2disk"},
		{name: "no native implementation", c: on, spec: Spec{Image: "quay.io/tinkerbell/actions/oci2disk:v1.0.0"}, path: PathContainer, why: "no native oci2disk"},
		{name: "container asked for a native image", c: on, spec: Spec{Image: "quay.io/tinkerbell/actions/image2disk:v1.0.0", Runtime: "container"},
			path: PathContainer, why: "runtime: container"},
		{name: "native asked", c: on, spec: Spec{Image: "writefile", Runtime: "native"}, path: PathNative, why: "runtime: native"},
		{name: "native asked, none", c: on, spec: Spec{Image: "quay.io/x/rootio:v1", Runtime: "native"},
			wantErr: `no native action for image "quay.io/x/rootio:v1", and the action asks for runtime: native`},
		{name: "no container runtime", c: off, spec: Spec{Image: "quay.io/tinkerbell/actions/oci2disk:v1.0.0"},
			wantErr: `no native action for image "quay.io/tinkerbell/actions/oci2disk:v1.0.0", and no container runtime is configured`},
		{name: "waitdaemon, runtime: container", c: on, spec: Spec{Image: "ghcr.io/jacobweinstock/waitdaemon:latest", Runtime: "container"},
			path: PathNative, why: "native waitdaemon; runtime: container is for its IMAGE"},
		{name: "unknown runtime", c: on, spec: Spec{Name: "a", Image: "cexec", Runtime: "docker"}, wantErr: `action "a": runtime "docker": want container, native or nothing`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := tc.c.Select(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Select = %+v, %v; want an error containing %q", sel, err, tc.wantErr)
				}
				return
			}
			if err != nil || sel.Path != tc.path || sel.Why != tc.why || sel.Run == nil {
				t.Errorf("Select = %+v, %v; want path %s (%s)", sel, err, tc.path, tc.why)
			}
		})
	}
}

// TestContainerArgs: the action's command is the image's CMD, as the
// tink-agent built from tinkerbell/tinkerbell 9111b51c maps it.
func TestContainerArgs(t *testing.T) {
	tests := []struct {
		entrypoint, cmd, command, want []string
	}{
		{[]string{"/usr/bin/image2disk"}, nil, nil, []string{"/usr/bin/image2disk"}},
		{[]string{"/usr/bin/tool"}, []string{"--default"}, nil, []string{"/usr/bin/tool", "--default"}},
		{[]string{"/usr/bin/tool"}, []string{"--default"}, []string{"--other", "x"}, []string{"/usr/bin/tool", "--other", "x"}},
		{nil, []string{"sh"}, []string{"reboot"}, []string{"reboot"}},
		{nil, []string{"sh", "-c", "x"}, nil, []string{"sh", "-c", "x"}},
		{nil, nil, nil, nil},
	}
	for _, tc := range tests {
		if got := ContainerArgs(tc.entrypoint, tc.cmd, tc.command); !slices.Equal(got, tc.want) {
			t.Errorf("ContainerArgs(%q, %q, %q) = %q; want %q", tc.entrypoint, tc.cmd, tc.command, got, tc.want)
		}
	}
	env := ContainerEnv([]string{"PATH=/bin", "A=image", "B=image"}, map[string]string{"A": "action", "C": "c"})
	if want := []string{"PATH=/bin", "B=image", "A=action", "C=c"}; !slices.Equal(env, want) {
		t.Errorf("ContainerEnv = %q; want %q", env, want)
	}
}

// lab is what the container tests share: a catalog with the container
// path (its cache in a temporary directory), and a registry the upstream
// images are pushed to under their upstream names, reached through a
// mirror setting as a Tinkerbell template's images would be.
type lab struct {
	c        *Catalog
	images   *oci.Puller
	reg      *ocitest.Registry
	settings oci.Settings
	cache    string
}

func newLab(t *testing.T, limit int64) *lab {
	t.Helper()
	needRoot(t)
	reg := ocitest.NewRegistry(t)
	settings, err := oci.Settings{Mirrors: map[string]string{"quay.io": "http://" + reg.Host}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	images, err := oci.New(oci.Config{Dir: cache, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := container.New(container.Config{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return &lab{c: New(Config{TempDir: t.TempDir(), Images: images, Containers: rt}), images: images, reg: reg, settings: settings, cache: cache}
}

// push pushes img under quay.io/NAME (the registry's NAME, reached
// through the quay.io mirror) and returns the upstream reference.
func (l *lab) push(t *testing.T, name string, img v1.Image) string {
	t.Helper()
	l.reg.Push(t, l.reg.Ref(name), img)
	return "quay.io/" + name
}

// spec is an action of image that asks for a container (these tests run
// upstream images whose names Anvil also implements natively), with its
// registry settings resolved as the server resolves them.
func (l *lab) spec(t *testing.T, image string, env map[string]string) Spec {
	t.Helper()
	src, err := l.settings.Resolve(image)
	if err != nil {
		t.Fatal(err)
	}
	return Spec{Name: "act", Image: image, Env: env, Runtime: RuntimeContainer, Images: map[string]ImageSource{image: {Source: src}}}
}

// run selects and runs s.
func (l *lab) run(ctx context.Context, t *testing.T, s Spec) (*recorder, Selection, error) {
	t.Helper()
	sel, err := l.c.Select(s)
	if err != nil {
		t.Fatalf("Select: %v", err)
	}
	out := &recorder{}
	_, err = sel.Run(ctx, s, out)
	return out, sel, err
}

// TestImage2DiskContainerMatchesNative: the upstream image2disk in its
// container and Anvil's native image2disk write byte-identical disks from
// the same image, each onto a loop device.
func TestImage2DiskContainerMatchesNative(t *testing.T) {
	l := newLab(t, 0)
	const diskSize = 8 << 20
	img := diskImage(6<<20+12345, 42)
	srv := newFileServer(t)
	srv.files["/os.raw.gz"] = compressImage(t, formatGzip, img)
	image := l.push(t, "tinkerbell/actions/image2disk:v1.0.0", ocitest.UpstreamImage(t, "image2disk"))

	env := func(dev string) map[string]string {
		return map[string]string{"IMG_URL": srv.url("/os.raw.gz"), "DEST_DISK": dev, "COMPRESSED": "true"}
	}

	cdev, cbacking := loopDisk(t, diskSize)
	s := l.spec(t, image, env(cdev))
	out, sel, err := l.run(context.Background(), t, s)
	if err != nil {
		t.Fatalf("upstream image2disk in a container: %v\n%s", err, out.text(""))
	}
	if sel.Path != PathContainer {
		t.Fatalf("ran %s", sel.Path)
	}
	ndev, nbacking := loopDisk(t, diskSize)
	ns := l.spec(t, image, env(ndev))
	ns.Runtime = RuntimeAuto
	if out, sel, err := l.run(context.Background(), t, ns); err != nil || sel.Path != PathNative {
		t.Fatalf("native image2disk: %s, %v\n%s", sel.Path, err, out.text(""))
	}
	viaContainer, _ := os.ReadFile(cbacking)
	native, _ := os.ReadFile(nbacking)
	if !bytes.Equal(viaContainer, native) {
		t.Fatalf("the disks differ (container %d bytes, native %d)", len(viaContainer), len(native))
	}
	if !bytes.Equal(native[:len(img)], img) || native[len(img)] != 0xa5 {
		t.Error("the disks do not hold the image followed by the old contents")
	}
	if !strings.Contains(out.text(StreamAction), `running ["/usr/bin/image2disk"] in a container of `+image) {
		t.Errorf("the action's lines do not say what ran:\n%s", out.text(StreamAction))
	}
}

// TestUpstreamWritefileInContainer: the upstream writefile, in a
// container, mounts a filesystem from the host's /dev and writes a file.
func TestUpstreamWritefileInContainer(t *testing.T) {
	l := newLab(t, 0)
	dev := ext4Device(t, "8M")
	image := l.push(t, "tinkerbell/actions/writefile:v1.0.0", ocitest.UpstreamImage(t, "writefile"))
	s := l.spec(t, image, map[string]string{"DEST_DISK": dev, "FS_TYPE": "ext4", "DEST_PATH": "/etc/hostname",
		"CONTENTS": "rack1-node07\n", "UID": "0", "GID": "0", "MODE": "0644", "DIRMODE": "0755"})
	out, _, err := l.run(context.Background(), t, s)
	if err != nil {
		t.Fatalf("upstream writefile: %v\n%s", err, out.text(""))
	}
	mnt := mountDevice(t, dev)
	if b, _ := os.ReadFile(filepath.Join(mnt, "etc/hostname")); string(b) != "rack1-node07\n" {
		t.Errorf("/etc/hostname = %q\noutput:\n%s", b, out.text(""))
	}
}

// TestContainerBadInput: each way a container action fails says which
// image and why, leaves the disk as it was (nothing runs before the image
// is all there and verified), and leaves the catalog usable: the good
// image runs afterwards.
func TestContainerBadInput(t *testing.T) {
	l := newLab(t, 12<<20)
	good := l.push(t, "tinkerbell/actions/image2disk:v1.0.0", ocitest.UpstreamImage(t, "image2disk"))
	goodImg := ocitest.UpstreamImage(t, "image2disk")
	layers, _ := goodImg.Layers()
	layerDigest, _ := layers[0].Digest()
	notExec := l.push(t, "tinkerbell/actions/notexec:v1", ocitest.Image(t, v1.Config{Entrypoint: []string{"/usr/bin/tool"}},
		ocitest.Layer(t, []untartest.Entry{{Name: "usr/bin/tool", Mode: 0o644, Body: string(ocitest.UpstreamAction(t, "cexec"))}})))
	big := l.push(t, "tinkerbell/actions/big:v1", ocitest.ProgramImage(t, diskImage(16<<20, 7), "/usr/bin/big"))
	damaged := l.push(t, "tinkerbell/actions/damaged:v1", ocitest.Image(t, v1.Config{Entrypoint: []string{"/f"}}, ocitest.DamagedLayer(t)))

	// The disk every action names: it must never change.
	backing := filepath.Join(t.TempDir(), "disk")
	old := bytes.Repeat([]byte{0x5a}, 4<<20)
	os.WriteFile(backing, old, 0o644)
	srv := newFileServer(t)
	srv.files["/os.raw"] = diskImage(1<<20, 3)
	hanging := make(chan struct{})
	srv.special["/hang.raw"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		close(hanging)
		<-r.Context().Done()
	}
	env := map[string]string{"IMG_URL": srv.url("/os.raw"), "DEST_DISK": "/disk/disk"}
	vol := []string{filepath.Dir(backing) + ":/disk"}

	down := ocitest.NewRegistry(t)
	down.Server.Close()
	wrongDigest := "sha256:" + strings.Repeat("0", 64)

	tests := []struct {
		name      string
		spec      func() Spec
		intercept func(w http.ResponseWriter, r *http.Request) bool
		cancel    <-chan struct{} // cancel the action when this closes
		want      []string
	}{
		{name: "registry down", spec: func() Spec {
			s := l.spec(t, good, env)
			s.Images[good] = ImageSource{Source: oci.Source{Image: good, Ref: down.Ref("tinkerbell/actions/image2disk:v1.0.0"), Mirror: "http://" + down.Host, PlainHTTP: true}}
			return s
		}, want: []string{"pull " + good + " from mirror http://" + down.Host, "cannot reach the registry", "connection refused"}},
		{name: "image does not exist", spec: func() Spec { return l.spec(t, "quay.io/tinkerbell/actions/nosuch:v1", env) },
			want: []string{"pull quay.io/tinkerbell/actions/nosuch:v1", "the registry has no such image"}},
		{name: "wrong digest", spec: func() Spec { return l.spec(t, "quay.io/tinkerbell/actions/image2disk@"+wrongDigest, env) },
			want: []string{"pull quay.io/tinkerbell/actions/image2disk@" + wrongDigest, "the registry has no such image"}},
		{name: "layer that does not match its digest", spec: func() Spec { return l.spec(t, good, env) },
			intercept: func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+layerDigest.String()) {
					size, _ := layers[0].Size()
					w.Header().Set("Content-Length", fmt.Sprint(size))
					w.Write(bytes.Repeat([]byte{0x1f}, int(size)))
					return true
				}
				return false
			},
			want: []string{"pull " + good, "verifying sha256 checksum", layerDigest.Hex}},
		{name: "layer that does not decompress", spec: func() Spec { return l.spec(t, damaged, env) },
			want: []string{"pull " + damaged, "unpack its layers", "flate: corrupt input"}},
		{name: "image too big for the cache", spec: func() Spec { return l.spec(t, big, env) },
			want: []string{"pull " + big, "too big for the image cache", "the cache's limit of 12.0 MiB"}},
		{name: "entrypoint not executable", spec: func() Spec { return l.spec(t, notExec, env) },
			want: []string{notExec + ": the container did not start: exec /usr/bin/tool: permission denied (the entrypoint is not executable"}},
		{name: "action that never exits", spec: func() Spec {
			return l.spec(t, good, map[string]string{"IMG_URL": srv.url("/hang.raw"), "DEST_DISK": "/dev/null"})
		}, cancel: hanging, want: []string{good + " in a container: killed: the action's timeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l.reg.Intercept(tc.intercept)
			defer l.reg.Intercept(nil)
			s := tc.spec()
			s.Volumes = vol
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if tc.cancel != nil {
				go func() {
					select {
					case <-tc.cancel:
						cancel(errors.New("the action's timeout"))
					case <-ctx.Done():
					}
				}()
			}
			out, _, err := l.run(ctx, t, s)
			if err == nil {
				t.Fatalf("the action succeeded:\n%s", out.text(""))
			}
			t.Logf("error: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\ndoes not contain %q", err, w)
				}
			}
			if b, _ := os.ReadFile(backing); !bytes.Equal(b, old) {
				t.Error("the disk was written")
			}
			if left, _ := os.ReadDir(filepath.Join(l.cache, "tmp")); len(left) > 0 {
				t.Errorf("the pull left %d staging directories", len(left))
			}
		})
	}
	// The good image (and only it) pulls and runs after all of that.
	out, _, err := l.run(context.Background(), t, func() Spec { s := l.spec(t, good, env); s.Volumes = vol; return s }())
	if err != nil {
		t.Fatalf("the good image after the failures: %v\n%s", err, out.text(""))
	}
	if b, _ := os.ReadFile(backing); !bytes.Equal(b[:1<<20], srv.files["/os.raw"]) {
		t.Error("the good run did not write the image")
	}
}

// TestContainerExitStatus: a program that fails fails the action with its
// status and last lines, streamed as stdout and stderr lines before.
func TestContainerExitStatus(t *testing.T) {
	l := newLab(t, 0)
	image := l.push(t, "tinkerbell/actions/image2disk:v1.0.0", ocitest.UpstreamImage(t, "image2disk"))
	s := l.spec(t, image, map[string]string{"IMG_URL": "http://127.0.0.1:1/nothing.raw", "DEST_DISK": "/dev/null"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, _, err := l.run(ctx, t, s)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code == 0 || len(ee.Last) == 0 {
		t.Fatalf("Run = %v; want an ExitError with the program's last lines", err)
	}
	if !strings.HasPrefix(err.Error(), image+" in a container: command exited with status") {
		t.Errorf("error %q does not start with the image", err)
	}
	if out.text(StreamStdout)+out.text(StreamStderr) == "" {
		t.Error("no output line was streamed")
	}
}

// TestWaitDaemonContainerImage: waitdaemon with an IMAGE run in a
// container (runtime: container, which for waitdaemon is its IMAGE's):
// the image is pulled while the action runs, and its program runs only
// in Then, after WAIT_SECONDS, with the action's environment.
func TestWaitDaemonContainerImage(t *testing.T) {
	l := newLab(t, 0)
	dev := ext4Device(t, "8M")
	image := l.push(t, "tinkerbell/actions/writefile:v1.0.0", ocitest.UpstreamImage(t, "writefile"))
	s := l.spec(t, image, map[string]string{"DEST_DISK": dev, "FS_TYPE": "ext4", "DEST_PATH": "/etc/hostname",
		"CONTENTS": "rack1-node07\n", "UID": "0", "GID": "0", "MODE": "0644", "DIRMODE": "0755",
		"IMAGE": image, "WAIT_SECONDS": "0"})
	s.Images = map[string]ImageSource{image: s.Images[image]}
	s.Image = waitdaemonImage
	out := &recorder{}
	sel, err := l.c.Select(s)
	if err != nil || sel.Path != PathNative {
		t.Fatalf("Select = %s, %v; want waitdaemon native", sel.Path, err)
	}
	res, err := sel.Run(context.Background(), s, out)
	if err != nil {
		t.Fatalf("waitdaemon: %v\n%s", err, out.text(""))
	}
	if l.reg.Requests("GET /v2/tinkerbell/actions/writefile/manifests/v1.0.0") == 0 {
		t.Error("IMAGE was not pulled while the action ran")
	}
	if strings.Contains(out.text(""), "running [") {
		t.Fatalf("IMAGE's program ran before Then:\n%s", out.text(""))
	}
	if err := res.Then(); err != nil {
		t.Fatalf("Then: %v\n%s", err, out.text(""))
	}
	mnt := mountDevice(t, dev)
	if b, _ := os.ReadFile(filepath.Join(mnt, "etc/hostname")); string(b) != "rack1-node07\n" {
		t.Errorf("/etc/hostname = %q\noutput:\n%s", b, out.text(""))
	}
	if want := `running ["/usr/bin/writefile"] in a container of ` + image; !strings.Contains(out.text(StreamAction), want) {
		t.Errorf("the action's lines lack %q:\n%s", want, out.text(StreamAction))
	}
}

// TestWaitDaemonMissingImage is the bad input for waitdaemon: an
// IMAGE that does not exist fails the action, naming the image and the
// registry's answer, and leaves nothing to run after the report.
func TestWaitDaemonMissingImage(t *testing.T) {
	l := newLab(t, 0)
	const missing = "quay.io/tinkerbell/actions/nosuchaction:v1.0.0"
	src, err := l.settings.Resolve(missing)
	if err != nil {
		t.Fatal(err)
	}
	s := Spec{Name: "kexec", Image: waitdaemonImage, Env: map[string]string{"IMAGE": missing, "WAIT_SECONDS": "0"},
		Images: map[string]ImageSource{missing: {Source: src}}}
	out, _, err := l.run(context.Background(), t, s)
	if err == nil {
		t.Fatalf("waitdaemon of a missing IMAGE succeeded:\n%s", out.text(""))
	}
	for _, want := range []string{"waitdaemon: IMAGE: pull " + missing, "the registry has no such image"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
