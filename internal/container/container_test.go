package container_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestMain lets this test binary be a container's init.
func TestMain(m *testing.M) {
	container.InitIfChild()
	os.Exit(m.Run())
}

// lines is an io.Writer that keeps the lines written and signals each.
type lines struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	all   []string
	added chan string
}

func newLines() *lines { return &lines{added: make(chan string, 100)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		b := l.buf.Bytes()
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		line := string(b[:i])
		l.buf.Next(i + 1)
		l.all = append(l.all, line)
		select {
		case l.added <- line:
		default:
		}
	}
	return len(p), nil
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// busyboxRoot is a root filesystem holding Debian's static busybox, an
// /etc with a file, a relative /var/run link as Debian images have, and
// whatever extra says.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	testtool.RequireRoot(t, "containers: namespaces, mounts, cgroups")
	bb := testtool.RequireBinary(t, "busybox", "busybox-static")
	prog, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "etc", "run"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), prog, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sh", "sleep", "cat", "echo", "ls", "touch", "hostname", "id", "mount", "setsid", "pwd"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/image-file"), []byte("from the image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run", filepath.Join(root, "var-run")); err != nil {
		t.Fatal(err)
	}
	return root
}

func newRuntime(t *testing.T, cfg container.Config) *container.Runtime {
	t.Helper()
	if cfg.ScratchDir == "" {
		cfg.ScratchDir = t.TempDir()
	}
	r, err := container.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mountsUnder lists the host's mounts whose mount point or root is under
// one of dirs: what a container may have leaked. (Not the whole table:
// other tests on the machine mount and unmount their own.)
func mountsUnder(t *testing.T, dirs ...string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		for _, d := range dirs {
			if strings.HasPrefix(f[3], d) || strings.HasPrefix(f[4], d) {
				out = append(out, line)
			}
		}
	}
	return out
}

func sh(script string) []string { return []string{"sh", "-c", script} }

func TestRun(t *testing.T) {
	root := busyboxRoot(t)
	scratch := t.TempDir()
	for _, pivot := range []bool{true, false} {
		t.Run(fmt.Sprintf("pivot_root=%v", pivot), func(t *testing.T) {
			r := newRuntime(t, container.Config{NoPivot: !pivot, ScratchDir: scratch})
			out, errOut := newLines(), newLines()
			err := r.Run(context.Background(), container.Spec{
				Rootfs: root, Dir: "/work/dir",
				Args: sh(`echo "pid $$"; echo to-stderr >&2; pwd; echo "$FOO $PATH $HOME"; cat /etc/image-file; id -u; exit 3`),
				Env:  []string{"FOO=bar"}, Stdout: out, Stderr: errOut,
			})
			var ee *container.ExitError
			if !errors.As(err, &ee) || ee.Code != 3 {
				t.Fatalf("Run = %v; want exit status 3", err)
			}
			want := "pid 1\n/work/dir\nbar " + container.DefaultPath + " /root\nfrom the image\n0"
			if got := out.text(); got != want {
				t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
			}
			if got := errOut.text(); got != "to-stderr" {
				t.Errorf("stderr %q", got)
			}
		})
	}
	if left := mountsUnder(t, root, scratch); len(left) > 0 {
		t.Errorf("mounts left on the host:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(filepath.Join(root, "work")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the working directory was made in the image's root filesystem: %v", err)
	}
}

// TestFreshRoot: what one container writes to its root filesystem, the
// next does not see, and the image's files never change.
func TestFreshRoot(t *testing.T) {
	root := busyboxRoot(t)
	r := newRuntime(t, container.Config{})
	if err := r.Run(context.Background(), container.Spec{Rootfs: root,
		Args: sh(`echo changed > /etc/image-file && touch /etc/left-behind && rm /bin/cat`)}); err != nil {
		t.Fatal(err)
	}
	out := newLines()
	if err := r.Run(context.Background(), container.Spec{Rootfs: root, Stdout: out,
		Args: sh(`cat /etc/image-file; ls /etc/left-behind 2>&1; ls /bin/cat`)}); err != nil {
		t.Fatal(err)
	}
	if got := out.text(); !strings.HasPrefix(got, "from the image\n") || !strings.Contains(got, "left-behind: No such file") ||
		!strings.HasSuffix(got, "/bin/cat") {
		t.Errorf("second container saw the first one's writes:\n%s", got)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/image-file")); string(b) != "from the image\n" {
		t.Errorf("the image's file changed: %q", b)
	}
}

