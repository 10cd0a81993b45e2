package pkg

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// boot copies the cached rootfs and boots it in the lab's network
// namespace ns (lab), so that the service binds the lab's address and
// answers the VM on its bridge, not the host's network.
func boot(t *testing.T, cached, ns string) *container {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-a", "--reflink=auto", cached, root).CombinedOutput(); err != nil {
		t.Fatalf("copy rootfs: %v\n%s", err, out)
	}
	var log bytes.Buffer
	cmd := exec.Command("systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--network-namespace-path=/run/netns/"+ns,
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

// anvil runs the packaged client against the packaged server (on the
// lab's address), as root with the server's admin token.
func (c *container) anvil(args ...string) string {
	c.t.Helper()
	return c.must(append([]string{"anvil", "--server", "http://" + labAddr + ":7080",
		"--token-file", "/var/lib/anvil/auth/admin.token"}, args...)...)
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

// copyInto copies the host's file or directory src to dst in the
// container (a directory's contents into dst, made if missing).
func copyInto(t *testing.T, c *container, src, dst string) {
	t.Helper()
	to := filepath.Join(c.root, dst)
	if fi, err := os.Stat(src); err == nil && fi.IsDir() {
		if err := os.MkdirAll(to, 0o755); err != nil {
			t.Fatal(err)
		}
		src, to = src+"/.", to+"/"
	}
	if out, err := exec.Command("cp", "-a", "--reflink=auto", src, to).CombinedOutput(); err != nil {
		t.Fatalf("copy %s into the container: %v\n%s", src, err, out)
	}
}

// The demo's network (scripts/demo.sh, examples/demo/): Anvil is
// 10.20.0.1 on a bridge, the machine demo-node1 a QEMU VM on a tap of it.
const (
	labAddr  = "10.20.0.1"
	demoMAC  = "52:54:00:20:00:11"
	demoNode = "demo-node1"
	demoWF   = "demo-node1-install"
	// installedMarker is what the installed OS (test/e2e/testinit) prints
	// once booted from the disk the workflow wrote, naming the machine.
	installedMarker = "ANVIL-INSTALLED-OS hostname=" + demoNode
)

// lab makes the demo's network in a new namespace: the bridge with
// Anvil's address, the VM's tap, and a router-advertisement sender (iPXE
// otherwise waits about 13 s for one). It returns the namespace's name.
func lab(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("anvil-pkgtest-%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %q: %v\n%s", ns, args, err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", ns).Run() // a leftover from a killed run
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("link", "set", "lo", "up")
	ip("link", "add", "br0", "type", "bridge")
	ip("addr", "add", labAddr+"/24", "dev", "br0")
	ip("-6", "addr", "add", "fd20::1/64", "dev", "br0", "nodad")
	ip("link", "set", "br0", "up")
	ip("tuntap", "add", "dev", "tap0", "mode", "tap")
	ip("link", "set", "tap0", "master", "br0", "up")
	background(t, "dnsmasq", "ip", "netns", "exec", ns, "dnsmasq", "--keep-in-foreground", "--port=0",
		"--conf-file=/dev/null", "--pid-file=", "--interface=br0", "--bind-interfaces", "--enable-ra",
		"--dhcp-range=::,constructor:br0,ra-only", "--log-facility=-")
	return ns
}

// background starts argv (its output discarded), killed by its PID when
// the test ends.
func background(t *testing.T, label string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// demoAssets makes the demo machine's boot environment and OS image with
// the released binaries (the host's `anvil bootenv build`, the packaged
// anvil-agent as /init), as make demo does (scripts/demo-assets.sh);
// cached in .cache/pkgtest/demo.
func demoAssets(t *testing.T, module, deb string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Dir(deb)
	for _, name := range []string{"anvil", "anvil-agent"} {
		src := filepath.Join(dist, name+"-linux-"+runtime.GOARCH)
		if out, err := exec.Command("cp", src, filepath.Join(bin, name)).CombinedOutput(); err != nil {
			t.Fatalf("release's %s: %v\n%s", name, err, out)
		}
	}
	out := filepath.Join(module, ".cache", "pkgtest", "demo")
	cmd := exec.Command("scripts/demo-assets.sh", out)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "ANVIL="+filepath.Join(bin, "anvil"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/demo-assets.sh: %v\n%s", err, tail(b))
	}
	return out
}

// bootDemoVM switches on demo-node1 in the lab (BIOS, iPXE, a blank
// 64 MiB disk) and returns its serial console once it powers off: after
// the workflow, its reboot and the installed OS. bound keeps a stuck
// install from hanging the test.
func bootDemoVM(t *testing.T, ns string, bound time.Duration) (string, error) {
	t.Helper()
	dir := t.TempDir()
	disk, serial := filepath.Join(dir, "disk.raw"), filepath.Join(dir, "serial.log")
	f, err := os.Create(disk)
	if err == nil {
		err = errors.Join(f.Truncate(64<<20), f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-smp", "1",
		"-display", "none", "-monitor", "none", "-machine", "pc,graphics=off", "-serial", "file:"+serial,
		"-boot", "order=nc", "-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+demoMAC, "-drive", "file="+disk+",format=raw,if=virtio")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("qemu: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
		if err != nil {
			err = fmt.Errorf("qemu: %v: %s", err, stderr.String())
		}
	case <-time.After(bound):
		_ = cmd.Process.Kill()
		<-done
		err = fmt.Errorf("the VM still ran after %s (killed)", bound)
	}
	b, _ := os.ReadFile(serial)
	return string(b), err
}

// workflowState is the workflow's status.state as the packaged CLI reads it.
func (c *container) workflowState(name string) string {
	c.t.Helper()
	var wf struct {
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	out := c.anvil("get", "workflow", name, "-o", "json")
	if err := json.Unmarshal([]byte(out), &wf); err != nil {
		c.t.Fatalf("anvil get workflow %s -o json: %v\n%s", name, err, out)
	}
	return wf.Status.State
}

// TestDebInstall: install the .deb, start its service, provision the
// demo VM through it, upgrade, find it all again.
func TestDebInstall(t *testing.T) {
	testtool.RequireRoot(t, "systemd-nspawn, dpkg in a container, a network namespace and QEMU")
	testtool.RequireBinary(t, "debootstrap", "debootstrap")
	testtool.RequireBinary(t, "systemd-nspawn", "systemd-container")
	testtool.RequireBinary(t, "nsenter", "util-linux")
	testtool.RequireBinary(t, "dpkg-deb", "dpkg")
	testtool.RequireBinary(t, "ip", "iproute2")
	testtool.RequireBinary(t, "qemu-system-x86_64", "qemu-system-x86")
	testtool.RequireBinary(t, "dnsmasq", "dnsmasq-base")
	testtool.RequireBinary(t, "cpio", "cpio")
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		testtool.Need(t, "/dev/net/tun for the VM's tap: %v", err)
	}
	if runtime.GOARCH != "amd64" {
		testtool.Need(t, "an amd64 host: the demo VM is a BIOS x86_64 machine (the arm64 install is test/e2e's)")
	}
	module := testtool.ModuleRoot(t)

	deb := release(t, module)
	next, nextVersion := newer(t, deb)
	assets := demoAssets(t, module, deb)
	ns := lab(t)
	c := boot(t, rootfs(t, module), ns)

	// The site's setting, as docs/install.md has it: the provisioning
	// network's address.
	if err := os.MkdirAll(filepath.Join(c.root, "etc/systemd/system/anvil.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.root, "etc/systemd/system/anvil.service.d/site.conf"),
		[]byte("[Service]\nEnvironment=ANVIL_BIND="+labAddr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	copyInto(t, c, deb, "root/anvil.deb")
	copyInto(t, c, next, "root/anvil-next.deb")
	copyInto(t, c, filepath.Join(module, "examples", "demo"), "root/demo")

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

	// The boot environment and the image where the packaged config's
	// defaults look (DATA_DIR/bootenv, DATA_DIR/images), the service's own.
	copyInto(t, c, filepath.Join(assets, "bootenv"), "var/lib/anvil/bootenv")
	if err := os.MkdirAll(filepath.Join(c.root, "var/lib/anvil/images"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyInto(t, c, filepath.Join(assets, "images", "os.raw.zst"), "var/lib/anvil/images/os.raw.zst")
	c.must("chown", "-R", "anvil:anvil", "/var/lib/anvil/bootenv", "/var/lib/anvil/images")

	c.anvil("apply", "-f", "/root/demo/")
	serial, err := bootDemoVM(t, ns, 8*time.Minute)
	if err != nil {
		journal, _ := c.run("journalctl", "-u", "anvil", "--no-pager", "-n", "40")
		t.Fatalf("the demo VM: %v\nserial console:\n%s\njournal:\n%s", err, tail([]byte(serial)), journal)
	}
	if state := c.workflowState(demoWF); state != "SUCCESS" {
		t.Errorf("workflow %s is %q after the VM powered off; want SUCCESS\nserial console:\n%s", demoWF, state, tail([]byte(serial)))
	}
	if !strings.Contains(serial, installedMarker) {
		t.Errorf("the VM's console lacks %q: the installed OS did not boot from the disk the workflow wrote\n%s", installedMarker, tail([]byte(serial)))
	}
	hwBefore := c.anvil("get", "hardware", demoNode, "-o", "yaml")
	wfBefore := c.anvil("get", "workflow", demoWF, "-o", "yaml")

	c.must("dpkg", "-i", "/root/anvil-next.deb")
	if out := c.must("dpkg-query", "-W", "-f", "${Version}", "anvil"); out != nextVersion {
		t.Errorf("installed version %q after the upgrade; want %q", out, nextVersion)
	}
	newPid := c.active()
	if newPid == pid {
		t.Errorf("anvil serve still runs as PID %s after the upgrade; want it restarted on the new binary", pid)
	}
	if after := c.anvil("get", "hardware", demoNode, "-o", "yaml"); after != hwBefore {
		t.Errorf("the Hardware changed across the upgrade:\nbefore:\n%s\nafter:\n%s", hwBefore, after)
	}
	if after := c.anvil("get", "workflow", demoWF, "-o", "yaml"); after != wfBefore {
		t.Errorf("the Workflow changed across the upgrade:\nbefore:\n%s\nafter:\n%s", wfBefore, after)
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
