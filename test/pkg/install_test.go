package pkg

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// The rootfs: the smallest Debian that boots systemd and runs the
// package's maintainer scripts. Its cache key is these two.
const suite = "bookworm"

var packages = []string{"systemd", "systemd-sysv", "dbus", "adduser"}

// rootfs returns the cached Debian root, making it with debootstrap when
// missing (cold: about 2 minutes and 240 MB).
func rootfs(t *testing.T, module string) string {
	t.Helper()
	key := sha256.Sum256([]byte(suite + "\n" + strings.Join(packages, ",") + "\n" + runtime.GOARCH))
	dir := filepath.Join(module, ".cache", "pkgtest", "rootfs-"+suite+"-"+hex.EncodeToString(key[:6]))
	if _, err := os.Stat(filepath.Join(dir, "sbin", "init")); err == nil {
		return dir
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("debootstrap", "--variant=minbase", "--include="+strings.Join(packages, ","), suite, tmp, "http://deb.debian.org/debian")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap %s: %v\n%s", suite, err, tail(out))
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// poll calls cond until it holds or bound passes: a bound that keeps a
// broken install from hanging the test, never a measure of anything. It
// returns an error rather than failing, so the caller can say what it
// saw (testtool.WaitFor cannot).
func poll(bound time.Duration, cond func() bool) error {
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", bound)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// container is a booted systemd-nspawn container.
type container struct {
	t    *testing.T
	root string
	pid1 int // the container's systemd, as the host sees it
}

// boot copies the cached rootfs and boots it with its own network (only
// lo), so that the service's ports are not the host's.
func boot(t *testing.T, cached string) *container {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-a", "--reflink=auto", cached, root).CombinedOutput(); err != nil {
		t.Fatalf("copy rootfs: %v\n%s", err, out)
	}
	var log bytes.Buffer
	cmd := exec.Command("systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--private-network",
		"--boot", "--console=pipe", "-D", root, "-M", "anvil-pkgtest")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := &container{t: t, root: root}
	t.Cleanup(func() {
		if c.pid1 != 0 {
			_ = exec.Command("nsenter", "-t", strconv.Itoa(c.pid1), "-a", "systemctl", "poweroff").Run()
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	err := poll(60*time.Second, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		c.pid1, _ = strconv.Atoi(f[0])
		out, _ := c.run("systemctl", "is-system-running")
		s := strings.TrimSpace(out)
		return s == "running" || s == "degraded"
	})
	if err != nil {
		out, _ := c.run("systemctl", "--failed", "--no-pager")
		t.Fatalf("the container's systemd did not come up: %v\nnspawn: %s\n%s", err, log.String(), out)
	}
	return c
}

// run runs a command in the container's namespaces, as its root.
func (c *container) run(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(c.pid1), "-a", "--"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must is run, failing the test with the command's output.
func (c *container) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("in the container, %q: %v\n%s", args, err, out)
	}
	return out
}

// active waits for anvil.service to be active and returns its main PID,
// or fails saying what systemd says of it.
func (c *container) active() string {
	c.t.Helper()
	var state string
	err := poll(120*time.Second, func() bool {
		state, _ = c.run("systemctl", "show", "-p", "ActiveState,SubState,Result,MainPID", "anvil.service")
		return strings.Contains(state, "ActiveState=active\n")
	})
	if err != nil {
		journal, _ := c.run("journalctl", "-u", "anvil", "--no-pager", "-n", "30")
		hint := ""
		if strings.Contains(state, "SubState=start\n") || strings.Contains(journal, "timeout") {
			hint = "\nThe unit is Type=notify: anvil serve must tell systemd it is ready (sd_notify READY=1); a serve without it stays 'activating' until TimeoutStartSec."
		}
		c.t.Fatalf("anvil.service did not become active:\n%s%s\njournal:\n%s", state, hint, journal)
	}
	for _, l := range strings.Split(state, "\n") {
		if p, ok := strings.CutPrefix(l, "MainPID="); ok {
			return p
		}
	}
	return ""
}

// anvil runs the packaged client against the packaged server, as root
// with the server's admin token and CA.
func (c *container) anvil(args ...string) string {
	c.t.Helper()
	return c.must(append([]string{"anvil", "--token-file", "/var/lib/anvil/auth/admin.token"}, args...)...)
}

// release builds this tree's .deb for the host's architecture.
func release(t *testing.T, module string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "dist")
	cmd := exec.Command("scripts/release.sh")
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "OUT="+out, "ARCHES="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "anvil_*_"+runtime.GOARCH+".deb"))
	if len(debs) != 1 {
		t.Fatalf("release made %q; want one .deb", debs)
	}
	return debs[0]
}