// TestHostResources: /dev and /sys are the host's, /proc is the
// container's own PID namespace's unless pid: host, the host's
// resolv.conf is there, capabilities are all there (mount works).
func TestHostResources(t *testing.T) {
	root := busyboxRoot(t)
	r := newRuntime(t, container.Config{})
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	for _, hostPID := range []bool{false, true} {
		t.Run(fmt.Sprintf("hostPID=%v", hostPID), func(t *testing.T) {
			out := newLines()
			err := r.Run(context.Background(), container.Spec{Rootfs: root, HostPID: hostPID, Stdout: out, Hostname: "action-host",
				Args: sh(fmt.Sprintf(`[ -c /dev/null ] && echo dev; [ -d /sys/class/net/lo ] && echo sys; [ -d /proc/%d ] && echo host-pids;
					echo "pid $$"; cat /etc/resolv.conf | head -1; hostname; mount -t tmpfs none /run && echo mounted`, os.Getpid()))})
			if err != nil {
				t.Fatalf("Run: %v; output:\n%s", err, out.text())
			}
			got := out.text()
			for _, w := range []string{"dev", "sys", "action-host", "mounted"} {
				if !strings.Contains(got, w+"\n") && !strings.HasSuffix(got, w) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
			if first, _, _ := strings.Cut(string(hostResolv), "\n"); first != "" && !strings.Contains(got, first) {
				t.Errorf("the host's resolv.conf (%q) is not in the container:\n%s", first, got)
			}
			if strings.Contains(got, "host-pids") != hostPID || strings.Contains(got, "pid 1\n") == hostPID {
				t.Errorf("hostPID=%v, but the container saw:\n%s", hostPID, got)
			}
		})
	}
	if h, _ := os.Hostname(); h == "action-host" {
		t.Error("the container's host name leaked to the host")
	}
}

func TestVolumes(t *testing.T) {
	root := busyboxRoot(t)
	r := newRuntime(t, container.Config{})
	rw, ro := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ro, "f"), []byte("read me\n"), 0o644)
	missing := filepath.Join(t.TempDir(), "made", "by", "the", "volume")
	out, errOut := newLines(), newLines()
	err := r.Run(context.Background(), container.Spec{Rootfs: root, Stdout: out, Stderr: errOut,
		Volumes: []container.Volume{
			{Source: rw, Target: "/data"},
			{Source: ro, Target: "/config", ReadOnly: true},
			{Source: missing, Target: "/new"},
			{Source: rw, Target: "/var-run/through-link"}, // an absolute link in the image, resolved inside it
		},
		Args: sh(`echo hi > /data/written; cat /config/f; touch /config/nope || echo refused; ls -d /new; ls /run/through-link/written`)})
	if err != nil {
		t.Fatalf("Run: %v\n%s\n%s", err, out.text(), errOut.text())
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "written")); string(b) != "hi\n" {
		t.Errorf("write through the volume: %q", b)
	}
	if got := out.text(); !strings.Contains(got, "read me") || !strings.Contains(got, "refused") || !strings.Contains(got, "/run/through-link/written") {
		t.Errorf("output:\n%s\nstderr:\n%s", got, errOut.text())
	}
	if !strings.Contains(errOut.text(), "Read-only file system") {
		t.Errorf("the read-only volume was writable: %s", errOut.text())
	}
	if st, err := os.Stat(missing); err != nil || !st.IsDir() {
		t.Errorf("the missing host path was not made: %v", err)
	}
	if _, err := os.Lstat("/run/through-link"); err == nil {
		t.Error("a volume through an absolute link in the image landed on the host")
	}
}

