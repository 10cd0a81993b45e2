package bootenv

import (
	"bufio"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/anvilproj/anvil/internal/kmod"
	"github.com/anvilproj/anvil/internal/testtool"
)

// repoRoot is the repository, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// debianKernel returns .cache/kernel, where scripts/fetch-kernel.sh (make
// kernel) puts Debian's kernel, modules and package. Missing, the test
// fails in CI and is skipped elsewhere.
func debianKernel(t *testing.T, need ...string) string {
	t.Helper()
	dir := filepath.Join(repoRoot, ".cache", "kernel")
	for _, name := range append([]string{"vmlinuz", "modules"}, need...) {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			testtool.Need(t, "%s (run `make kernel`, i.e. scripts/fetch-kernel.sh)", filepath.Join(dir, name))
		}
	}
	return dir
}

// staticStandIn writes a tiny static x86-64 executable standing in for
// anvil where the boot environment is not booted.
func staticStandIn(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "anvil")
	must(os.WriteFile(p, elfFile(elf.ET_EXEC, elf.EM_X86_64, nil, ""), 0o755))
	return p
}

// mustHaveModules checks that each module and everything it needs is in
// the archive, by the archive's own index.
func mustHaveModules(t *testing.T, recs map[string]record, release string, modules ...string) {
	t.Helper()
	dir := "lib/modules/" + release + "/"
	fsys := fstest.MapFS{}
	for name, r := range recs {
		if rel, ok := strings.CutPrefix(name, dir); ok && r.data != nil {
			fsys[rel] = &fstest.MapFile{Data: r.data}
		}
	}
	idx, err := kmod.ReadIndex(fsys)
	if err != nil {
		t.Fatalf("the initramfs's module index: %v", err)
	}
	for _, m := range modules {
		order, err := idx.LoadOrder(m)
		if err != nil {
			t.Errorf("%s: %v", m, err)
			continue
		}
		for _, dep := range order {
			if _, ok := recs[dir+idx.Path(dep)]; !ok {
				t.Errorf("%s needs %s, whose file %s is not in the initramfs", m, dep, idx.Path(dep))
			}
		}
	}
}

