package kubernetes_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/anvilproj/anvil/deploy/kubernetes"
	"github.com/anvilproj/anvil/internal/dhcp/dhcptest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// container is what the Deployment says about the anvil container's
// process: read from the manifest, so that the test runs what is applied.
type container struct {
	Args []string `json:"args"`
	Env  []struct {
		Name string `json:"name"`
	} `json:"env"`
	SecurityContext struct {
		RunAsUser                *int64 `json:"runAsUser"`
		RunAsGroup               *int64 `json:"runAsGroup"`
		AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool   `json:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Add  []string `json:"add"`
			Drop []string `json:"drop"`
		} `json:"capabilities"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

// deploymentContainer returns the Deployment's anvil container and the
// names of its emptyDir volumes.
func deploymentContainer(t *testing.T) (container, map[string]bool) {
	t.Helper()
	objs, err := kubernetes.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Kind != "Deployment" {
			continue
		}
		var d struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []container `json:"containers"`
						Volumes    []struct {
							Name     string          `json:"name"`
							EmptyDir json.RawMessage `json:"emptyDir"`
						} `json:"volumes"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(o.JSON, &d); err != nil {
			t.Fatal(err)
		}
		empty := map[string]bool{}
		for _, v := range d.Spec.Template.Spec.Volumes {
			empty[v.Name] = v.EmptyDir != nil
		}
		return d.Spec.Template.Spec.Containers[0], empty
	}
	t.Fatal("no Deployment in the manifests")
	return container{}, nil
}

// TestContainerOnImage runs the image `make image` builds the way the
// Deployment runs its container, short of a kubelet: the image's root
// filesystem read-only (chroot), a tmpfs for each emptyDir mount, the
// manifest's user, only the capabilities it adds (every other one gone
// from the bounding set), no_new_privs, and its arguments; in a network
// namespace of its own. The server must bind DHCP's port 67 on an
// interface (SO_BINDTODEVICE), answer the probes' /healthz and /readyz,
// and stop cleanly on SIGTERM. Run as the image's non-root user with the
// same capabilities it must fail to bind port 67: that is why the
// Deployment runs it as root (docs/kubernetes.md).
//
// Until `anvil serve` has the Kubernetes store, it runs serve with its
// embedded store instead of the entrypoint's `--store kubernetes`.
func TestContainerOnImage(t *testing.T) {
	testtool.RequireRoot(t, "a mount namespace, chroot, uid changes and port 67")
	unshare := testtool.RequireBinary(t, "unshare", "util-linux")
	capsh := testtool.RequireBinary(t, "capsh", "libcap2-bin")
	ns := dhcptest.NewNetNS(t)

	ctr, emptyDirs := deploymentContainer(t)
	sc := ctr.SecurityContext
	if sc.RunAsUser == nil || sc.AllowPrivilegeEscalation == nil || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Fatalf("the container's securityContext %+v: want runAsUser, allowPrivilegeEscalation and drop [ALL] stated", sc)
	}
	root := imageRootfs(t)

	uid := *sc.RunAsUser
	gid := uid
	if sc.RunAsGroup != nil {
		gid = *sc.RunAsGroup
	}
	p := startContainer(t, ns, unshare, capsh, root, ctr, emptyDirs, uid, gid)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, network, addr); return err })
			return c, err
		},
	}}
	defer client.CloseIdleConnections()
	probe := func(path string) bool {
		resp, err := client.Get("http://127.0.0.1:7080" + path)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	testtool.WaitFor(t, "/healthz and /readyz answering 200 (log: "+p.log+")", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("the container exited: %v\n%s", p.err, p.output())
		default:
		}
		return probe("/healthz") && probe("/readyz")
	})
	checkProcess(t, capsh, p.cmd.Process.Pid, ctr)
	out := p.output()
	if !strings.Contains(out, "service=dhcp addr=0.0.0.0:67") {
		t.Errorf("the server did not listen for DHCP on port 67:\n%s", out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	if p.err != nil {
		t.Errorf("after SIGTERM: %v\n%s", p.err, p.output())
	}

	// The same, as the image's own user, 65532.
	q := startContainer(t, ns, unshare, capsh, root, ctr, emptyDirs, 65532, 65532)
	<-q.exited
	if q.err == nil || !strings.Contains(q.output(), "listen udp4 0.0.0.0:67: bind: permission denied") {
		t.Errorf("as uid 65532 with %v: exit %v; want bind: permission denied on port 67:\n%s", sc.Capabilities.Add, q.err, q.output())
	}
}

// checkProcess reads, from /proc, what the server process runs with, and
// fails t where it is not what the manifest says: its uid, its effective
// capabilities exactly those added, no_new_privs unless escalation is
// allowed, and, as it sees its mounts, the root read-only and each volume
// writable.
func checkProcess(t *testing.T, capsh string, pid int, ctr container) {
	t.Helper()
	sc := ctr.SecurityContext
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if uid := strings.Fields(fields["Uid"]); len(uid) == 0 || uid[0] != strconv.FormatInt(*sc.RunAsUser, 10) {
		t.Errorf("the process's uid %q; want %d", fields["Uid"], *sc.RunAsUser)
	}
	decoded, err := exec.Command(capsh, "--decode="+fields["CapEff"]).Output()
	if err != nil {
		t.Fatalf("capsh --decode=%s: %v", fields["CapEff"], err)
	}
	_, names, _ := strings.Cut(strings.TrimSpace(string(decoded)), "=")
	var want []string
	for _, c := range sc.Capabilities.Add {
		want = append(want, "cap_"+strings.ToLower(c))
	}
	got := strings.Split(names, ",")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("effective capabilities %q; want %q", got, want)
	}
	if nnp := fields["NoNewPrivs"]; (nnp == "1") != !*sc.AllowPrivilegeEscalation {
		t.Errorf("NoNewPrivs %s with allowPrivilegeEscalation %v", nnp, *sc.AllowPrivilegeEscalation)
	}
	// mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS …, the mount
	// points as the chrooted process sees them.
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	opts := map[string]string{}
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 5 {
			opts[f[4]] = f[5]
		}
	}
	if rootRO := strings.HasPrefix(opts["/"], "ro"); rootRO != sc.ReadOnlyRootFilesystem {
		t.Errorf("the root is mounted %q; readOnlyRootFilesystem is %v", opts["/"], sc.ReadOnlyRootFilesystem)
	}
	for _, m := range ctr.VolumeMounts {
		if !strings.HasPrefix(opts[m.MountPath], "rw") {
			t.Errorf("volume %s at %s is mounted %q; want writable", m.Name, m.MountPath, opts[m.MountPath])
		}
	}
}

// imageRootfs builds anvil and its image as `make image` does, and
// unpacks the image's layer into a directory.
func imageRootfs(t *testing.T) string {
	t.Helper()
	mod := testtool.ModuleRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "anvil")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/anvil")
	build.Dir = mod
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/anvil: %v\n%s", err, out)
	}
	oci := filepath.Join(dir, "image")
	img := exec.Command("go", "run", "./internal/tools/ociimage", "-binary", bin, "-version", "test", "-revision", "test",
		"-tag", "anvil:test", "-oci-layout", oci)
	img.Dir = mod
	if out, err := img.CombinedOutput(); err != nil {
		t.Fatalf("ociimage: %v\n%s", err, out)
	}
	idx, err := layout.ImageIndexFromPath(oci)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("the image's layout: %v, %v", im, err)
	}
	image, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "rootfs")
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		unpack(t, rc, root)
		rc.Close()
	}
	return root
}

// unpack writes the regular files and directories of a layer under root,
// with their modes and owners: the image has nothing else.
func unpack(t *testing.T, r io.Reader, root string) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("layer entry %q outside the root", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var b []byte
				if b, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, b, 0o600)
				}
			}
		default:
			t.Fatalf("layer entry %q: type %c, which the image does not have", h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode))
		}
		if err == nil {
			err = os.Lchown(p, h.Uid, h.Gid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// modeBits converts tar's sticky, setuid and setgid bits to Go's.
func modeBits(m int64) os.FileMode {
	var f os.FileMode
	if m&0o1000 != 0 {
		f |= os.ModeSticky
	}
	if m&0o2000 != 0 {
		f |= os.ModeSetgid
	}
	if m&0o4000 != 0 {
		f |= os.ModeSetuid
	}
	return f
}

// proc is the container's process.
type proc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// startContainer starts the container's process in ns: in a mount
// namespace of its own (unshare), root's image mounted read-only if the
// manifest says so and a tmpfs on each emptyDir mount (mode 0777, as the
// kubelet makes an emptyDir), chrooted there by capsh,
// which drops every capability the manifest does not add from the
// bounding set, switches to uid and gid and sets no_new_privs unless the
// manifest allows privilege escalation, then execs /anvil serve with the
// manifest's arguments (its $(VAR)s expanded as the kubelet does). Each
// step execs the next, so the process is the server's.
func startContainer(t *testing.T, ns *dhcptest.NetNS, unshare, capsh, root string, ctr container, emptyDirs map[string]bool, uid, gid int64) *proc {
	t.Helper()
	sc := ctr.SecurityContext
	var script strings.Builder
	fmt.Fprintf(&script, "set -e\nmount --make-rprivate /\nmount --bind %[1]s %[1]s\n", root)
	if sc.ReadOnlyRootFilesystem {
		fmt.Fprintf(&script, "mount -o remount,bind,ro %[1]s %[1]s\n", root)
	}
	for _, m := range ctr.VolumeMounts {
		if !emptyDirs[m.Name] {
			t.Fatalf("volume %s is not an emptyDir: the test does not know how to give it", m.Name)
		}
		fmt.Fprintf(&script, "mount -t tmpfs -o mode=0777 %s %s\n", m.Name, filepath.Join(root, m.MountPath))
	}
	var drop []string
	for _, c := range allCapabilities(t, capsh) {
		if !slices.Contains(sc.Capabilities.Add, strings.ToUpper(strings.TrimPrefix(c, "cap_"))) {
			drop = append(drop, c)
		}
	}
	args := []string{capsh, "--chroot=" + root, "--drop=" + strings.Join(drop, ","),
		"--gid=" + strconv.FormatInt(gid, 10), "--uid=" + strconv.FormatInt(uid, 10)}
	if !*sc.AllowPrivilegeEscalation {
		args = append(args, "--no-new-privs")
	}
	// The kubelet expands $(VAR) in args from the container's env; the
	// only one is the pod's address, here the namespace's loopback.
	env := map[string]string{"ANVIL_PUBLIC_IP": "127.0.0.1"}
	args = append(args, "--shell=/anvil", "--", "serve")
	for _, a := range ctr.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if strings.Contains(a, "$(") {
			t.Fatalf("argument %q: a variable the test does not set", a)
		}
		args = append(args, a)
	}
	// On loopback, DHCP binds port 67 on the interface lo
	// (SO_BINDTODEVICE, as on a provisioning network's interface).
	args = append(args, "--bind=127.0.0.1")
	script.WriteString("exec")
	for _, a := range args {
		script.WriteString(" '" + a + "'")
	}

	p := &proc{log: filepath.Join(t.TempDir(), "anvil.log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command("ip", "netns", "exec", ns.Name, unshare, "--mount", "--", "sh", "-c", script.String())
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// The server dies with the test binary (Pdeathsig). The signal is
	// sent when the thread that started it ends, and the namespace's
	// Do ends the threads it uses: so a thread of its own starts it and
	// lives until it has exited.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer f.Close()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("the container's log:\n%s", p.output())
		}
	})
	return p
}

// allCapabilities lists the capabilities this kernel knows, by capsh's
// names (cap_net_raw, …).
func allCapabilities(t *testing.T, capsh string) []string {
	t.Helper()
	out, err := exec.Command(capsh, "--print").Output()
	if err != nil {
		t.Fatalf("capsh --print: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(l, "Bounding set ="); ok {
			return strings.Split(strings.TrimSpace(rest), ",")
		}
	}
	t.Fatalf("capsh --print shows no bounding set:\n%s", out)
	return nil
}
