package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// The lab: network namespaces with a bridge, taps for QEMU, the real anvil
// binary serving inside a namespace, and dnsmasq sending IPv6 router
// advertisements only (iPXE waits ~13 s for one otherwise; see LAB-NOTES).
// Everything is driven through real tools (ip, qemu, curl, the anvil CLI),
// since the test process itself stays in the host namespace.

// repoRoot is the module root, two levels up from this package.
var repoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}()

// assets built once per test binary by TestMain.
var assets struct {
	anvil  string // the anvil binary
	kernel string // Debian's vmlinuz
	initrd string // newc cpio with testinit as /init
	// fetchInitrd is a newc cpio with fetchinit as /init and the virtio
	// network drivers in /modules: the boot-profile test's "OS".
	fetchInitrd string
	workDir     string
}

// fetchModules are the modules fetchinit loads, in dependency order, from
// the Debian kernel's tree (Debian builds virtio as modules).
var fetchModules = []string{
	"net/core/failover.ko", "drivers/net/net_failover.ko", "drivers/virtio/virtio_ring.ko",
	"drivers/virtio/virtio.ko", "drivers/virtio/virtio_pci_legacy_dev.ko",
	"drivers/virtio/virtio_pci_modern_dev.ko", "drivers/virtio/virtio_pci.ko", "drivers/net/virtio_net.ko",
}

// requireLab fails (in CI) or skips (elsewhere) when the lab cannot run.
func requireLab(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		missing = append(missing, "/dev/net/tun")
	}
	for _, bin := range []string{"ip", "qemu-system-x86_64", "dnsmasq", "curl", "cpio"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if assets.anvil == "" {
		missing = append(missing, "built assets (see TestMain output)")
	}
	if len(missing) == 0 {
		return
	}
	testtool.Need(t, "the end-to-end lab: %s (run `make test` as root; it installs the packages)", strings.Join(missing, ", "))
}

// buildAssets builds the anvil binary, fetches the kernel and packs the
// test initramfs into dir.
func buildAssets(dir string) error {
	anvil := filepath.Join(dir, "anvil")
	// Built as `make build` builds them (stripped), anvil-agent next to
	// anvil: `anvil bootenv build` takes it from there as the boot
	// environment's /init, whose size is part of every boot's time.
	for _, b := range []struct{ out, pkg string }{
		{anvil, "./cmd/anvil"},
		{filepath.Join(dir, "anvil-agent"), "./cmd/anvil-agent"},
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", b.out, b.pkg)
		cmd.Dir, cmd.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	kdir := filepath.Join(repoRoot, ".cache", "kernel")
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "fetch-kernel.sh"), kdir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fetch kernel: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initramfs")
	if err := buildInitramfs(filepath.Join(dir, "initramfs-root"), "./test/e2e/testinit", nil, initrd); err != nil {
		return err
	}
	release, err := os.ReadFile(filepath.Join(kdir, "VERSION"))
	if err != nil {
		return err
	}
	mods := map[string]string{}
	var order []string
	for _, m := range fetchModules {
		mods[filepath.Join(kdir, "modules", "lib", "modules", strings.TrimSpace(string(release)), "kernel", m)] = filepath.Base(m)
		order = append(order, filepath.Base(m))
	}
	fetchInitrd := filepath.Join(dir, "initramfs-fetch")
	if err := buildInitramfs(filepath.Join(dir, "initramfs-fetch-root"), "./test/e2e/fetchinit",
		func(root string) error {
			mdir := filepath.Join(root, "modules")
			if err := os.MkdirAll(mdir, 0o755); err != nil {
				return err
			}
			for src, name := range mods {
				b, err := os.ReadFile(src)
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(mdir, name), b, 0o644); err != nil {
					return err
				}
			}
			return os.WriteFile(filepath.Join(mdir, "order"), []byte(strings.Join(order, "\n")+"\n"), 0o644)
		}, fetchInitrd); err != nil {
		return err
	}
	assets.fetchInitrd = fetchInitrd
	assets.anvil, assets.kernel, assets.initrd, assets.workDir = anvil, filepath.Join(kdir, "vmlinuz"), initrd, dir
	return nil
}

// buildInitramfs builds the Go program pkg as /init of a newc archive at
// out, staged in root; extra, if set, adds files to root first.
func buildInitramfs(root, pkg string, extra func(root string) error, out string) error {
	return buildInitramfsFor("", root, pkg, extra, out)
}

