package bootenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvilproj/anvil/internal/kmod"
	"github.com/anvilproj/anvil/internal/version"
)

// Paths inside the boot environment.
const (
	initPath     = "init"
	busyboxPath  = "bin/busybox"
	shPath       = "bin/sh"
	modprobePath = "sbin/modprobe"
	infoPath     = "etc/anvil-bootenv"
)

// Busybox modes of Config.Busybox besides a file path.
const (
	BusyboxAuto = "auto"
	BusyboxNone = "none"
)

// AgentBinary is the file name of the boot environment's own binary
// (cmd/anvil-agent: the agent without the server, the store, the
// Kubernetes and BMC clients or the management CLI). When Config.Anvil is
// empty, Build looks for it next to the running executable, where `make
// build` puts it.
const AgentBinary = "anvil-agent"

// DefaultBusybox is where BusyboxAuto looks: Debian's busybox-static
// installs a static busybox there (its busybox package a dynamic one,
// which is skipped).
const DefaultBusybox = "/bin/busybox"

// Extra is a file or directory put into the boot environment as it is.
type Extra struct {
	// Src is the file or directory on this machine.
	Src string
	// Dst is its absolute path in the boot environment (e.g.
	// /lib/firmware/bnx2).
	Dst string
}

// Config configures Build.
type Config struct {
	// OutDir receives vmlinuz-ARCH, initramfs-ARCH and
	// manifest-ARCH.json; it is created if missing. Required.
	OutDir string
	// Arch is x86_64 or aarch64 (amd64, arm64 accepted). If empty, uses
	// x86_64.
	Arch string
	// Kernel is the kernel image. If empty, it comes from Modules: the
	// .deb's boot/vmlinuz-RELEASE, or ROOT/boot/vmlinuz-RELEASE of a root
	// directory.
	Kernel string
	// Modules is a module directory (/lib/modules/RELEASE), a root
	// directory containing one (lib/modules/RELEASE), or a Debian
	// linux-image .deb. Required.
	Modules string
	// Anvil is the binary that becomes /init: anvil-agent, or a whole
	// anvil. If empty, uses AgentBinary next to the running executable,
	// or the running executable itself when there is none (Result.InitNote
	// says which). It must be static and built for Arch.
	Anvil string
	// Busybox is a static busybox for a debug shell at /bin/busybox and
	// /bin/sh, BusyboxNone for none, or BusyboxAuto: DefaultBusybox if it
	// exists and is static. If empty, uses BusyboxAuto.
	Busybox string
	// Include adds modules to DefaultModules, Exclude removes modules
	// (and every module needing one); patterns as in DefaultModules.
	Include, Exclude []string
	// NoDefaultModules starts from no module instead of DefaultModules.
	NoDefaultModules bool
	// Extras are put into the boot environment as they are.
	Extras []Extra
	// Compression is "none", "gzip", "zstd", "xz" or "lz4", with an
	// optional level ("zstd-19"). If empty, uses DefaultCompression.
	Compression string
	// ModuleCompression is how each kernel module is stored:
	// ModuleCompressZstd (NAME.ko.zst, decompressed by the agent when it
	// loads one) or ModuleCompressNone. If empty, uses
	// DefaultModuleCompression.
	ModuleCompression string
	// TempDir holds a .deb's unpacked contents during the build. If
	// empty, uses os.TempDir().
	TempDir string
	// Force rebuilds even when the outputs are up to date.
	Force bool
	// Logger receives progress. If nil, uses slog.Default().
	Logger *slog.Logger
}

// Result says what Build did.
type Result struct {
	// UpToDate is true when the outputs matched their inputs and nothing
	// was written.
	UpToDate bool
	// Kernel and Initramfs are the output files.
	Kernel, Initramfs string
	// KernelSize and InitramfsSize are their sizes in bytes.
	KernelSize, InitramfsSize int64
	// ContentBytes is the initramfs's uncompressed file contents.
	ContentBytes int64
	// KernelRelease is the modules' kernel release (6.1.0-56-amd64).
	KernelRelease string
	// Modules is how many kernel modules are inside.
	Modules int
	// Dropped are modules the selection chose that need an excluded one.
	Dropped []string
	// Compression is the initramfs's compression.
	Compression string
	// Init is the binary that became /init, InitNote what it is and, when
	// it is a whole anvil by default, why.
	Init, InitNote string
	// Busybox is the busybox copied in ("" for none), BusyboxNote what it
	// is or why there is none.
	Busybox, BusyboxNote string
	// Elapsed is how long Build took.
	Elapsed time.Duration
}

