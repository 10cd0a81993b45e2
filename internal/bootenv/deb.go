package bootenv

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// The ar(1) archive format a .deb is: a global magic, then members, each
// a 60-byte text header and its data padded to an even length.
const (
	arMagic      = "!<arch>\n"
	arHeaderSize = 60
	arFileMagic  = "`\n"
)

// arMember is one member's header.
type arMember struct {
	Name string
	Size int64
}

// readAr calls fn for each member of the ar archive r with a reader of
// exactly its data; fn need not read it all. A malformed header is an
// error naming the member's offset.
func readAr(r io.Reader, fn func(m arMember, data io.Reader) error) error {
	br := bufio.NewReader(r)
	magic := make([]byte, len(arMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != arMagic {
		return errors.New("not an ar archive (a .deb starts with \"!<arch>\")")
	}
	offset := int64(len(arMagic))
	hdr := make([]byte, arHeaderSize)
	for {
		n, err := io.ReadFull(br, hdr)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ar member header at offset %d: %w", offset, err)
		}
		m, err := parseArHeader(hdr[:n])
		if err != nil {
			return fmt.Errorf("ar member header at offset %d: %w", offset, err)
		}
		offset += arHeaderSize
		data := &io.LimitedReader{R: br, N: m.Size}
		if err := fn(m, data); err != nil {
			return err
		}
		rest := data.N + m.Size%2 // what fn left unread, and the padding byte
		if _, err := io.CopyN(io.Discard, br, rest); err != nil {
			return fmt.Errorf("ar member %q: truncated: %w", m.Name, err)
		}
		offset += m.Size + m.Size%2
	}
}

// parseArHeader parses a 60-byte ar member header (name, mtime, uid,
// gid, mode, size, magic), in the common (System V/GNU) form a .deb uses.
func parseArHeader(h []byte) (arMember, error) {
	if len(h) != arHeaderSize {
		return arMember{}, fmt.Errorf("short header (%d bytes)", len(h))
	}
	if string(h[58:60]) != arFileMagic {
		return arMember{}, errors.New("bad header magic")
	}
	name := strings.TrimRight(string(h[0:16]), " ")
	name = strings.TrimSuffix(name, "/") // GNU ar ends names with '/'
	if name == "" {
		return arMember{}, errors.New("empty member name")
	}
	size, err := strconv.ParseInt(strings.TrimRight(string(h[48:58]), " "), 10, 64)
	if err != nil || size < 0 {
		return arMember{}, fmt.Errorf("member %q: bad size %q", name, bytes.TrimRight(h[48:58], " "))
	}
	return arMember{Name: name, Size: size}, nil
}

// extractDeb unpacks the kernel image, its config and the module tree of
// a Debian linux-image package into dir: data.tar.{xz,zst,gz} members
// under boot/ (vmlinuz-*, config-*) and {usr/,}lib/modules/, the latter
// as lib/modules. Everything else is skipped; a path with ".." or an
// absolute one is an error.
func extractDeb(ctx context.Context, debPath, dir string) error {
	f, err := os.Open(debPath)
	if err != nil {
		return err
	}
	defer f.Close()
	found := false
	err = readAr(f, func(m arMember, data io.Reader) error {
		if !strings.HasPrefix(m.Name, "data.tar") {
			return nil
		}
		found = true
		r, err := decompressor(m.Name, data)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		defer r.Close()
		if err := extractTar(ctx, r, dir); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", debPath, err)
	}
	if !found {
		return fmt.Errorf("%s: no data.tar member: not a Debian package", debPath)
	}
	return nil
}

// decompressor returns a reader of a data.tar member's tar stream; Close
// releases the decoder (not r).
func decompressor(name string, r io.Reader) (io.ReadCloser, error) {
	switch path.Ext(name) {
	case ".xz":
		x, err := xz.NewReader(bufio.NewReaderSize(r, 1<<20))
		return io.NopCloser(x), err
	case ".zst":
		d, err := zstd.NewReader(r)
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case ".gz":
		return gzip.NewReader(r)
	case ".tar":
		return io.NopCloser(r), nil
	}
	return nil, fmt.Errorf("unsupported compression %q (want xz, zst, gz or none)", path.Ext(name))
}

// debPath maps a path in a kernel package's data.tar to where extractDeb
// puts it, or "" to skip it.
func debPath(name string) string {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	if s, ok := strings.CutPrefix(name, "usr/"); ok && strings.HasPrefix(s, "lib/modules/") {
		name = s
	}
	switch {
	case strings.HasPrefix(name, "lib/modules/"):
		return name
	case strings.HasPrefix(name, "boot/vmlinuz-"), strings.HasPrefix(name, "boot/config-"):
		return name
	}
	return ""
}

func extractTar(ctx context.Context, r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if slices.Contains(strings.Split(h.Name, "/"), "..") {
			return fmt.Errorf("entry %q: path leaves the archive", h.Name)
		}
		rel := debPath(h.Name)
		if rel == "" || h.Typeflag != tar.TypeReg {
			continue // directories are made as needed; build/source links are not wanted
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", h.Name, err)
		}
	}
}
