package bootenv

import (
	"fmt"
	"io"
	"runtime"
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
		// The kernel reads only LZ4's legacy frame format (lz4 -l).
		zw := lz4.NewWriter(w)
		// Legacy blocks are compressed independently: the output is the
		// same however many run at once.
		opts := []lz4.Option{lz4.LegacyOption(true), lz4.ConcurrencyOption(runtime.GOMAXPROCS(0))}
		if c.level > 0 {
			opts = append(opts, lz4.CompressionLevelOption(lz4Levels[c.level]))
		}
		if err := zw.Apply(opts...); err != nil {
			return nil, err
		}
		return zw, nil
	}
	return nil, fmt.Errorf("compression %q: unknown", c)
}

var lz4Levels = map[int]lz4.CompressionLevel{
	1: lz4.Level1, 2: lz4.Level2, 3: lz4.Level3, 4: lz4.Level4, 5: lz4.Level5,
	6: lz4.Level6, 7: lz4.Level7, 8: lz4.Level8, 9: lz4.Level9,
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
