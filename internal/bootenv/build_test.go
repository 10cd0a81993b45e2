package bootenv

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/u-root/u-root/pkg/cpio"

	"github.com/anvilproj/anvil/internal/kmod"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// baseConfig builds the fixture with only the patterns asked for.
func (f *fixture) config(out string) Config {
	return Config{OutDir: out, Kernel: f.kernel, Modules: f.root, Anvil: f.anvil, Busybox: BusyboxNone,
		Compression: "zstd", ModuleCompression: ModuleCompressNone, Logger: quietLogger()}
}

func TestBuildContents(t *testing.T) {
	f := newFixture(t)
	out := t.TempDir()
	res, err := Build(context.Background(), f.config(out))
	if err != nil {
		t.Fatal(err)
	}
	if res.UpToDate {
		t.Error("first build reported up to date")
	}
	recs := readInitramfs(t, res.Initramfs)
	mod := "lib/modules/" + fixtureRelease + "/"

	// The default selection: the NIC and disk drivers with what they
	// need, the filesystems with their soft dependency met by alias, the
	// compressed NIC driver stored plain; no GPU or sound driver.
	want := []string{
		"kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_pci.ko",
		"kernel/net/core/failover.ko", "kernel/drivers/net/net_failover.ko", "kernel/drivers/net/virtio_net.ko",
		"kernel/drivers/block/virtio_blk.ko", "kernel/drivers/net/ethernet/intel/e1000/e1000.ko",
		"kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko", "kernel/drivers/net/ethernet/mellanox/mlxfw/mlxfw.ko",
		"kernel/fs/fat/fat.ko", "kernel/fs/fat/vfat.ko", "kernel/fs/ext4/ext4.ko", "kernel/lib/crc16.ko",
		"kernel/crypto/crc32c_generic.ko", "kernel/arch/x86/crypto/crc32c-intel.ko",
	}
	var got []string
	for name := range recs {
		if strings.HasSuffix(name, ".ko") {
			got = append(got, strings.TrimPrefix(name, mod))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("modules in the initramfs:\n%q\nwant\n%q", got, want)
	}
	if res.Modules != len(want) {
		t.Errorf("Result.Modules = %d; want %d", res.Modules, len(want))
	}
	// Stored plain: an ELF object, not xz.
	if mi, _, err := kmod.ReadModinfo(bytes.NewReader(recs[mod+"kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko"].data)); err != nil || mi.Name != "mlx5_core" {
		t.Errorf("mlx5_core.ko in the initramfs: modinfo %+v, %v; want the decompressed module", mi, err)
	}

	// The index inside works with kmod as the agent uses it.
	fsys := fstest.MapFS{}
	for _, name := range []string{kmod.DepFile, kmod.AliasFile, kmod.SoftdepFile, kmod.BuiltinFile, kmod.BuiltinModinfoFile, kmod.OrderFile} {
		r, ok := recs[mod+name]
		if !ok {
			t.Fatalf("%s missing", mod+name)
		}
		fsys[name] = &fstest.MapFile{Data: r.data}
	}
	idx, err := kmod.ReadIndex(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if order, err := idx.LoadOrder("virtio_net"); err != nil || len(order) != 5 || order[4] != "virtio_net" {
		t.Errorf("LoadOrder(virtio_net) in the initramfs = %q, %v", order, err)
	}
	if mods, _ := idx.Lookup("virtio:d00000002v00001AF4"); !reflect.DeepEqual(mods, []string{"virtio_blk"}) {
		t.Errorf("Lookup(virtio blk) = %q; want [virtio_blk]", mods)
	}
	if !idx.IsBuiltin("8250") || idx.Has("drm") {
		t.Error("modules.builtin missing, or drm indexed")
	}

	// The fixed parts.
	checks := []struct {
		name string
		mode uint64
	}{
		{"init", cpio.S_IFREG | 0o755},
		{"dev", cpio.S_IFDIR | 0o755},
		{"dev/console", cpio.S_IFCHR | 0o600},
		{"proc", cpio.S_IFDIR | 0o555},
		{"sys", cpio.S_IFDIR | 0o555},
		{"tmp", cpio.S_IFDIR | 0o1777},
		{"run", cpio.S_IFDIR | 0o755},
		{"mnt", cpio.S_IFDIR | 0o755},
		{"etc", cpio.S_IFDIR | 0o755},
		{"sbin/modprobe", cpio.S_IFLNK | 0o777},
		{"etc/anvil-bootenv", cpio.S_IFREG | 0o644},
	}
	for _, c := range checks {
		r, ok := recs[c.name]
		if !ok {
			t.Errorf("/%s missing", c.name)
			continue
		}
		if r.Mode != c.mode {
			t.Errorf("/%s mode %o; want %o", c.name, r.Mode, c.mode)
		}
		if r.MTime != 0 || r.UID != 0 || r.GID != 0 {
			t.Errorf("/%s: mtime %d uid %d gid %d; want 0", c.name, r.MTime, r.UID, r.GID)
		}
	}
	if c := recs["dev/console"]; c.Rmajor != consoleMajor || c.Rminor != consoleMinor {
		t.Errorf("/dev/console is %d,%d; want %d,%d", c.Rmajor, c.Rminor, consoleMajor, consoleMinor)
	}
	anvil, _ := os.ReadFile(f.anvil)
	if !bytes.Equal(recs["init"].data, anvil) {
		t.Error("/init is not the anvil binary")
	}
	if got := string(recs["sbin/modprobe"].data); got != "/init" {
		t.Errorf("/sbin/modprobe -> %q; want /init", got)
	}
	if _, ok := recs["bin/busybox"]; ok {
		t.Error("busybox inside with Busybox none")
	}
	if info := string(recs["etc/anvil-bootenv"].data); !strings.Contains(info, "kernel_release="+fixtureRelease) {
		t.Errorf("/etc/anvil-bootenv = %q", info)
	}

	// GNU cpio reads the archive and lists the same names.
	raw, _ := os.ReadFile(res.Initramfs)
	var names []string
	for n := range recs {
		names = append(names, n)
	}
	slices.Sort(names)
	if listed := cpioList(t, decompressAny(t, raw)); !reflect.DeepEqual(listed, names) {
		t.Errorf("cpio -it lists %d names, u-root's reader %d", len(listed), len(names))
	}
	kernel, _ := os.ReadFile(res.Kernel)
	want0, _ := os.ReadFile(f.kernel)
	if !bytes.Equal(kernel, want0) {
		t.Error("vmlinuz-x86_64 is not the kernel")
	}
}

func TestBuildSelectionFlags(t *testing.T) {
	tests := []struct {
		name        string
		include     []string
		exclude     []string
		noDefaults  bool
		wantIn      []string
		wantOut     []string
		wantDropped []string
	}{
		{name: "include by name", include: []string{"drm"}, wantIn: []string{"drm", "virtio_net"}},
		{name: "include by path", include: []string{"sound/*"}, wantIn: []string{"snd", "e1000"}},
		{name: "exclude a leaf", exclude: []string{"e1000"}, wantIn: []string{"virtio_net"}, wantOut: []string{"e1000"}},
		{name: "exclude a dependency drops what needs it", exclude: []string{"mlxfw"},
			wantIn: []string{"e1000"}, wantOut: []string{"mlxfw", "mlx5_core"}, wantDropped: []string{"mlx5_core"}},
		{name: "exclude by path", exclude: []string{"drivers/net/ethernet/*"}, wantIn: []string{"virtio_net"},
			wantOut: []string{"e1000", "mlx5_core", "mlxfw"}},
		{name: "exclude one soft dependency alternative", exclude: []string{"crc32c-intel"},
			wantIn: []string{"ext4", "crc32c_generic"}, wantOut: []string{"crc32c_intel"}},
		{name: "no defaults", noDefaults: true, include: []string{"vfat"}, wantIn: []string{"vfat", "fat"},
			wantOut: []string{"virtio_net", "e1000", "ext4"}},
	}
	f := newFixture(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := f.config(t.TempDir())
			cfg.Include, cfg.Exclude, cfg.NoDefaultModules = tc.include, tc.exclude, tc.noDefaults
			res, err := Build(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for name := range readInitramfs(t, res.Initramfs) {
				if strings.HasSuffix(name, ".ko") {
					have[kmod.ModuleName(name)] = true
				}
			}
			for _, m := range tc.wantIn {
				if !have[m] {
					t.Errorf("%s missing", m)
				}
			}
			for _, m := range tc.wantOut {
				if have[m] {
					t.Errorf("%s inside; want it left out", m)
				}
			}
			if !reflect.DeepEqual(res.Dropped, tc.wantDropped) {
				t.Errorf("Dropped = %q; want %q", res.Dropped, tc.wantDropped)
			}
		})
	}
}

func TestBuildUpToDate(t *testing.T) {
	f := newFixture(t)
	out := t.TempDir()
	cfg := f.config(out)
	build := func(step string) *Result {
		t.Helper()
		res, err := Build(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return res
	}
	first := build("first build")
	initrd, _ := os.ReadFile(first.Initramfs)
	second := build("same inputs")
	if !second.UpToDate {
		t.Fatal("second build with the same inputs was not up to date")
	}
	if second.Modules != first.Modules || second.InitramfsSize != first.InitramfsSize || second.KernelRelease != fixtureRelease {
		t.Errorf("up-to-date result %+v does not describe the build %+v", second, first)
	}
	if again, _ := os.ReadFile(first.Initramfs); !bytes.Equal(again, initrd) {
		t.Error("an up-to-date build rewrote the initramfs")
	}
	if !strings.Contains(second.Summary(), "up to date") || !strings.Contains(first.Summary(), "built") {
		t.Errorf("summaries %q / %q", first.Summary(), second.Summary())
	}
	for _, res := range []*Result{first, second} {
		if want := "/init " + f.anvil + " ("; res.Init != f.anvil || !strings.Contains(res.Summary(), want) {
			t.Errorf("Result.Init = %q, summary %q; want %s and %q in the summary", res.Init, res.Summary(), f.anvil, want)
		}
	}

	later := time.Now().Add(time.Minute)
	changes := []struct {
		name   string
		change func()
	}{
		{"anvil binary rebuilt", func() { must(os.Chtimes(f.anvil, later, later)) }},
		// The same bytes and times under another name: the /init
		// binary is keyed by its path too, so switching from a whole
		// anvil to anvil-agent rebuilds even when they look alike.
		{"another /init binary", func() {
			agent := filepath.Join(filepath.Dir(f.anvil), AgentBinary)
			data, err := os.ReadFile(f.anvil)
			must(err)
			must(os.WriteFile(agent, data, 0o755))
			must(os.Chtimes(agent, later, later))
			cfg.Anvil = agent
		}},
		{"a module changed", func() {
			p := filepath.Join(f.modDir, "kernel/fs/fat/vfat.ko")
			must(os.Chtimes(p, later, later))
		}},
		{"a module added", func() {
			m := fakeModule{path: "kernel/drivers/net/ethernet/realtek/r8169.ko"}
			p := filepath.Join(f.modDir, m.path)
			must(os.MkdirAll(filepath.Dir(p), 0o755))
			must(os.WriteFile(p, elfFile(elf.ET_REL, elf.EM_X86_64, m.modinfo(), ""), 0o644))
		}},
		{"kernel replaced", func() { must(os.Chtimes(f.kernel, later.Add(time.Minute), later.Add(time.Minute))) }},
		{"compression changed", func() { cfg.Compression = "gzip" }},
		{"selection changed", func() { cfg.Exclude = []string{"e1000"} }},
		{"an output removed", func() { must(os.Remove(filepath.Join(out, "initramfs-x86_64"))) }},
		{"an output replaced", func() { must(os.WriteFile(filepath.Join(out, "vmlinuz-x86_64"), []byte("x"), 0o644)) }},
	}
	for _, c := range changes {
		c.change()
		if res := build(c.name); res.UpToDate {
			t.Errorf("%s: the build said up to date", c.name)
		}
		if res := build(c.name + ", again"); !res.UpToDate {
			t.Errorf("%s: the build after the rebuild was not up to date", c.name)
		}
	}
	if names := dirNames(t, out); !reflect.DeepEqual(names, []string{".bootenv-x86_64.lock", "initramfs-x86_64", "manifest-x86_64.json", "vmlinuz-x86_64"}) {
		t.Errorf("output directory holds %q: temporary files left behind?", names)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestBuildCompressions builds with every compression: each decompresses
// (with Go's readers, by magic) to the same archive, and the same inputs
// give the same bytes.
func TestBuildCompressions(t *testing.T) {
	f := newFixture(t)
	var archives [][]byte
	for _, c := range []string{"none", "gzip", "gzip-9", "zstd", "zstd-19", "xz", "lz4", "lz4-9"} {
		t.Run(c, func(t *testing.T) {
			cfg := f.config(t.TempDir())
			cfg.Compression = c
			res, err := Build(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Compression != c {
				t.Errorf("Result.Compression = %q; want %q", res.Compression, c)
			}
			raw, err := os.ReadFile(res.Initramfs)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Force = true
			if _, err := Build(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			if again, _ := os.ReadFile(res.Initramfs); !bytes.Equal(again, raw) {
				t.Errorf("%s: two builds from the same inputs differ", c)
			}
			archives = append(archives, decompressAny(t, raw))
		})
	}
	for i := 1; i < len(archives); i++ {
		if !bytes.Equal(archives[i], archives[0]) {
			t.Errorf("compression %d decompresses to a different archive than none", i)
		}
	}
}

func TestBuildBusybox(t *testing.T) {
	f := newFixture(t)
	bb := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(bb, elfFile(elf.ET_EXEC, elf.EM_X86_64, nil, ""), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(t.TempDir())
	cfg.Busybox = bb
	res, err := Build(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	recs := readInitramfs(t, res.Initramfs)
	if r, ok := recs["bin/busybox"]; !ok || r.Mode != cpio.S_IFREG|0o755 {
		t.Errorf("/bin/busybox: %+v", r.Info)
	}
	if string(recs["bin/sh"].data) != "busybox" {
		t.Errorf("/bin/sh -> %q; want busybox", recs["bin/sh"].data)
	}
	if res.Busybox != bb || !strings.Contains(res.Summary(), "busybox "+bb) {
		t.Errorf("Result.Busybox %q, summary %q", res.Busybox, res.Summary())
	}
}

func TestBuildExtras(t *testing.T) {
	f := newFixture(t)
	src := t.TempDir()
	must(os.MkdirAll(filepath.Join(src, "bnx2"), 0o755))
	must(os.WriteFile(filepath.Join(src, "bnx2", "bnx2-mips-09-6.2.1b.fw"), []byte("firmware"), 0o644))
	must(os.Symlink("bnx2-mips-09-6.2.1b.fw", filepath.Join(src, "bnx2", "current.fw")))
	one := filepath.Join(t.TempDir(), "motd")
	must(os.WriteFile(one, []byte("hello\n"), 0o600))
	cfg := f.config(t.TempDir())
	cfg.Extras = []Extra{{Src: src, Dst: "/lib/firmware"}, {Src: one, Dst: "/etc/motd"}}
	res, err := Build(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	recs := readInitramfs(t, res.Initramfs)
	if string(recs["lib/firmware/bnx2/bnx2-mips-09-6.2.1b.fw"].data) != "firmware" {
		t.Error("firmware file missing")
	}
	if string(recs["lib/firmware/bnx2/current.fw"].data) != "bnx2-mips-09-6.2.1b.fw" {
		t.Error("symbolic link missing")
	}
	if r := recs["etc/motd"]; string(r.data) != "hello\n" || r.Mode != cpio.S_IFREG|0o600 {
		t.Errorf("/etc/motd: %q mode %o", r.data, r.Mode)
	}

	cfg.Extras = []Extra{{Src: one, Dst: "/init"}}
	if _, err := Build(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("an extra over /init: %v; want an error saying it is there twice", err)
	}
}

func TestBuildErrors(t *testing.T) {
	f := newFixture(t)
	dynamic := filepath.Join(t.TempDir(), "dynamic")
	must(os.WriteFile(dynamic, elfFile(elf.ET_DYN, elf.EM_X86_64, nil, "/lib64/ld-linux-x86-64.so.2"), 0o755))
	arm := filepath.Join(t.TempDir(), "arm")
	must(os.WriteFile(arm, elfFile(elf.ET_EXEC, elf.EM_AARCH64, nil, ""), 0o755))
	text := filepath.Join(t.TempDir(), "text")
	must(os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755))
	empty := t.TempDir()
	armKernel := filepath.Join(t.TempDir(), "Image")
	image := make([]byte, 4096)
	copy(image[arm64MagicOff:], arm64Magic)
	must(os.WriteFile(armKernel, image, 0o644))

	tests := []struct {
		name    string
		change  func(c *Config)
		wantErr string
	}{
		{"no output directory", func(c *Config) { c.OutDir = "" }, "no output directory"},
		{"no modules", func(c *Config) { c.Modules = "" }, "no modules"},
		{"bad arch", func(c *Config) { c.Arch = "riscv64" }, "want x86_64 or aarch64"},
		{"bad compression", func(c *Config) { c.Compression = "bzip2" }, "want none, gzip, zstd, xz or lz4"},
		{"bad level", func(c *Config) { c.Compression = "gzip-12" }, "levels go up to 9"},
		{"dynamic anvil", func(c *Config) { c.Anvil = dynamic }, "dynamically linked (needs /lib64/ld-linux-x86-64.so.2)"},
		{"anvil for another arch", func(c *Config) { c.Anvil = arm }, "built for EM_AARCH64"},
		{"anvil not ELF", func(c *Config) { c.Anvil = text }, "not an ELF executable"},
		{"arm64 kernel not a kernel", func(c *Config) { c.Arch, c.Anvil, c.Kernel = "arm64", arm, text }, "not an arm64 kernel image"},
		{"modules for another arch", func(c *Config) { c.Arch, c.Anvil, c.Kernel = "arm64", arm, armKernel }, "is built for EM_X86_64, the boot environment is aarch64"},
		{"kernel not a kernel", func(c *Config) { c.Kernel = text }, "not an x86 bzImage"},
		{"no kernel", func(c *Config) { c.Kernel = ""; c.Modules = f.modDir }, "no kernel: give --kernel"},
		{"modules missing", func(c *Config) { c.Modules = filepath.Join(empty, "nope") }, "no such file"},
		{"modules dir without modules", func(c *Config) { c.Modules = empty }, "no module directory in it"},
		{"modules a text file", func(c *Config) { c.Modules = text }, "not a Debian package"},
		{"include matching nothing", func(c *Config) { c.Include = []string{"nvidia*"} }, `--modules-include "nvidia*" matches no module`},
		{"exclude matching nothing", func(c *Config) { c.Exclude = []string{"drivers/nope/*"} }, `--modules-exclude "drivers/nope/*" matches no module`},
		{"relative extra", func(c *Config) { c.Extras = []Extra{{Src: text, Dst: "etc/x"}} }, "must be an absolute path"},
		{"busybox dynamic", func(c *Config) { c.Busybox = dynamic }, "busybox"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			cfg := f.config(out)
			tc.change(&cfg)
			_, err := Build(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Build error %v; want one containing %q", err, tc.wantErr)
			}
			if cfg.OutDir != "" {
				for _, n := range dirNames(t, out) {
					if !strings.HasPrefix(n, ".bootenv-") || !strings.HasSuffix(n, ".lock") {
						t.Errorf("a failed build left %s in the output directory", n)
					}
				}
			}
		})
	}
}

func TestBuildModulesForms(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name    string
		modules string
		kernel  string
	}{
		{"root directory", f.root, f.kernel},
		{"module directory", f.modDir, f.kernel},
		{"root directory with its kernel", f.root, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := f.config(t.TempDir())
			cfg.Modules, cfg.Kernel = tc.modules, tc.kernel
			res, err := Build(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.KernelRelease != fixtureRelease || res.Modules == 0 {
				t.Errorf("release %q, %d modules", res.KernelRelease, res.Modules)
			}
		})
	}
	t.Run("two kernels in a root", func(t *testing.T) {
		must(os.MkdirAll(filepath.Join(f.root, "lib", "modules", "6.1.0-other", "kernel"), 0o755))
		defer os.RemoveAll(filepath.Join(f.root, "lib", "modules", "6.1.0-other"))
		_, err := Build(context.Background(), f.config(t.TempDir()))
		if err == nil || !strings.Contains(err.Error(), "several kernels (6.1.0-other, "+fixtureRelease+")") {
			t.Errorf("Build error %v; want one naming both kernels", err)
		}
	})
}

func TestNormalizeArch(t *testing.T) {
	for in, want := range map[string]string{"": "x86_64", "x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"} {
		if got, err := NormalizeArch(in); err != nil || got != want {
			t.Errorf("NormalizeArch(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestBuildModuleCompression: by default each module is stored as
// NAME.ko.zst, which decompresses to the module, and the index inside
// names those files, so kmod loads them.
func TestBuildModuleCompression(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t.TempDir())
	cfg.ModuleCompression = ""
	res, err := Build(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	recs := readInitramfs(t, res.Initramfs)
	mod := "lib/modules/" + fixtureRelease + "/"
	rec, ok := recs[mod+"kernel/drivers/net/virtio_net.ko.zst"]
	if !ok {
		t.Fatalf("no virtio_net.ko.zst in the initramfs")
	}
	if _, ok := recs[mod+"kernel/drivers/net/virtio_net.ko"]; ok {
		t.Errorf("virtio_net.ko stored plain as well")
	}
	d, err := kmod.Decompress("virtio_net.ko.zst", bytes.NewReader(rec.data))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(d)
	if err != nil {
		t.Fatal(err)
	}
	if mi, _, err := kmod.ReadModinfo(bytes.NewReader(plain)); err != nil || mi.Name != "virtio_net" {
		t.Errorf("virtio_net.ko.zst decompresses to modinfo %+v, %v; want the module", mi, err)
	}
	fsys := fstest.MapFS{}
	for name, r := range recs {
		if rest, ok := strings.CutPrefix(name, mod); ok {
			fsys[rest] = &fstest.MapFile{Data: r.data}
		}
	}
	idx, err := kmod.ReadIndex(fsys)
	if err != nil {
		t.Fatal(err)
	}
	order, err := idx.LoadOrder("virtio_net")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range order {
		if p := idx.Path(m); !strings.HasSuffix(p, ".ko.zst") {
			t.Errorf("index path of %s = %q; want the stored .ko.zst", m, p)
		}
	}
}

// TestChooseInit: without Config.Anvil, /init is anvil-agent when it lies
// next to the running executable (make build), else in ../lib/anvil from
// it (the .deb's /usr/bin/anvil and /usr/lib/anvil/anvil-agent), else the
// executable itself, and the note says which and why.
func TestChooseInit(t *testing.T) {
	tests := []struct {
		name string
		// agent puts (or not) something under root, where anvil is
		// root/bin/anvil, and returns the path chooseInit should pick
		// ("" for anvil itself).
		agent    func(root string) string
		wantNote string
	}{
		{"agent next to anvil", func(root string) string {
			p := filepath.Join(root, "bin", AgentBinary)
			must(os.WriteFile(p, []byte("agent"), 0o755))
			return p
		}, "next to anvil"},
		{"agent where the package puts it", func(root string) string {
			p := filepath.Join(root, "bin", PackagedAgentDir, AgentBinary)
			must(os.MkdirAll(filepath.Dir(p), 0o755))
			must(os.WriteFile(p, []byte("agent"), 0o755))
			return p
		}, "where the package installs it"},
		{"both: the one next to anvil wins", func(root string) string {
			p := filepath.Join(root, "lib", "anvil", AgentBinary)
			must(os.MkdirAll(filepath.Dir(p), 0o755))
			must(os.WriteFile(p, []byte("agent"), 0o755))
			p = filepath.Join(root, "bin", AgentBinary)
			must(os.WriteFile(p, []byte("agent"), 0o755))
			return p
		}, "next to anvil"},
		{"no agent", func(string) string { return "" }, "the whole anvil: no anvil-agent next to it or in ../lib/anvil; `make build` builds both"},
		{"a directory named like the agent", func(root string) string {
			must(os.Mkdir(filepath.Join(root, "bin", AgentBinary), 0o755))
			must(os.MkdirAll(filepath.Join(root, "lib", "anvil", AgentBinary), 0o755))
			return ""
		}, "the whole anvil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			must(os.Mkdir(filepath.Join(root, "bin"), 0o755))
			exe := filepath.Join(root, "bin", "anvil")
			must(os.WriteFile(exe, []byte("anvil"), 0o755))
			want := tc.agent(root)
			wantAgent := want != ""
			if !wantAgent {
				want = exe
			}
			got, note, whole := chooseInit(exe)
			if got != want || whole == wantAgent {
				t.Errorf("chooseInit(%s) = %s, whole %v; want %s, whole %v", exe, got, whole, want, !wantAgent)
			}
			if !strings.HasPrefix(note, want+" (0.0 MiB, ") || !strings.Contains(note, tc.wantNote) {
				t.Errorf("chooseInit(%s) note = %q; want %s, its size and %q", exe, note, want, tc.wantNote)
			}
		})
	}
}
