package bootenv

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/u-root/u-root/pkg/cpio"
	"github.com/ulikunitz/xz"

	"github.com/anvilproj/anvil/internal/testtool"
)

// elfFile returns a minimal ELF64 little-endian object of type typ for
// machine, with a .modinfo section holding modinfo when it is not nil, and
// a PT_INTERP program header naming interp when it is not empty. debug/elf
// reads it as the kernel's modules and executables are read.
func elfFile(typ elf.Type, machine elf.Machine, modinfo []byte, interp string) []byte {
	const (
		ehsize    = 64
		phentsize = 56
		shentsize = 64
	)
	shstrtab := []byte("\x00.modinfo\x00.shstrtab\x00")
	var phnum uint16
	if interp != "" {
		phnum = 1
	}
	// Layout: header, program headers, interp, modinfo, shstrtab, section headers.
	interpOff := uint64(ehsize + int(phnum)*phentsize)
	modinfoOff := interpOff + uint64(len(interp)+1)
	shstrOff := modinfoOff + uint64(len(modinfo))
	shOff := shstrOff + uint64(len(shstrtab))
	shOff = (shOff + 7) &^ 7

	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(typ), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Ehsize: ehsize, Phentsize: phentsize, Phnum: phnum, Shentsize: shentsize, Shnum: 3, Shstrndx: 2,
		Shoff: shOff,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	if phnum > 0 {
		hdr.Phoff = ehsize
	}
	must(binary.Write(&b, binary.LittleEndian, hdr))
	if phnum > 0 {
		must(binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R),
			Off: interpOff, Filesz: uint64(len(interp) + 1), Memsz: uint64(len(interp) + 1), Align: 1}))
		b.WriteString(interp + "\x00")
	} else {
		b.WriteByte(0)
	}
	b.Write(modinfo)
	b.Write(shstrtab)
	for uint64(b.Len()) < shOff {
		b.WriteByte(0)
	}
	sections := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_PROGBITS), Off: modinfoOff, Size: uint64(len(modinfo)), Addralign: 1},
		{Name: 10, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstrtab)), Addralign: 1},
	}
	for _, s := range sections {
		must(binary.Write(&b, binary.LittleEndian, s))
	}
	return b.Bytes()
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// fakeModule is a module of a fixture tree.
type fakeModule struct {
	path    string // below the module directory
	depends []string
	aliases []string
	softdep string
}

func (m fakeModule) modinfo() []byte {
	name := strings.ReplaceAll(filepath.Base(m.path), "-", "_")
	name = name[:strings.Index(name, ".ko")]
	var b bytes.Buffer
	for _, a := range m.aliases {
		b.WriteString("alias=" + a + "\x00")
	}
	b.WriteString("depends=" + strings.Join(m.depends, ",") + "\x00")
	if m.softdep != "" {
		b.WriteString("softdep=" + m.softdep + "\x00")
	}
	b.WriteString("name=" + name + "\x00vermagic=6.1.0-test SMP mod_unload \x00")
	return b.Bytes()
}

// fixture is a kernel, a module tree and a static "anvil" on disk.
type fixture struct {
	root, modDir, kernel, anvil string
	release                     string
}

const fixtureRelease = "6.1.0-test-amd64"