// buildInitramfsFor is buildInitramfs with /init built for goarch ("":
// the host's).
func buildInitramfsFor(goarch, root, pkg string, extra func(root string) error, out string) error {
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(root, "init"), pkg)
	cmd.Dir, cmd.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0")
	if goarch != "" {
		cmd.Env = append(cmd.Env, "GOARCH="+goarch)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	if extra != nil {
		if err := extra(root); err != nil {
			return err
		}
	}
	// The kernel opens /dev/console for init's stdio before anything can
	// mount devtmpfs, so the node must be in the archive.
	if err := syscall.Mknod(filepath.Join(root, "dev", "console"), syscall.S_IFCHR|0o600, 5<<8|1); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("mknod dev/console (needs root): %w", err)
	}
	cmd = exec.Command("sh", "-c", "find . | cpio --quiet -o -H newc > "+out)
	cmd.Dir = root
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cpio: %v\n%s", err, o)
	}
	return nil
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// netns is a network namespace that is deleted when the test ends.
type netns struct {
	t    *testing.T
	name string
}

func newNetns(t *testing.T, name string) *netns {
	t.Helper()
	full := fmt.Sprintf("ae2e-%s-%d", name, os.Getpid()%100000)
	_ = exec.Command("ip", "netns", "del", full).Run() // a leftover from a killed run
	run(t, "ip", "netns", "add", full)
	n := &netns{t: t, name: full}
	t.Cleanup(func() {
		// Kill whatever still runs inside, then delete.
		if out, err := exec.Command("ip", "netns", "pids", full).Output(); err == nil {
			for _, p := range strings.Fields(string(out)) {
				_ = exec.Command("kill", "-9", p).Run()
			}
		}
		_ = exec.Command("ip", "netns", "del", full).Run()
	})
	n.ip("link", "set", "lo", "up")
	return n
}

// ip runs `ip -n NS args...`.
func (n *netns) ip(args ...string) string {
	n.t.Helper()
	return run(n.t, "ip", append([]string{"-n", n.name}, args...)...)
}

// exec runs a command inside the namespace and returns its combined output.
func (n *netns) exec(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name, name}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// bridge creates a bridge with the given IPv4 and IPv6 addresses (CIDR)
// and starts router advertisements on it.
func (n *netns) bridge(br, v4, v6 string) {
	n.t.Helper()
	n.ip("link", "add", br, "type", "bridge")
	n.ip("addr", "add", v4, "dev", br)
	n.ip("-6", "addr", "add", v6, "dev", br, "nodad")
	n.ip("link", "set", br, "up")
	n.startRA(br)
}

// hostLink connects the namespace to the host's with a veth pair, for a
// service the test runs on the host that a program in the namespace must
// reach (the host's loopback is not the namespace's), and returns the
// address of the host's end; the namespace's end, host0, has the next
// one. The pair's /30 in 10.79.0.0/16 and the host end's name come from
// the test binary's PID, so that runs at once on one machine rarely meet;
// one test of a run may use it. Deleting the namespace deletes the pair;
// so does the test's end.
func (n *netns) hostLink() string {
	n.t.Helper()
	pid := os.Getpid()
	host := fmt.Sprintf("ae2eh%d", pid%100000)
	third, fourth := pid%256, pid/256%64*4 // the /30 10.79.third.fourth
	hostIP, nsIP := fmt.Sprintf("10.79.%d.%d", third, fourth+1), fmt.Sprintf("10.79.%d.%d", third, fourth+2)
	_ = exec.Command("ip", "link", "del", host).Run() // a leftover from a killed run
	run(n.t, "ip", "link", "add", host, "type", "veth", "peer", "name", "host0", "netns", n.name)
	n.t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
	run(n.t, "ip", "addr", "add", hostIP+"/30", "dev", host)
	run(n.t, "ip", "link", "set", host, "up")
	n.ip("addr", "add", nsIP+"/30", "dev", "host0")
	n.ip("link", "set", "host0", "up")
	return hostIP
}

// tap adds a tap device for QEMU to the bridge.
func (n *netns) tap(br, tap string) {
	n.t.Helper()
	n.ip("tuntap", "add", "dev", tap, "mode", "tap")
	n.ip("link", "set", tap, "master", br, "up")
}

// startRA runs dnsmasq as a router-advertisement sender only (no DHCP, no
// DNS), so iPXE's IPv6 autoconfiguration completes at once.
func (n *netns) startRA(br string) {
	n.t.Helper()
	n.background("dnsmasq-ra-"+br, "dnsmasq", "--keep-in-foreground", "--port=0", "--conf-file=/dev/null",
		"--pid-file=", "--interface="+br, "--bind-interfaces", "--enable-ra",
		"--dhcp-range=::,constructor:"+br+",ra-only", "--log-facility=-")
}