// newer repacks deb with a later version (VERSION+next): an upgrade as
// dpkg sees it, the maintainer scripts and files of this tree.
func newer(t *testing.T, deb string) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pkg")
	if out, err := exec.Command("dpkg-deb", "-R", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -R: %v\n%s", err, out)
	}
	control := filepath.Join(dir, "DEBIAN", "control")
	b, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	var version string
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if v, ok := strings.CutPrefix(l, "Version: "); ok {
			version = v + "+next"
			lines[i] = "Version: " + version
		}
	}
	if err := os.WriteFile(control, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(filepath.Dir(dir), "anvil_next.deb")
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zxz", "-z1", "--build", dir, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, b)
	}
	return out, version
}

func copyInto(t *testing.T, c *container, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.root, dst), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDebInstall: install, start, apply, upgrade, find it all again.
func TestDebInstall(t *testing.T) {
	testtool.RequireRoot(t, "systemd-nspawn and dpkg in a container")
	testtool.RequireBinary(t, "debootstrap", "debootstrap")
	testtool.RequireBinary(t, "systemd-nspawn", "systemd-container")
	testtool.RequireBinary(t, "nsenter", "util-linux")
	testtool.RequireBinary(t, "dpkg-deb", "dpkg")
	module := testtool.ModuleRoot(t)

	deb := release(t, module)
	next, nextVersion := newer(t, deb)
	c := boot(t, rootfs(t, module))

	// The container's network is lo alone, so serve cannot guess its
	// address: a drop-in gives it, as a site would (docs/install.md).
	if err := os.MkdirAll(filepath.Join(c.root, "etc/systemd/system/anvil.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.root, "etc/systemd/system/anvil.service.d/site.conf"),
		[]byte("[Service]\nEnvironment=ANVIL_PUBLIC_IP=127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	copyInto(t, c, deb, "root/anvil.deb")
	copyInto(t, c, next, "root/anvil-next.deb")
	copyInto(t, c, filepath.Join(module, "examples", "hardware.yaml"), "root/hardware.yaml")

	c.must("dpkg", "-i", "/root/anvil.deb")
	if out := c.must("systemctl", "is-enabled", "anvil"); strings.TrimSpace(out) != "enabled" {
		t.Errorf("anvil.service is %q after install; want enabled", out)
	}
	if out := c.must("stat", "-c", "%U:%G %a", "/var/lib/anvil"); strings.TrimSpace(out) != "anvil:anvil 750" {
		t.Errorf("/var/lib/anvil is %q; want anvil:anvil 750", out)
	}
	pid := c.active()
	if out := c.must("stat", "-c", "%U", "/proc/"+pid); strings.TrimSpace(out) != "anvil" {
		t.Errorf("anvil serve runs as %q; want anvil", out)
	}
	if out := c.must("grep", "^CapEff", "/proc/"+pid+"/status"); !strings.Contains(out, "0000000000000400") {
		t.Errorf("anvil serve's effective capabilities: %s; want CAP_NET_BIND_SERVICE (0x400) alone", out)
	}

	c.anvil("apply", "-f", "/root/hardware.yaml")
	before := c.anvil("get", "hardware", "rack1-node07", "-o", "yaml")

	c.must("dpkg", "-i", "/root/anvil-next.deb")
	if out := c.must("dpkg-query", "-W", "-f", "${Version}", "anvil"); out != nextVersion {
		t.Errorf("installed version %q after the upgrade; want %q", out, nextVersion)
	}
	newPid := c.active()
	if newPid == pid {
		t.Errorf("anvil serve still runs as PID %s after the upgrade; want it restarted on the new binary", pid)
	}
	if after := c.anvil("get", "hardware", "rack1-node07", "-o", "yaml"); after != before {
		t.Errorf("the Hardware changed across the upgrade:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Remove keeps the data; the next install finds it.
	c.must("dpkg", "-r", "anvil")
	if _, err := os.Stat(filepath.Join(c.root, "var/lib/anvil/auth/admin.token")); err != nil {
		t.Errorf("dpkg -r removed the data: %v", err)
	}
	if _, err := c.run("getent", "passwd", "anvil"); err != nil {
		t.Error("dpkg -r removed the anvil user")
	}
	c.must("dpkg", "--purge", "anvil")
	if _, err := os.Stat(filepath.Join(c.root, "var/lib/anvil")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dpkg --purge left /var/lib/anvil: %v", err)
	}
}