// fixtureModules is a small tree in the shape of Debian's: a NIC driver
// with dependencies, a disk driver, a filesystem with a soft dependency
// met by alias, a compressed module, and modules nothing selects.
var fixtureModules = []fakeModule{
	{path: "kernel/drivers/virtio/virtio_ring.ko"},
	{path: "kernel/drivers/virtio/virtio.ko", depends: []string{"virtio_ring"}},
	{path: "kernel/drivers/virtio/virtio_pci.ko", depends: []string{"virtio", "virtio_ring"}, aliases: []string{"pci:v00001AF4d*sv*sd*bc*sc*i*"}},
	{path: "kernel/net/core/failover.ko"},
	{path: "kernel/drivers/net/net_failover.ko", depends: []string{"failover"}},
	{path: "kernel/drivers/net/virtio_net.ko", depends: []string{"net_failover", "virtio", "virtio_ring"}, aliases: []string{"virtio:d00000001v*"}},
	{path: "kernel/drivers/block/virtio_blk.ko", depends: []string{"virtio", "virtio_ring"}, aliases: []string{"virtio:d00000002v*"}},
	{path: "kernel/drivers/net/ethernet/intel/e1000/e1000.ko", aliases: []string{"pci:v00008086d0000100Esv*sd*bc*sc*i*"}},
	{path: "kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko.xz", depends: []string{"mlxfw"}},
	{path: "kernel/drivers/net/ethernet/mellanox/mlxfw/mlxfw.ko.zst"},
	{path: "kernel/fs/fat/fat.ko"},
	{path: "kernel/fs/fat/vfat.ko", depends: []string{"fat"}, aliases: []string{"fs-vfat"}},
	{path: "kernel/fs/ext4/ext4.ko", depends: []string{"crc16"}, softdep: "pre: crypto-crc32c", aliases: []string{"fs-ext4"}},
	{path: "kernel/lib/crc16.ko"},
	{path: "kernel/crypto/crc32c_generic.ko", aliases: []string{"crypto-crc32c", "crc32c"}},
	{path: "kernel/arch/x86/crypto/crc32c-intel.ko", aliases: []string{"crypto-crc32c", "crc32c"}},
	{path: "kernel/drivers/gpu/drm/drm.ko"},
	{path: "kernel/sound/core/snd.ko"},
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{root: root, release: fixtureRelease}
	f.modDir = filepath.Join(root, "lib", "modules", fixtureRelease)
	var order []string
	for _, m := range fixtureModules {
		p := filepath.Join(f.modDir, filepath.FromSlash(m.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := compressFor(t, m.path, elfFile(elf.ET_REL, elf.EM_X86_64, m.modinfo(), ""))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		order = append(order, strings.TrimSuffix(strings.TrimSuffix(m.path, ".xz"), ".zst"))
	}
	writeFile(t, filepath.Join(f.modDir, "modules.order"), strings.Join(order, "\n")+"\n")
	writeFile(t, filepath.Join(f.modDir, "modules.builtin"), "kernel/drivers/tty/serial/8250/8250.ko\n")
	writeFile(t, filepath.Join(f.modDir, "modules.builtin.modinfo"), "8250.alias=char-major-4-*\x00")
	f.kernel = filepath.Join(root, "boot", "vmlinuz-"+fixtureRelease)
	kernel := make([]byte, 4096)
	copy(kernel[x86HdrSOffset:], x86HdrSMagic)
	if err := os.MkdirAll(filepath.Dir(f.kernel), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.kernel, kernel, 0o644); err != nil {
		t.Fatal(err)
	}
	f.anvil = filepath.Join(root, "anvil")
	if err := os.WriteFile(f.anvil, elfFile(elf.ET_EXEC, elf.EM_X86_64, nil, ""), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// compressFor compresses data as the module path's extension says.
func compressFor(t *testing.T, path string, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	var w io.WriteCloser
	var err error
	switch filepath.Ext(path) {
	case ".xz":
		w, err = xz.NewWriter(&b)
	case ".zst":
		w, err = zstd.NewWriter(&b)
	default:
		return data
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readInitramfs decompresses an initramfs by its magic and returns its
// records by name, with contents, read with u-root's newc reader.
func readInitramfs(t *testing.T, path string) map[string]record {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data := decompressAny(t, raw)
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(data)))
	if err != nil {
		t.Fatalf("read cpio: %v", err)
	}
	out := map[string]record{}
	for _, r := range recs {
		var content []byte
		if r.ReaderAt != nil && r.FileSize > 0 {
			content, err = io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, dup := out[r.Name]; dup {
			t.Errorf("%s twice in the archive", r.Name)
		}
		out[r.Name] = record{Info: r.Info, data: content}
	}
	return out
}

type record struct {
	cpio.Info
	data []byte
}

// decompressAny undoes any compression the kernel understands, by magic.
func decompressAny(t *testing.T, raw []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	switch {
	case bytes.HasPrefix(raw, []byte("\x1f\x8b")):
		r, err = gzip.NewReader(bytes.NewReader(raw))
	case bytes.HasPrefix(raw, []byte("\x28\xb5\x2f\xfd")):
		var d *zstd.Decoder
		d, err = zstd.NewReader(bytes.NewReader(raw))
		r = d
	case bytes.HasPrefix(raw, []byte("\xfd7zXZ\x00")):
		r, err = xz.NewReader(bytes.NewReader(raw))
	case bytes.HasPrefix(raw, []byte("\x02\x21\x4c\x18")): // LZ4 legacy frame
		r = lz4.NewReader(bytes.NewReader(raw))
	case bytes.HasPrefix(raw, []byte("070701")):
		return raw
	default:
		t.Fatalf("unknown initramfs compression, magic %x", raw[:min(6, len(raw))])
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decompress: %v", err)
	}
	return data
}

// cpioList lists an uncompressed newc archive with GNU cpio, the reference
// reader, when it is installed.
func cpioList(t *testing.T, data []byte) []string {
	t.Helper()
	cmd := exec.Command(testtool.RequireBinary(t, "cpio", "cpio"), "-it", "--quiet")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -it: %v", err)
	}
	names := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(names)
	return names
}