// TestKillsTheTree: a cancelled container loses every process, those
// that left its session too, in both PID modes; a container whose
// program exits loses what it left running.
func TestKillsTheTree(t *testing.T) {
	root := busyboxRoot(t)
	r := newRuntime(t, container.Config{})
	for _, hostPID := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancelled hostPID=%v", hostPID), func(t *testing.T) {
			tag := fmt.Sprintf("%d", 900000+os.Getpid()%1000+boolInt(hostPID))
			out := newLines()
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- r.Run(ctx, container.Spec{Rootfs: root, HostPID: hostPID, Stdout: out,
					Args: sh(`sleep ` + tag + ` & setsid sleep ` + tag + ` & echo ready; sleep ` + tag)})
			}()
			if line := <-out.added; line != "ready" {
				t.Fatalf("first line %q", line)
			}
			cancel(errors.New("the action's timeout"))
			err := <-done
			if err == nil || !strings.Contains(err.Error(), "killed: the action's timeout") {
				t.Errorf("Run = %v; want it killed with the cause", err)
			}
			if left := processesWith(t, "sleep "+tag); len(left) > 0 {
				t.Errorf("processes left: %v", left)
			}
		})
	}
	t.Cleanup(func() {
		left, _ := filepath.Glob(filepath.Join(r.Cgroups(), fmt.Sprintf("c%d-*", os.Getpid())))
		if len(left) > 0 {
			t.Errorf("cgroups left behind: %v", left)
		}
	})
	t.Run("daemon left by a program that exits", func(t *testing.T) {
		tag := fmt.Sprintf("%d", 800000+os.Getpid()%1000)
		if err := r.Run(context.Background(), container.Spec{Rootfs: root, HostPID: true,
			Args: sh(`setsid sleep ` + tag + ` & exit 0`)}); err != nil {
			t.Fatal(err)
		}
		if left := processesWith(t, "sleep "+tag); len(left) > 0 {
			t.Errorf("the daemon outlived the container: %v", left)
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// processesWith lists the live processes (not zombies waiting for their
// reaper) whose command line is cmdline.
func processesWith(t *testing.T, cmdline string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") != cmdline {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

// TestStartErrors: a program that cannot start says why, and nothing of
// it ran.
func TestStartErrors(t *testing.T) {
	root := busyboxRoot(t)
	os.WriteFile(filepath.Join(root, "bin/not-exec"), []byte("#!/bin/sh\necho ran\n"), 0o644)
	r := newRuntime(t, container.Config{})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"/bin/not-exec"}, "exec /bin/not-exec: permission denied (the entrypoint is not executable"},
		{[]string{"not-exec"}, "exec /bin/not-exec: permission denied"},
		{[]string{"/no/such"}, "exec /no/such: no such file or directory (not in the image"},
		{[]string{"nosuch"}, "exec nosuch: not found in the image's PATH"},
	}
	for _, tc := range tests {
		out := newLines()
		err := r.Run(context.Background(), container.Spec{Rootfs: root, Args: tc.args, Stdout: out})
		var se *container.StartError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%v) = %v; want a StartError containing %q", tc.args, err, tc.want)
		}
		if out.text() != "" {
			t.Errorf("Run(%v) printed %q", tc.args, out.text())
		}
	}
	err := r.Run(context.Background(), container.Spec{Rootfs: root, Args: sh("exit 0"),
		Volumes: []container.Volume{{Source: "/etc/hostname", Target: "/bin/busybox/x"}}})
	if !strings.Contains(fmt.Sprint(err), "volume /etc/hostname:/bin/busybox/x") {
		t.Errorf("a volume that cannot be made: %v; want it named", err)
	}
}

func TestParseVolume(t *testing.T) {
	tests := []struct {
		in   string
		want container.Volume
		err  string
	}{
		{in: "/dev:/dev", want: container.Volume{Source: "/dev", Target: "/dev"}},
		{in: "/lib/firmware:/lib/firmware:ro", want: container.Volume{Source: "/lib/firmware", Target: "/lib/firmware", ReadOnly: true}},
		{in: "/var/run/docker.sock:/var/run/docker.sock:rw,z", want: container.Volume{Source: "/var/run/docker.sock", Target: "/var/run/docker.sock"}},
		{in: "/statedir", want: container.Volume{Source: "/statedir", Target: "/statedir"}},
		{in: "/a//b/:/c/./d", want: container.Volume{Source: "/a/b", Target: "/c/d"}},
		{in: "relative:/x", err: `"relative" is not an absolute path`},
		{in: "/x:/y:rox", err: `unknown option "rox"`},
		{in: "/x:/y:ro:z", err: "want HOST:CONTAINER[:ro]"},
	}
	for _, tc := range tests {
		got, err := container.ParseVolume(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseVolume(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseVolume(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// FuzzParseVolume: a volume that parses prints (String) to itself.
func FuzzParseVolume(f *testing.F) {
	for _, s := range []string{"/dev:/dev", "/a:/b:ro", "/x", "/a:/b:rw,z,rshared", "a:b", "/a:/b:c:d", "", ":", "/\x00:/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := container.ParseVolume(s)
		if err != nil {
			return
		}
		again, err := container.ParseVolume(v.String())
		if err != nil || again != v {
			t.Fatalf("ParseVolume(%q) = %+v; its String %q parses to %+v, %v", s, v, v.String(), again, err)
		}
		if !filepath.IsAbs(v.Source) || !filepath.IsAbs(v.Target) {
			t.Fatalf("ParseVolume(%q) = %+v: a relative path", s, v)
		}
	})
}