// TestBuildDebian builds from the kernel and module tree of Debian's
// package as scripts/fetch-kernel.sh unpacks them (the e2e tests' and the
// demo's boot environment), checks what is inside with GNU cpio and the
// archive's own module index, and that a second build is up to date and a
// changed input rebuilds.
func TestBuildDebian(t *testing.T) {
	kdir := debianKernel(t)
	out := t.TempDir()
	cfg := Config{OutDir: out, Kernel: filepath.Join(kdir, "vmlinuz"), Modules: filepath.Join(kdir, "modules"),
		Anvil: staticStandIn(t), Busybox: BusyboxNone, Compression: CompressNone, Logger: quietLogger()}
	res, err := Build(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", res.Summary())
	if res.Modules < 300 {
		t.Errorf("%d modules; the default selection takes about 500 of Debian's kernel", res.Modules)
	}
	raw, err := os.ReadFile(res.Initramfs)
	if err != nil {
		t.Fatal(err)
	}
	listed := cpioList(t, decompressAny(t, raw))
	release := res.KernelRelease
	for _, want := range []string{
		"init", "dev/console", "proc", "sys", "dev", "tmp", "run", "mnt", "etc",
		"lib/modules/" + release + "/modules.dep", "lib/modules/" + release + "/modules.alias",
		"lib/modules/" + release + "/modules.builtin",
		"lib/modules/" + release + "/kernel/drivers/net/virtio_net.ko.zst",
		"lib/modules/" + release + "/kernel/drivers/block/virtio_blk.ko.zst",
		"lib/modules/" + release + "/kernel/fs/fat/vfat.ko.zst",
	} {
		if !slices.Contains(listed, want) {
			t.Errorf("cpio -it does not list %s", want)
		}
	}
	for _, unwanted := range []string{"drivers/gpu/", "sound/", "drivers/net/wireless/", "drivers/media/"} {
		for _, name := range listed {
			if strings.Contains(name, "/kernel/"+unwanted) {
				t.Errorf("%s is in the initramfs; the default selection leaves %s out", name, unwanted)
				break
			}
		}
	}
	recs := readInitramfs(t, res.Initramfs)
	mustHaveModules(t, recs, release,
		"virtio_pci", "virtio_net", "virtio_blk", "virtio_scsi", "e1000", "e1000e", "igb", "ixgbe", "i40e", "ice",
		"bnxt_en", "tg3", "mlx5_core", "r8169", "realtek", "nvme", "ahci", "ata_piix", "sd_mod", "megaraid_sas",
		"mpt3sas", "smartpqi", "hpsa", "usb_storage", "xhci_pci", "usbhid", "raid1", "raid456", "dm_mod",
		"vfat", "nls_cp437", "ext4", "xfs", "btrfs", "isofs", "crc32c_generic", "8021q", "bonding")

	again, err := Build(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !again.UpToDate {
		t.Error("second build with the same inputs was not up to date")
	}
	later := time.Now().Add(time.Minute)
	must(os.Chtimes(cfg.Anvil, later, later))
	rebuilt, err := Build(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rebuilt.UpToDate {
		t.Error("build after the anvil binary changed was up to date")
	}
}

// TestBuildDebianPackage builds straight from Debian's linux-image .deb,
// the kernel included.
func TestBuildDebianPackage(t *testing.T) {
	kdir := debianKernel(t, "linux-image.deb")
	res, err := Build(context.Background(), Config{OutDir: t.TempDir(), Modules: filepath.Join(kdir, "linux-image.deb"),
		Anvil: staticStandIn(t), Busybox: BusyboxNone, Compression: "zstd-3", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	kernel, _ := os.ReadFile(res.Kernel)
	want, _ := os.ReadFile(filepath.Join(kdir, "vmlinuz"))
	if !slices.Equal(kernel, want) {
		t.Error("the kernel taken from the package differs from fetch-kernel.sh's")
	}
	release, _ := os.ReadFile(filepath.Join(kdir, "VERSION"))
	if res.KernelRelease != strings.TrimSpace(string(release)) {
		t.Errorf("release %q; want %q", res.KernelRelease, release)
	}
	mustHaveModules(t, readInitramfs(t, res.Initramfs), res.KernelRelease, "virtio_net", "virtio_blk", "vfat")
}

// TestQEMUColdplug boots the boot environment in QEMU (TCG; no root, no
// network) with test/bootenvinit as /init: internal/kmod's coldplug must
// load virtio_pci, then virtio_net and virtio_blk for the devices it
// makes appear, by modalias, and the NIC and the disk must show up. Then
// mounting the FAT disk must work with no filesystem module loaded: the
// kernel runs /sbin/modprobe (a link to /init) for fs-vfat and the code
// page.
func TestQEMUColdplug(t *testing.T) {
	kdir := debianKernel(t)
	qemu := testtool.RequireBinary(t, "qemu-system-x86_64", "qemu-system-x86")
	work := t.TempDir()
	initBin := filepath.Join(work, "bootenvinit")
	build := exec.Command("go", "build", "-o", initBin, "./test/bootenvinit")
	build.Dir, build.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test/bootenvinit: %v\n%s", err, out)
	}
	res, err := Build(context.Background(), Config{OutDir: filepath.Join(work, "out"), Kernel: filepath.Join(kdir, "vmlinuz"),
		// LZ4 as DefaultCompression, at the fast level: the kernel reads
		// both alike, and the race detector makes level 9 slow.
		Modules: filepath.Join(kdir, "modules"), Anvil: initBin, Busybox: BusyboxNone, Compression: CompressLz4,
		Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// A FAT disk: mounting it makes the kernel ask /sbin/modprobe.
	mkfs := testtool.RequireBinary(t, "mkfs.vfat", "dosfstools")
	disk := filepath.Join(work, "disk.raw")
	must(os.WriteFile(disk, make([]byte, 8<<20), 0o644))
	if out, err := exec.Command(mkfs, disk).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.vfat: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, "-accel", "tcg", "-m", "512", "-nographic", "-no-reboot",
		"-kernel", res.Kernel, "-initrd", res.Initramfs, "-append", "console=ttyS0 quiet",
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=",
		"-drive", "if=virtio,format=raw,file="+disk)
	out, err := cmd.CombinedOutput()
	console := string(out)
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, console)
	}
	lines := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(console))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "BOOTENV "); ok {
			key, value, _ := strings.Cut(rest, " ")
			lines[key] += value
			t.Log(line)
		}
	}
	if _, ok := lines["done"]; !ok {
		t.Fatalf("bootenvinit did not finish:\n%s", console)
	}
	loaded := strings.Fields(lines["loaded"])
	for _, m := range []string{"virtio_pci", "virtio_net", "virtio_blk"} {
		if !slices.Contains(loaded, m) {
			t.Errorf("coldplug did not load %s; loaded %q", m, loaded)
		}
	}
	if i, j := slices.Index(loaded, "virtio_pci"), slices.Index(loaded, "virtio_net"); i > j {
		t.Errorf("virtio_net loaded before virtio_pci: %q", loaded)
	}
	if f, ok := lines["failed"]; ok {
		t.Errorf("modules failed to load: %s", f)
	}
	if net := strings.Fields(lines["net"]); len(net) != 1 {
		t.Errorf("network interfaces %q; want the one virtio NIC", net)
	}
	if !slices.Contains(strings.Fields(lines["block"]), "vda") {
		t.Errorf("disks %q; want vda", lines["block"])
	}
	if got := lines["mount"]; got != "vfat ok" {
		t.Errorf("mount of the FAT disk: %q; want ok (the kernel's request_module through /sbin/modprobe)", got)
	}
	for _, m := range []string{"fat", "vfat", "nls_cp437", "virtio_net", "virtio_blk"} {
		if !slices.Contains(strings.Fields(lines["modules"]), m) {
			t.Errorf("/proc/modules lacks %s: %s", m, lines["modules"])
		}
	}
}
