package bootenv

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
)

// Architectures, by the names Config.Arch accepts, and their ELF machines.
const (
	ArchX86_64  = "x86_64"
	ArchAarch64 = "aarch64"
)

var archMachines = map[string]elf.Machine{
	ArchX86_64:  elf.EM_X86_64,
	ArchAarch64: elf.EM_AARCH64,
}

// NormalizeArch returns the boot environment architecture name for arch:
// "x86_64" (also "amd64", "x86-64") or "aarch64" (also "arm64"); "" is
// x86_64. Other names are an error.
func NormalizeArch(arch string) (string, error) {
	switch arch {
	case "", ArchX86_64, "amd64", "x86-64":
		return ArchX86_64, nil
	case ArchAarch64, "arm64":
		return ArchAarch64, nil
	}
	return "", fmt.Errorf("architecture %q: want x86_64 or aarch64 (or amd64, arm64)", arch)
}

// checkStatic checks that the file at path is a statically linked ELF
// executable for arch: /init (and busybox) run before any shared library
// could be found. what names the flag for the error.
func checkStatic(path, arch, what string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s %s: not an ELF executable: %w", what, path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s %s: ELF type %v is not an executable", what, path, f.Type)
	}
	if want := archMachines[arch]; f.Machine != want {
		return fmt.Errorf("%s %s: built for %v, the boot environment is %s (%v)", what, path, f.Machine, arch, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(io.LimitReader(p.Open(), 256))
			return fmt.Errorf("%s %s: dynamically linked (needs %s), but the boot environment has no shared libraries: build it static (CGO_ENABLED=0)",
				what, path, bytes.TrimRight(interp, "\x00"))
		}
	}
	return nil
}

// Kernel image magics: x86's boot protocol header "HdrS" at 0x202, arm64
// Image's "ARM\x64" at 0x38, a PE/COFF (EFI stub or zboot) "MZ" at 0, and
// gzip for Debian's compressed arm64 image.
const (
	x86HdrSOffset   = 0x202
	x86HdrSMagic    = "HdrS"
	arm64MagicOff   = 0x38
	arm64Magic      = "ARM\x64"
	peMagic         = "MZ"
	gzipMagic       = "\x1f\x8b"
	kernelProbeSize = 0x240
)

// checkKernel checks that the file at path looks like a kernel image for
// arch, so that a swapped --kernel and --modules or a config file fails
// here and not as a machine that does not boot.
func checkKernel(path, arch string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("kernel: %w", err)
	}
	defer f.Close()
	head := make([]byte, kernelProbeSize)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("kernel %s: %w", path, err)
	}
	head = head[:n]
	at := func(off int, magic string) bool {
		return len(head) >= off+len(magic) && string(head[off:off+len(magic)]) == magic
	}
	switch arch {
	case ArchX86_64:
		if at(x86HdrSOffset, x86HdrSMagic) {
			return nil
		}
		return fmt.Errorf("kernel %s: not an x86 bzImage (no %q at 0x%x)", path, x86HdrSMagic, x86HdrSOffset)
	case ArchAarch64:
		if at(arm64MagicOff, arm64Magic) || at(0, peMagic) || at(0, gzipMagic) {
			return nil
		}
		return fmt.Errorf("kernel %s: not an arm64 kernel image (Image, EFI or gzip)", path)
	}
	return fmt.Errorf("kernel %s: unknown architecture %s", path, arch)
}