// background starts a long-running command in the namespace; it is killed
// when the test ends. Its output goes to a file in the test's temp dir.
func (n *netns) background(label, name string, args ...string) *proc {
	n.t.Helper()
	return n.start(label, append([]string{"ip", "netns", "exec", n.name, name}, args...))
}

// backgroundNetOnly is background for a program that must see the host's
// mounts: `ip netns exec` also mounts the namespace's own /sys, which hides
// the cgroup hierarchies under /sys/fs/cgroup (runc, started by
// containerd, needs them); nsenter switches the network namespace alone.
func (n *netns) backgroundNetOnly(label, name string, args ...string) *proc {
	n.t.Helper()
	return n.start(label, append([]string{"nsenter", "--net=/var/run/netns/" + n.name, "--", name}, args...))
}

// start runs argv in the background as background describes.
func (n *netns) start(label string, argv []string) *proc {
	n.t.Helper()
	logPath := filepath.Join(n.t.TempDir(), label+".log")
	f, err := os.Create(logPath)
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		n.t.Fatalf("start %s (%s): %v", label, strings.Join(argv, " "), err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	n.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if n.t.Failed() {
			n.t.Logf("--- %s log (%s) ---\n%s", label, logPath, tail(p.output(), 60))
		}
	})
	return p
}

// proc is a background process.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// anvil is `anvil serve` running in a namespace.
type anvil struct {
	ns   *netns
	ip   string
	p    *proc
	base string   // http://IP:7080
	args []string // of `anvil serve`, for restart
	data string   // its data directory
}

// startAnvil runs `anvil serve` bound to ip inside ns, with the test kernel
// and initramfs as its boot environment (unless extra names another
// --bootenv-dir), and waits until it is ready.
func startAnvil(t *testing.T, ns *netns, ip string, extra ...string) *anvil {
	t.Helper()
	data := t.TempDir()
	bootenv := filepath.Join(data, "bootenv")
	if err := os.MkdirAll(bootenv, 0o755); err != nil {
		t.Fatal(err)
	}
	// Copies, not symlinks: the server refuses symlinks that leave the
	// directory it serves.
	for src, dst := range map[string]string{assets.kernel: "vmlinuz-x86_64", assets.initrd: "initramfs-x86_64"} {
		copyFile(t, src, filepath.Join(bootenv, dst))
	}
	a := &anvil{ns: ns, ip: ip, base: "http://" + ip + ":7080", data: data,
		args: append([]string{"serve", "--data-dir", data, "--bind", ip, "--log-level", "debug"}, extra...)}
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	return a
}