// Summary is Result on one line, for the CLI and the server log.
func (r *Result) Summary() string {
	state := "built"
	if r.UpToDate {
		state = "up to date"
	}
	s := fmt.Sprintf("boot environment %s: %s (%s), %s (%s, %s, %d modules of %s)",
		state, r.Kernel, mib(r.KernelSize), r.Initramfs, mib(r.InitramfsSize), r.Compression, r.Modules, r.KernelRelease)
	if r.InitNote != "" {
		s += ", /init " + r.InitNote
	}
	if r.Busybox != "" {
		s += ", busybox " + r.BusyboxNote
	} else if r.BusyboxNote != "" {
		s += ", no busybox (" + r.BusyboxNote + ")"
	}
	if !r.UpToDate {
		s += fmt.Sprintf(", in %.1fs", r.Elapsed.Seconds())
	}
	return s
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Build makes the boot environment for one architecture: OUT/vmlinuz-ARCH
// (the kernel as it is) and OUT/initramfs-ARCH (a compressed newc cpio:
// anvil as /init, the chosen kernel modules with their index under
// /lib/modules/RELEASE, /dev/console, the usual empty directories,
// busybox and extras). When OUT/manifest-ARCH.json says the outputs were
// built from the same inputs and options and they are unchanged, it does
// nothing and reports UpToDate. Each output appears whole (written
// aside, then renamed), and concurrent Builds into one directory run one
// after the other.
func Build(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.OutDir == "" {
		return nil, errors.New("no output directory")
	}
	if cfg.Modules == "" {
		return nil, errors.New("no modules (a /lib/modules/RELEASE directory, a root containing one, or a linux-image .deb)")
	}
	arch, err := NormalizeArch(cfg.Arch)
	if err != nil {
		return nil, err
	}
	comp, err := parseCompression(cfg.Compression)
	if err != nil {
		return nil, err
	}
	src, err := findModules(cfg.Modules)
	if err != nil {
		return nil, err
	}
	kernel := cfg.Kernel
	if kernel == "" && src.deb == "" {
		// A root directory may carry its kernel; a module directory
		// alone cannot.
		if kernel = kernelInRoot(src.root, filepath.Base(src.dir)); kernel == "" {
			return nil, fmt.Errorf("no kernel: give --kernel (%s has no boot/vmlinuz-RELEASE)", cfg.Modules)
		}
	}
	anvil, initNote, whole, err := findInit(cfg.Anvil)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(anvil, arch, "/init binary"); err != nil {
		return nil, err
	}
	if whole {
		log.Warn("the boot environment's /init is the whole anvil binary, server and all", "init", initNote)
	}
	busybox, busyboxNote, err := findBusybox(cfg.Busybox, arch)
	if err != nil {
		return nil, err
	}
	for _, e := range cfg.Extras {
		if !strings.HasPrefix(e.Dst, "/") || clean(e.Dst) == "" {
			return nil, fmt.Errorf("extra %s: destination %q must be an absolute path below /", e.Src, e.Dst)
		}
	}

	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	unlock, err := lockDir(ctx, cfg.OutDir, arch)
	if err != nil {
		return nil, err
	}
	defer unlock()

	modComp := cfg.ModuleCompression
	switch modComp {
	case "":
		modComp = DefaultModuleCompression
	case ModuleCompressNone, ModuleCompressZstd:
	default:
		return nil, fmt.Errorf("module compression %q: want %s or %s", modComp, ModuleCompressZstd, ModuleCompressNone)
	}
	key := buildKey{Format: manifestFormat, Builder: version.Get().String(), Arch: arch, Compression: comp.String(),
		ModuleCompression: modComp,
		Include:           cfg.Include, Exclude: cfg.Exclude, NoDefaultModules: cfg.NoDefaultModules}
	if !cfg.NoDefaultModules {
		key.DefaultModules = DefaultModules
	}
	type input struct{ role, path string }
	inputs := []input{{"anvil", anvil}}
	if kernel != "" {
		inputs = append(inputs, input{"kernel", kernel})
	}
	if src.deb != "" {
		inputs = append(inputs, input{"modules", src.deb})
	} else {
		inputs = append(inputs, input{"modules", src.dir})
	}
	if busybox != "" {
		inputs = append(inputs, input{"busybox", busybox})
	}
	for _, e := range cfg.Extras {
		inputs = append(inputs, input{"extra " + e.Dst, e.Src})
	}
	for _, in := range inputs {
		f, err := statInput(in.role, in.path)
		if err != nil {
			return nil, err
		}
		key.Inputs = append(key.Inputs, f)
	}

	kernelOut := filepath.Join(cfg.OutDir, "vmlinuz-"+arch)
	initrdOut := filepath.Join(cfg.OutDir, "initramfs-"+arch)
	if m := readManifest(cfg.OutDir, arch); !cfg.Force && m.upToDate(cfg.OutDir, key) {
		return &Result{UpToDate: true, Kernel: kernelOut, Initramfs: initrdOut,
			KernelSize: m.Outputs[0].Size, InitramfsSize: m.Outputs[1].Size, ContentBytes: m.ContentBytes,
			KernelRelease: m.KernelRelease, Modules: m.Modules, Compression: comp.String(),
			Init: anvil, InitNote: initNote, Busybox: m.Busybox, BusyboxNote: m.BusyboxNote, Elapsed: time.Since(start)}, nil
	}

	// A package is unpacked first: its modules are read twice (modinfo,
	// then the archive) and tar cannot seek.
	if src.deb != "" {
		tmp, err := os.MkdirTemp(cfg.TempDir, "anvil-bootenv-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		log.Info("unpacking kernel package", "deb", src.deb)
		if err := extractDeb(ctx, src.deb, tmp); err != nil {
			return nil, err
		}
		unpacked, err := findModules(tmp)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src.deb, err)
		}
		src.dir = unpacked.dir
		if kernel == "" {
			if kernel = kernelInRoot(tmp, filepath.Base(src.dir)); kernel == "" {
				return nil, fmt.Errorf("%s has no boot/vmlinuz-%s: give --kernel", src.deb, filepath.Base(src.dir))
			}
		}
	}
	if err := checkKernel(kernel, arch); err != nil {
		return nil, err
	}

	tree, err := scanTree(ctx, src.dir, arch)
	if err != nil {
		return nil, err
	}
	sel, err := tree.choose(cfg.Include, cfg.Exclude, cfg.NoDefaultModules)
	if err != nil {
		return nil, err
	}
	if len(sel.dropped) > 0 {
		log.Warn("modules left out because they need an excluded module", "modules", strings.Join(sel.dropped, " "))
	}
	a, err := layout(ctx, tree, sel, anvil, busybox, cfg.Extras, modComp)
	if err != nil {
		return nil, err
	}

	res := &Result{Kernel: kernelOut, Initramfs: initrdOut, KernelRelease: tree.release, Modules: len(sel.mods),
		Dropped: sel.dropped, Compression: comp.String(), Init: anvil, InitNote: initNote,
		Busybox: busybox, BusyboxNote: busyboxNote,
		ContentBytes: a.contentSize()}
	m := &manifest{Key: key, KernelRelease: tree.release, Modules: len(sel.mods), Busybox: busybox,
		BusyboxNote: busyboxNote, ContentBytes: res.ContentBytes}
	// The kernel, then the initramfs, then the manifest: a crash in
	// between leaves a manifest that does not match, so the next Build
	// redoes it.
	kernelFile, err := writeOutput(cfg.OutDir, "vmlinuz-"+arch, func(w io.Writer) error {
		f, err := os.Open(kernel)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	initrdFile, err := writeOutput(cfg.OutDir, "initramfs-"+arch, func(w io.Writer) error {
		zw, err := comp.writer(w)
		if err != nil {
			return err
		}
		if err := a.write(zw); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return nil, err
	}
	m.Outputs = []outputFile{kernelFile, initrdFile}
	if err := writeManifest(cfg.OutDir, arch, m); err != nil {
		return nil, err
	}
	res.KernelSize, res.InitramfsSize = kernelFile.Size, initrdFile.Size
	res.Elapsed = time.Since(start)
	return res, nil
}

// writeOutput writes OUT/name atomically through fill and describes it.
func writeOutput(dir, name string, fill func(w io.Writer) error) (outputFile, error) {
	h := sha256.New()
	err := writeAtomic(dir, name, func(f *os.File) error {
		return fill(io.MultiWriter(f, h))
	})
	if err != nil {
		return outputFile{}, err
	}
	fi, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		return outputFile{}, err
	}
	return outputFile{Name: name, Size: fi.Size(), MTime: fi.ModTime().UnixNano(), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// layout lays out the initramfs.
func layout(ctx context.Context, tree *moduleTree, sel selection, anvil, busybox string, extras []Extra, modComp string) (*archive, error) {
	a := newArchive()
	for _, d := range []struct {
		name string
		perm uint64
	}{
		{"bin", 0o755}, {"dev", 0o755}, {"etc", 0o755}, {"lib", 0o755}, {"mnt", 0o755}, {"proc", 0o555},
		{"root", 0o700}, {"run", 0o755}, {"sbin", 0o755}, {"sys", 0o555}, {"tmp", 0o1777}, {"var", 0o755},
	} {
		if err := a.dir(d.name, d.perm); err != nil {
			return nil, err
		}
	}
	if err := a.charDev("dev/console", 0o600, consoleMajor, consoleMinor); err != nil {
		return nil, err
	}
	if err := a.file(initPath, anvil, 0o755); err != nil {
		return nil, fmt.Errorf("/init binary: %w", err)
	}
	// The kernel runs /sbin/modprobe for modules it wants by name (a
	// filesystem at mount, a crypto algorithm, a PHY driver): anvil
	// answers as modprobe when called by that name.
	if err := a.symlink(modprobePath, "/"+initPath); err != nil {
		return nil, err
	}
	if busybox != "" {
		if err := a.file(busyboxPath, busybox, 0o755); err != nil {
			return nil, fmt.Errorf("busybox: %w", err)
		}
		if err := a.symlink(shPath, "busybox"); err != nil {
			return nil, err
		}
	}

	modDir := filepath.ToSlash(filepath.Join("lib/modules", tree.release))
	stored, err := storeModules(ctx, tree, sel.mods, modComp)
	if err != nil {
		return nil, err
	}
	var order []byte
	plain := slices.Clone(sel.mods)
	for i, m := range stored {
		if err := a.bytes(modDir+"/"+m.path, m.data, 0o644); err != nil {
			return nil, err
		}
		order = append(order, m.path+"\n"...)
		plain[i].Path = m.path
	}
	idx, err := kmod.GenerateIndex(plain)
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{
		kmod.DepFile: idx.Dep, kmod.AliasFile: idx.Alias, kmod.SoftdepFile: idx.Softdep, kmod.OrderFile: order,
	} {
		if err := a.bytes(modDir+"/"+name, data, 0o644); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{kmod.BuiltinFile, kmod.BuiltinModinfoFile} {
		p := filepath.Join(tree.dir, name)
		if _, err := os.Stat(p); err == nil {
			if err := a.file(modDir+"/"+name, p, 0o644); err != nil {
				return nil, err
			}
		}
	}

	info := fmt.Sprintf("kernel_release=%s\nmodules=%d\nbuilder=%s\n", tree.release, len(sel.mods), version.Get())
	if err := a.bytes(infoPath, []byte(info), 0o644); err != nil {
		return nil, err
	}

	for _, e := range extras {
		fi, err := os.Stat(e.Src)
		if err != nil {
			return nil, fmt.Errorf("extra: %w", err)
		}
		if fi.IsDir() {
			err = a.tree(e.Dst, e.Src)
		} else {
			err = a.file(e.Dst, e.Src, uint64(fi.Mode().Perm()))
		}
		if err != nil {
			return nil, fmt.Errorf("extra %s: %w", e.Src, err)
		}
	}
	return a, nil
}

// findInit resolves Config.Anvil to the binary that becomes /init and a
// note saying what it is: the file given, else chooseInit's for the
// running executable.
func findInit(spec string) (path, note string, whole bool, err error) {
	if spec != "" {
		return spec, describeInit(spec, "given"), false, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", "", false, fmt.Errorf("/init binary: %w", err)
	}
	path, note, whole = chooseInit(exe)
	return path, note, whole, nil
}

// PackagedAgentDir is where the .deb installs AgentBinary, relative to
// the directory of anvil (/usr/bin/anvil, /usr/lib/anvil/anvil-agent):
// the agent is no command a user runs, so it stays out of PATH.
const PackagedAgentDir = "../lib/anvil"

// chooseInit is the /init binary when none is given, for the running
// executable exe, and a note saying why: AgentBinary in exe's directory
// (`make build`), else in PackagedAgentDir from it (the .deb), if it is a
// regular file; else exe itself (whole).
func chooseInit(exe string) (path, note string, whole bool) {
	dir := filepath.Dir(exe)
	for _, c := range []struct{ path, why string }{
		{filepath.Join(dir, AgentBinary), "next to " + filepath.Base(exe)},
		{filepath.Join(dir, PackagedAgentDir, AgentBinary), "where the package installs it"},
	} {
		if fi, err := os.Stat(c.path); err == nil && fi.Mode().IsRegular() {
			return c.path, describeInit(c.path, c.why), false
		}
	}
	return exe, describeInit(exe, fmt.Sprintf("the whole anvil: no %s next to it or in %s; `make build` builds both", AgentBinary, PackagedAgentDir)), true
}

// describeInit is Result.InitNote: the binary's path and size, and why it
// was chosen.
func describeInit(path, why string) string {
	size := ""
	if fi, err := os.Stat(path); err == nil {
		size = mib(fi.Size()) + ", "
	}
	return fmt.Sprintf("%s (%s%s)", path, size, why)
}

// findBusybox resolves Config.Busybox to a file ("" for none) and a note
// saying what it is or why there is none.
func findBusybox(spec, arch string) (path, note string, err error) {
	switch spec {
	case BusyboxNone:
		return "", "", nil
	case "", BusyboxAuto:
		if _, err := os.Stat(DefaultBusybox); err != nil {
			return "", DefaultBusybox + " not found; Debian's busybox-static package has it", nil
		}
		if err := checkStatic(DefaultBusybox, arch, "busybox"); err != nil {
			return "", DefaultBusybox + " is not a static " + arch + " binary; Debian's busybox-static package has one", nil
		}
		return DefaultBusybox, DefaultBusybox + debianPackageNote(DefaultBusybox), nil
	}
	if err := checkStatic(spec, arch, "busybox"); err != nil {
		return "", "", err
	}
	return spec, spec + debianPackageNote(spec), nil
}

// debianPackageNote names the Debian package that installed file, as
// " (Debian busybox-static 1:1.35.0-4+deb12u1+b1)", or "".
func debianPackageNote(file string) string {
	for _, pkg := range []string{"busybox-static", "busybox"} {
		list, err := os.ReadFile(filepath.Join("/var/lib/dpkg/info", pkg+".list"))
		if err != nil || !slices.Contains(strings.Split(string(list), "\n"), file) {
			continue
		}
		return " (Debian " + pkg + packageVersion(pkg) + ")"
	}
	return ""
}

// packageVersion returns " VERSION" of an installed Debian package from
// dpkg's status file, or "".
func packageVersion(pkg string) string {
	status, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		return ""
	}
	for _, para := range strings.Split(string(status), "\n\n") {
		if !strings.HasPrefix(para, "Package: "+pkg+"\n") {
			continue
		}
		for _, line := range strings.Split(para, "\n") {
			if v, ok := strings.CutPrefix(line, "Version: "); ok {
				return " " + v
			}
		}
	}
	return ""
}

// lockDir takes an exclusive lock on OUT/.bootenv-ARCH.lock, waiting for
// another Build into the same directory, and returns its release.
func lockDir(ctx context.Context, dir, arch string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".bootenv-"+arch+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock output directory: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock output directory: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
