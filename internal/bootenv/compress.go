package bootenv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"
)

// Compressions of the initramfs: each is one of the kernel's initramfs
// decompressors (CONFIG_RD_GZIP, _ZSTD, _XZ, _LZ4; Debian enables them
// all). A level may follow: "zstd-19", "gzip-9".
const (
	CompressNone = "none"
	CompressGzip = "gzip"
	CompressZstd = "zstd"
	CompressXz   = "xz"
	CompressLz4  = "lz4"
)

// DefaultCompression is what the boot environment uses when Config says
// nothing. Measured under QEMU TCG with Debian's kernel and the default
// modules (bench/bootenv, figures in docs/bootenv.md), LZ4 reaches /init
// as fast as no compression at all and ~0.5 s before gzip and zstd (xz:
// 5 s later): the kernel's LZ4 decompressor costs next to nothing there,
// while fetching the file over iPXE's HTTP is fast. Level 9 makes it 12%
// smaller than level 1 at the same boot time; zstd-19 is 32% smaller
// still, for networks where the download is what counts.
const DefaultCompression = "lz4-9"

// compressor is a parsed compression spec.
type compressor struct {
	name  string
	level int // 0: the method's default
}

// parseCompression parses "NAME" or "NAME-LEVEL".
func parseCompression(spec string) (compressor, error) {
	if spec == "" {
		spec = DefaultCompression
	}
	name, lvl, hasLevel := strings.Cut(spec, "-")
	c := compressor{name: name}
	if hasLevel {
		n, err := strconv.Atoi(lvl)
		if err != nil || n < 1 {
			return c, fmt.Errorf("compression %q: the level must be a positive number", spec)
		}
		c.level = n
	}
	max := map[string]int{CompressNone: 0, CompressGzip: 9, CompressZstd: 22, CompressXz: 0, CompressLz4: 9}
	m, ok := max[name]
	switch {
	case !ok:
		return c, fmt.Errorf("compression %q: want none, gzip, zstd, xz or lz4, with an optional level (zstd-19, gzip-9)", spec)
	case c.level > m:
		if m == 0 {
			return c, fmt.Errorf("compression %q: %s takes no level", spec, name)
		}
		return c, fmt.Errorf("compression %q: %s levels go up to %d", spec, name, m)
	}
	return c, nil
}

func (c compressor) String() string {
	if c.level == 0 {
		return c.name
	}
	return c.name + "-" + strconv.Itoa(c.level)
}

// writer returns a WriteCloser compressing into w; Close flushes the
// stream but does not close w. The output is a function of the input
// alone (no timestamps, no names, no dependence on concurrency).
func (c compressor) writer(w io.Writer) (io.WriteCloser, error) {
	switch c.name {
	case CompressNone:
		return nopCloser{w}, nil
	case CompressGzip:
		level := gzip.DefaultCompression
		if c.level > 0 {
			level = c.level
		}
		return gzip.NewWriterLevel(w, level)
	case CompressZstd:
		level := zstd.SpeedDefault
		if c.level > 0 {
			level = zstd.EncoderLevelFromZstd(c.level)
		}
		return zstd.NewWriter(w, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(true))
	case CompressXz:
		// The kernel's xz decoder checks CRC32 or nothing, not xz's
		// default CRC64.
		return xz.WriterConfig{CheckSum: xz.CRC32}.NewWriter(w)
	case CompressLz4:
		return newLZ4Legacy(w, c.level), nil
	}
	return nil, fmt.Errorf("compression %q: unknown", c)
}

var lz4Levels = map[int]lz4.CompressionLevel{
	1: lz4.Level1, 2: lz4.Level2, 3: lz4.Level3, 4: lz4.Level4, 5: lz4.Level5,
	6: lz4.Level6, 7: lz4.Level7, 8: lz4.Level8, 9: lz4.Level9,
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// LZ4's legacy frame, the only LZ4 format the kernel's initramfs unpacker
// reads (lib/decompress_unlz4.c): a magic number, then blocks of at most
// 8 MiB of input, each its compressed length (little-endian 32 bits) and an
// LZ4 block. Unlike the frame format it has no "stored" blocks, so an
// incompressible block must still be an LZ4 block (all literals); the lz4
// package's Writer stores such blocks raw in legacy mode too, which breaks
// the archive at the first one (compressed data inside the anvil binary:
// the kernel stopped unpacking half-way through /init). Hence this writer.
const (
	lz4LegacyMagic     = 0x184C2102
	lz4LegacyBlockSize = 8 << 20
)

type lz4Legacy struct {
	w        io.Writer
	block    []byte
	out      []byte
	compress func(src, dst []byte) (int, error)
	started  bool
	err      error
}

func newLZ4Legacy(w io.Writer, level int) *lz4Legacy {
	z := &lz4Legacy{w: w, block: make([]byte, 0, lz4LegacyBlockSize),
		out: make([]byte, 4+lz4.CompressBlockBound(lz4LegacyBlockSize))}
	if level > 0 {
		hc := &lz4.CompressorHC{Level: lz4Levels[level]}
		z.compress = hc.CompressBlock
	} else {
		var fast lz4.Compressor
		z.compress = fast.CompressBlock
	}
	return z
}

func (z *lz4Legacy) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && z.err == nil {
		k := min(len(p), lz4LegacyBlockSize-len(z.block))
		z.block = append(z.block, p[:k]...)
		p, n = p[k:], n+k
		if len(z.block) == lz4LegacyBlockSize {
			z.flush()
		}
	}
	return n, z.err
}

// flush writes the buffered input as one block.
func (z *lz4Legacy) flush() {
	if z.err != nil {
		return
	}
	if !z.started {
		var magic [4]byte
		binary.LittleEndian.PutUint32(magic[:], lz4LegacyMagic)
		if _, z.err = z.w.Write(magic[:]); z.err != nil {
			return
		}
		z.started = true
	}
	if len(z.block) == 0 {
		return
	}
	// With room for CompressBlockBound the block always compresses,
	// to literals if need be.
	n, err := z.compress(z.block, z.out[4:])
	if err == nil && n == 0 {
		err = errors.New("lz4: block did not compress into its bound")
	}
	if err != nil {
		z.err = err
		return
	}
	binary.LittleEndian.PutUint32(z.out[:4], uint32(n))
	_, z.err = z.w.Write(z.out[:4+n])
	z.block = z.block[:0]
}

// Close writes what is buffered; it does not close the underlying writer.
func (z *lz4Legacy) Close() error {
	z.flush()
	return z.err
}