// start runs the server with a.args and waits until it is ready.
func (a *anvil) start() error {
	a.p = a.ns.background("anvil", assets.anvil, a.args...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		out, err := a.ns.exec(ctx, "curl", "-fsS", a.base+"/readyz")
		cancel()
		if err == nil && strings.Contains(out, "ok") {
			return nil
		}
		select {
		case <-a.p.done:
			return fmt.Errorf("anvil serve exited early (%v):\n%s", a.p.err, tail(a.p.output(), 40))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("anvil serve not ready after 30s: %s\n%s", out, tail(a.p.output(), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// restart stops the server gracefully (SIGTERM) and starts it again on the
// same data directory. It may be called from any goroutine.
func (a *anvil) restart() error {
	if err := a.stop(); err != nil {
		return err
	}
	return a.start()
}

// stop stops the server gracefully (SIGTERM).
func (a *anvil) stop() error {
	_ = a.p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.p.done:
		return nil
	case <-time.After(20 * time.Second):
		return fmt.Errorf("anvil serve did not stop within 20s:\n%s", tail(a.p.output(), 40))
	}
}

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// cli runs an anvil client command against the server, from inside its
// namespace, and returns its output.
func (a *anvil) cli(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := a.ns.exec(ctx, assets.anvil, append(a.clientArgs(), args...)...)
	if err != nil {
		t.Fatalf("anvil %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// clientArgs are the flags every client command needs: the server and the
// admin token it wrote into its data directory.
func (a *anvil) clientArgs() []string {
	return []string{"--server", a.base, "--token-file", filepath.Join(a.data, "auth", "admin.token")}
}

// apply applies a YAML manifest.
func (a *anvil) apply(t *testing.T, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	a.cli(t, "apply", "-f", f)
}

// get fetches a path from the server's HTTP port with curl.
func (a *anvil) get(t *testing.T, path string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := a.ns.exec(ctx, "curl", "-sS", "-w", "\n%{http_code}", a.base+path)
	if err != nil {
		t.Fatalf("curl %s: %v\n%s", path, err, out)
	}
	i := strings.LastIndexByte(out, '\n')
	var code int
	fmt.Sscan(out[i+1:], &code)
	return out[:i], code
}

// metric returns the sum of the samples of a Prometheus metric whose
// label set contains every labels pair ("name" matches all of them).
func (a *anvil) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	body, code := a.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue // a longer metric name
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		var v float64
		fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v)
		sum += v
	}
	return sum
}

// vm describes one QEMU machine.
type vm struct {
	name string
	mac  string
	uefi bool // OVMF with the NIC's option ROM disabled; else SeaBIOS + iPXE ROM
	tap  string
	// disk, if set, is a raw disk image attached as virtio-blk. Such a VM
	// boots from the network first, then from the disk, and is allowed to
	// reboot (its installed OS powers it off at the end).
	disk string
	// markers are serial console strings whose first appearance is timed
	// (vmResult.seen), from QEMU's start.
	markers []string
	// stop, when closed, ends the VM early (a test that already knows the
	// outcome, e.g. a failed workflow, need not wait for the timeout).
	stop <-chan struct{}
	// qemuArgs are appended to QEMU's arguments (e.g. OVMF's -fw_cfg
	// switches).
	qemuArgs []string
	// netdev, if set, is QEMU's -netdev for the NIC (id n0) instead of
	// the tap (e.g. a datagram socket to a switch the test runs).
	netdev string
	// noBootOrder leaves out a SeaBIOS machine's -boot: whoever starts
	// QEMU gives it (the BMC test's chassis control, from the one-time
	// boot device it was told).
	noBootOrder bool
	// cpus and memoryMiB size the VM; 0: one vCPU, 512 MiB.
	cpus, memoryMiB int
	// diskSerial, if set, is the serial number of the disk (virtio-blk's
	// serial=), as an inventory reads it.
	diskSerial string
	// arm64 makes it an ARM64 UEFI machine: qemu-system-aarch64's virt
	// board with AAVMF (qemu-efi-aarch64), whose own PXE client loads
	// iPXE. uefi is then implied.
	arm64 bool
}

// AAVMF's firmware and variable store template (Debian's qemu-efi-aarch64).
const (
	aavmfCode = "/usr/share/AAVMF/AAVMF_CODE.fd"
	aavmfVars = "/usr/share/AAVMF/AAVMF_VARS.fd"
)

// vmResult is how a VM run ended.
type vmResult struct {
	serial string
	err    error // nil if QEMU exited by itself (power off)
	start  time.Time
	seen   map[string]time.Duration
}

var qemuSlots = make(chan struct{}, 1) // TCG on 2 cores: one VM at a time

// boot runs the VM in ns until it powers off or timeout passes, and returns
// its serial console output.
func (n *netns) boot(m vm, timeout time.Duration) vmResult {
	n.t.Helper()
	qemuSlots <- struct{}{}
	defer func() { <-qemuSlots }()
	dir := n.t.TempDir()
	serial := filepath.Join(dir, "serial.log")
	args := n.qemuArgs(m, dir, "file:"+serial)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stopped := false
	if m.stop != nil {
		go func() {
			select {
			case <-m.stop:
				stopped = true
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	qemu := "qemu-system-x86_64"
	if m.arm64 {
		qemu = "qemu-system-aarch64"
	}
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name, qemu}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	res := vmResult{start: start, seen: map[string]time.Duration{}}
	stopWatch := watchSerial(serial, m.markers, start, res.seen)
	err := cmd.Run()
	stopWatch()
	b, _ := os.ReadFile(serial)
	res.serial, res.err = string(b), err
	if ctx.Err() != nil && stopped {
		res.err = fmt.Errorf("VM %s stopped by the test after %s", m.name, time.Since(start).Round(time.Second))
	} else if ctx.Err() != nil {
		res.err = fmt.Errorf("VM %s still running after %s (killed)", m.name, timeout)
	} else if err != nil {
		res.err = fmt.Errorf("qemu: %v: %s", err, stderr.String())
	}
	n.t.Logf("VM %s (%s, uefi=%v) ran %.1fs", m.name, m.mac, m.uefi, time.Since(start).Seconds())
	return res
}

// qemuArgs are QEMU's arguments for m (without the program's name), its
// serial console going to the chardev serial, its firmware's variables
// (UEFI) in dir.
func (n *netns) qemuArgs(m vm, dir, serial string) []string {
	n.t.Helper()
	netdev := "tap,id=n0,ifname=" + m.tap + ",script=no,downscript=no"
	if m.netdev != "" {
		netdev = m.netdev
	}
	cpus, mem := max(m.cpus, 1), m.memoryMiB
	if mem == 0 {
		mem = 512
	}
	args := []string{"-accel", "tcg", "-m", strconv.Itoa(mem), "-smp", strconv.Itoa(cpus), "-display", "none",
		"-serial", serial, "-monitor", "none", "-netdev", netdev}
	if m.arm64 {
		return append(append(args, n.arm64Args(m, dir)...), m.qemuArgs...)
	}
	switch {
	case m.disk == "":
		args = append(args, "-no-reboot")
	case m.diskSerial != "" && !m.uefi:
		args = append(args, "-drive", "file="+m.disk+",format=raw,if=none,id=disk0",
			"-device", "virtio-blk-pci,drive=disk0,serial="+m.diskSerial)
	case m.uefi:
		// OVMF boots in fw_cfg's bootorder: the NIC (bootindex=1), then
		// this disk.
		dev := "virtio-blk-pci,drive=disk0,bootindex=2"
		if m.diskSerial != "" {
			dev += ",serial=" + m.diskSerial
		}
		args = append(args, "-drive", "file="+m.disk+",format=raw,if=none,id=disk0", "-device", dev)
	default:
		args = append(args, "-drive", "file="+m.disk+",format=raw,if=virtio")
	}
	if m.uefi {
		vars := filepath.Join(dir, "OVMF_VARS.fd")
		b, err := os.ReadFile("/usr/share/OVMF/OVMF_VARS.fd")
		if err != nil {
			n.t.Fatalf("OVMF (apt-get install ovmf): %v", err)
		}
		if err := os.WriteFile(vars, b, 0o644); err != nil {
			n.t.Fatal(err)
		}
		args = append(args, "-machine", "q35,graphics=off",
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE.fd",
			"-drive", "if=pflash,format=raw,unit=1,file="+vars,
			// romfile= disables iPXE's option ROM: OVMF's own PXE client runs.
			"-device", "virtio-net-pci,netdev=n0,mac="+m.mac+",romfile=,bootindex=1")
	} else {
		boot := "n"
		if m.disk != "" {
			boot = "order=nc"
		}
		args = append(args, "-machine", "pc,graphics=off")
		if !m.noBootOrder {
			args = append(args, "-boot", boot)
		}
		args = append(args, "-device", "virtio-net-pci,netdev=n0,mac="+m.mac)
	}
	args = append(args, m.qemuArgs...)
	return args
}

// arm64Args are the machine, firmware, NIC and disk arguments of the
// ARM64 machine m: QEMU's virt board with a Cortex-A57 (cheaper under
// TCG than -cpu max, whose pointer authentication and SVE are emulated
// at every instruction), AAVMF with its variables in dir, the NIC first
// in the boot order, then the disk.
func (n *netns) arm64Args(m vm, dir string) []string {
	n.t.Helper()
	vars := filepath.Join(dir, "AAVMF_VARS.fd")
	b, err := os.ReadFile(aavmfVars)
	if err != nil {
		n.t.Fatalf("AAVMF (apt-get install qemu-efi-aarch64): %v", err)
	}
	if err := os.WriteFile(vars, b, 0o644); err != nil {
		n.t.Fatal(err)
	}
	args := []string{"-machine", "virt", "-cpu", "cortex-a57",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + aavmfCode,
		"-drive", "if=pflash,format=raw,unit=1,file=" + vars,
		// romfile=: the x86 iPXE ROM QEMU would attach is of no use to
		// AAVMF, whose own virtio-net driver and PXE client run.
		"-device", "virtio-net-pci,netdev=n0,mac=" + m.mac + ",romfile=,bootindex=1"}
	if m.disk == "" {
		return append(args, "-no-reboot")
	}
	dev := "virtio-blk-pci,drive=disk0,bootindex=2"
	if m.diskSerial != "" {
		dev += ",serial=" + m.diskSerial
	}
	return append(args, "-drive", "file="+m.disk+",format=raw,if=none,id=disk0", "-device", dev)
}

// watchSerial polls the serial log for markers and records in seen when
// each first appears, relative to start, until the returned stop is called.
func watchSerial(path string, markers []string, start time.Time, seen map[string]time.Duration) (stop func()) {
	if len(markers) == 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			b, _ := os.ReadFile(path)
			for _, m := range markers {
				if _, ok := seen[m]; !ok && bytes.Contains(b, []byte(m)) {
					seen[m] = time.Since(start)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}
