package bootenv

import (
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
// nothing: the fastest to reach /init under QEMU TCG among those measured
// for size and boot time (docs/bootenv.md has the figures).
const DefaultCompression = "zstd-19"

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
// alone (no timestamps, no names, single-threaded encoders).
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
		opts := []lz4.Option{lz4.LegacyOption(true), lz4.ConcurrencyOption(1)}
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
