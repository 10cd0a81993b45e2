package actions

import (
	"bytes"
	"compress/bzip2"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	"github.com/ulikunitz/xz"
)

// format is a compression format of an image or archive.
type format int

// The formats image2disk and archive2disk decompress.
const (
	formatRaw format = iota
	formatGzip
	formatXz
	formatZstd
	formatBzip2
)

func (f format) String() string {
	switch f {
	case formatGzip:
		return "gzip"
	case formatXz:
		return "xz"
	case formatZstd:
		return "zstd"
	case formatBzip2:
		return "bzip2"
	}
	return "raw"
}

// Magic numbers at the start of each format's stream.
var (
	magicGzip  = []byte{0x1f, 0x8b}
	magicXz    = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magicZstd  = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicBzip2 = []byte("BZh")
)

// Zstandard skippable frames (RFC 8878 section 3.1.2) start with
// 0x184D2A50 to 0x184D2A5F, little endian: they may open a zstd stream.
const (
	zstdSkippableMask  = 0xfffffff0
	zstdSkippableMagic = 0x184d2a50
)

// magicLen is how many bytes sniff needs to tell every format apart.
const magicLen = 6

// sniff tells a format by the first bytes of a stream; formatRaw when
// none matches.
func sniff(head []byte) format {
	switch {
	case bytes.HasPrefix(head, magicGzip):
		return formatGzip
	case bytes.HasPrefix(head, magicXz):
		return formatXz
	case bytes.HasPrefix(head, magicZstd):
		return formatZstd
	case len(head) >= 4 && (uint32(head[0])|uint32(head[1])<<8|uint32(head[2])<<16|uint32(head[3])<<24)&zstdSkippableMask == zstdSkippableMagic:
		return formatZstd
	case len(head) >= 4 && bytes.HasPrefix(head, magicBzip2) && head[3] >= '1' && head[3] <= '9':
		return formatBzip2
	}
	return formatRaw
}

// bySuffix tells a format by the name at the end of a URL's path (the
// query is not part of it); formatRaw when the name says nothing.
func bySuffix(rawURL string) format {
	p := rawURL
	if u, err := url.Parse(rawURL); err == nil {
		p = u.Path
	}
	switch strings.ToLower(path.Ext(p)) {
	case ".gz", ".gzip":
		return formatGzip
	case ".xz":
		return formatXz
	case ".zst", ".zstd", ".zs":
		return formatZstd
	case ".bz2", ".bzip2":
		return formatBzip2
	}
	return formatRaw
}

// detect decides how to decompress a stream that starts with head and
// comes from rawURL: by its magic bytes, else by its name. A name that
// promises a format the bytes do not start with is an error, before a
// byte is written. how says what decided, for the action's log.
func detect(head []byte, rawURL string) (f format, how string, err error) {
	if f := sniff(head); f != formatRaw {
		return f, "magic bytes", nil
	}
	if f := bySuffix(rawURL); f != formatRaw {
		return 0, "", fmt.Errorf("the name says %s but the data does not start with %s's magic bytes (it starts with % x): not a %s stream", f, f, head, f)
	}
	return formatRaw, "neither magic bytes nor name match gzip, xz, zstd or bzip2", nil
}

// decoder is a decompressing reader; Close releases its goroutines.
type decoder interface {
	io.Reader
	Close() error
}

// nopDecoder is the decoder of raw data.
type nopDecoder struct{ io.Reader }

func (nopDecoder) Close() error { return nil }

// zstdDecoder adapts zstd.Decoder, whose Close returns nothing.
type zstdDecoder struct{ *zstd.Decoder }

func (d zstdDecoder) Close() error { d.Decoder.Close(); return nil }

// pgzip decodes ahead of its reader, gzipBlocks blocks of gzipBlockSize.
const (
	gzipBlockSize = 1 << 20
	gzipBlocks    = 8
)

// newDecoder returns a reader of f's decompressed stream from r.
func newDecoder(f format, r io.Reader) (decoder, error) {
	switch f {
	case formatGzip:
		return pgzip.NewReaderN(r, gzipBlockSize, gzipBlocks)
	case formatXz:
		x, err := xz.NewReader(r)
		if err != nil {
			return nil, err
		}
		return nopDecoder{x}, nil
	case formatZstd:
		// The defaults decode asynchronously (concurrency min(4,
		// GOMAXPROCS)) and refuse windows over 512 MiB (zstd --long=29).
		d, err := zstd.NewReader(r)
		if err != nil {
			return nil, err
		}
		return zstdDecoder{d}, nil
	case formatBzip2:
		return nopDecoder{bzip2.NewReader(r)}, nil
	}
	return nopDecoder{r}, nil
}
