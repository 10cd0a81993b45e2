package kmod

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// modinfoSection is the ELF section holding a module's key=value strings.
const modinfoSection = ".modinfo"

// maxModuleSize bounds a decompressed module: the largest in Debian's
// kernel (amdgpu) is about 15 MiB uncompressed.
const maxModuleSize = 256 << 20

// ReadModinfo reads the .modinfo section of a module's ELF object and
// returns it parsed, with the object's machine (elf.EM_X86_64, …).
func ReadModinfo(r io.ReaderAt) (Modinfo, elf.Machine, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return Modinfo{}, 0, fmt.Errorf("not an ELF module: %w", err)
	}
	if f.Type != elf.ET_REL {
		return Modinfo{}, 0, fmt.Errorf("not a module: ELF type %v, want %v", f.Type, elf.ET_REL)
	}
	s := f.Section(modinfoSection)
	if s == nil {
		return Modinfo{}, 0, errors.New("no " + modinfoSection + " section")
	}
	data, err := s.Data()
	if err != nil {
		return Modinfo{}, 0, fmt.Errorf("read %s: %w", modinfoSection, err)
	}
	mi, err := ParseModinfo(data)
	return mi, f.Machine, err
}

// ReadModuleFile reads the modinfo and ELF machine of the module file at
// path, decompressing a .ko.xz, .ko.zst or .ko.gz in memory first. The
// module's name falls back to its file name when .modinfo has none.
func ReadModuleFile(path string) (Modinfo, elf.Machine, error) {
	var (
		mi  Modinfo
		m   elf.Machine
		err error
	)
	if compression(path) == "" {
		f, oerr := os.Open(path)
		if oerr != nil {
			return Modinfo{}, 0, oerr
		}
		defer f.Close()
		mi, m, err = ReadModinfo(f)
	} else {
		data, rerr := ReadModule(path)
		if rerr != nil {
			return Modinfo{}, 0, rerr
		}
		mi, m, err = ReadModinfo(bytes.NewReader(data))
	}
	if err != nil {
		return Modinfo{}, 0, fmt.Errorf("%s: %w", path, err)
	}
	if mi.Name == "" {
		mi.Name = ModuleName(path)
	}
	mi.Name = ModuleName(mi.Name)
	return mi, m, nil
}

// ReadModule returns the uncompressed contents of the module file at
// path, decompressing .ko.xz, .ko.zst and .ko.gz.
func ReadModule(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := Decompress(path, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c, ok := r.(io.Closer); ok {
		defer c.Close()
	}
	data, err := io.ReadAll(io.LimitReader(r, maxModuleSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxModuleSize {
		return nil, fmt.Errorf("%s: larger than %d bytes uncompressed", path, maxModuleSize)
	}
	return data, nil
}

// Decompress returns a reader of r's uncompressed contents, chosen by
// name's extension (.ko.xz, .ko.zst, .ko.gz); for any other name it
// returns r itself. A returned io.Closer should be closed when done (it
// releases the decoder, not r).
func Decompress(name string, r io.Reader) (io.Reader, error) {
	switch compression(name) {
	case "xz":
		return xz.NewReader(r)
	case "zst":
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case "gz":
		return gzip.NewReader(r)
	}
	return r, nil
}

// compression returns "xz", "zst" or "gz" for a compressed module file,
// "" otherwise.
func compression(name string) string {
	for _, c := range []string{"xz", "zst", "gz"} {
		if strings.HasSuffix(name, ".ko."+c) {
			return c
		}
	}
	return ""
}

// UncompressedPath returns a module file's path without its compression
// extension ("x.ko.xz" → "x.ko").
func UncompressedPath(name string) string {
	if c := compression(name); c != "" {
		return strings.TrimSuffix(name, "."+c)
	}
	return name
}
