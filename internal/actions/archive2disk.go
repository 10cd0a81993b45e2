package actions

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"
)

// archiveTypes maps ARCHIVE_TYPE to the compression around the tar.
var archiveTypes = map[string]format{
	"tar":    formatRaw,
	"targz":  formatGzip,
	"tgz":    formatGzip,
	"tarzst": formatZstd,
	"tarxz":  formatXz,
	"tarbz2": formatBzip2,
}

// archiveCopyBuffer is the buffer of each extracted file's copy.
const archiveCopyBuffer = 1 << 20

// archive2disk mounts DEST_DISK (FS_TYPE) and unpacks the tar archive at
// ARCHIVE_URL (ARCHIVE_TYPE) into DEST_PATH on it. Entries that would
// land outside DEST_PATH (absolute names, "..", links that lead out) are
// refused. TARFILE_CHECKSUM (sha256:HEX) is required unless
// INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION is true.
func (c *Catalog) archive2disk(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	var req [5]string
	for i, name := range []string{"ARCHIVE_URL", "ARCHIVE_TYPE", "DEST_DISK", "FS_TYPE", "DEST_PATH"} {
		v, err := e.required(name)
		if err != nil {
			return Result{}, fmt.Errorf("archive2disk: %w", err)
		}
		req[i] = v
	}
	archiveURL, archiveType, dev, fstype, destPath := req[0], strings.ToLower(req[1]), req[2], req[3], req[4]
	f, ok := archiveTypes[archiveType]
	if !ok {
		return Result{}, fmt.Errorf("archive2disk: ARCHIVE_TYPE %q is not one of tar, targz, tgz, tarzst, tarxz, tarbz2", req[1])
	}
	want, err := e.checksum("TARFILE_CHECKSUM")
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	insecure, err := e.boolean("INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION", false)
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	if want == nil && !insecure {
		return Result{}, errors.New("archive2disk: TARFILE_CHECKSUM is required (sha256:HEX), or set INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION=true")
	}
	retryFor, err := retryDuration(e)
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	interval, err := e.integer("PROGRESS_INTERVAL_SECONDS", defaultProgressInterval, 1, maxProgressInterval)
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	rel := strings.TrimPrefix(path.Clean("/"+destPath), "/")

	m, err := c.mountDevice(ctx, dev, fstype)
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	err = c.unpackURL(ctx, out, m.dir, rel, archiveURL, f, want, retryFor, time.Duration(interval)*time.Second)
	if uerr := m.unmount(); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	return Result{}, nil
}

// unpackURL fetches the archive and unpacks it into rel under dir.
func (c *Catalog) unpackURL(parent context.Context, out Output, dir, rel, archiveURL string, f format,
	want *checksum, retryFor, interval time.Duration) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if rel != "" {
		if err := root.MkdirAll(rel, defaultDirMode); err != nil {
			return fmt.Errorf("DEST_PATH: %w", err)
		}
	} else {
		rel = "."
	}
	dest, err := root.OpenRoot(rel)
	if err != nil {
		return fmt.Errorf("DEST_PATH: %w", err)
	}
	defer dest.Close()

	opts := fetchOpts{retryFor: retryFor}
	if want != nil {
		opts.hash = want.newHash()
	}
	src, err := c.startFetch(ctx, out, archiveURL, opts)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", archiveURL, err)
	}
	defer src.Close()
	dec, err := newDecoder(f, src)
	if err != nil {
		if src.Err() != nil {
			return src.Err()
		}
		return fmt.Errorf("%s: not a %s stream: %w", archiveURL, f, err)
	}
	linef(out, "unpacking %s (%s tar, %s) into /%s", archiveURL, f, sizeText(src.Size()), strings.TrimPrefix(rel, "."))

	x := &extractor{root: dest, out: out}
	stop := c.reportProgress(out, interval, src.Size(), src.Fetched, x.written.Load)
	xerr := x.extract(ctx, dec)
	if xerr != nil {
		cancel()
	}
	dec.Close() // waits for its goroutines: from here on only this one reads src
	if xerr == nil {
		if _, err := io.Copy(io.Discard, src); err != nil {
			xerr = err
		}
	}
	stop()
	out.Progress(Progress{Bytes: src.Fetched(), TotalBytes: max(src.Size(), 0), Written: x.written.Load()})
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("stopped at byte %d%s of %s (%d entries unpacked): %w", src.Fetched(), src.ofSize(), archiveURL, x.entries, context.Cause(parent))
	case src.Err() != nil:
		return fmt.Errorf("%w (%d entries unpacked)", src.Err(), x.entries)
	case xerr != nil:
		return fmt.Errorf("%s near byte %d%s of the download: %w", archiveURL, src.Fetched(), src.ofSize(), xerr)
	}
	if want != nil {
		if got := opts.hash.Sum(nil); !bytes.Equal(got, want.sum) {
			return fmt.Errorf("TARFILE_CHECKSUM mismatch: %s has %s:%x, want %s; its %d entries are unpacked in %s and must not be trusted",
				archiveURL, want.algo, got, want, x.entries, "/"+strings.TrimPrefix(rel, "."))
		}
		linef(out, "checksum %s verified", want)
	}
	linef(out, "unpacked %d entries (%d bytes of file data)%s", x.entries, x.written.Load(), x.skippedText())
	return nil
}

// extractor unpacks a tar stream into a directory (os.Root: nothing it
// does resolves outside it, whatever the archive's links say).
type extractor struct {
	root    *os.Root
	out     Output
	entries int
	skipped int // entries of types that cannot be made here
	written atomic.Int64
	dirs    []dirTimes
	buf     []byte
}

// dirTimes is a directory's modification time, set after its contents.
type dirTimes struct {
	name  string
	mtime time.Time
}

// extract unpacks every entry of the tar stream r. The first entry that
// fails or is refused ends it with an error naming the entry.
func (x *extractor) extract(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	x.buf = make([]byte, archiveCopyBuffer)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the tar after %d entries: %w", x.entries, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("entry %d %q: %w", x.entries+1, hdr.Name, err)
		}
		x.entries++
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return fmt.Errorf("directory %q: %w", d.name, err)
		}
	}
	return nil
}

// entry makes one tar entry.
func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	name, err := entryPath(hdr.Name)
	if err != nil {
		return err
	}
	mode := unixMode(uint32(hdr.Mode) & 0o7777)
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if name != "." {
		if err := x.root.MkdirAll(path.Dir(name), defaultDirMode); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if err := x.root.Chmod(name, mode); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirTimes{name: name, mtime: hdr.ModTime})
		return nil
	case tar.TypeReg, tar.TypeChar, tar.TypeBlock, tar.TypeFifo, tar.TypeSymlink, tar.TypeLink:
	default:
		x.skipped++
		return nil
	}
	if name == "." {
		return errors.New("only a directory can be the top of the archive")
	}
	if err := x.clear(name); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeSymlink:
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		return x.root.Lchown(name, hdr.Uid, hdr.Gid)
	case tar.TypeLink:
		target, err := entryPath(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
		}
		return x.root.Link(target, name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		made, err := x.mknod(name, hdr, mode)
		if err != nil || !made {
			return err
		}
	case tar.TypeReg:
		if err := x.file(name, hdr, mode, r); err != nil {
			return err
		}
	}
	return x.root.Chtimes(name, hdr.AccessTime, hdr.ModTime)
}

// clear removes what is at name unless it is a directory, as tar does
// before it makes an entry: a link left by an earlier entry is replaced,
// never written through.
func (x *extractor) clear(name string) error {
	st, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return errors.New("a directory is in the way")
	}
	return x.root.Remove(name)
}

// file makes a regular file with the entry's data, owner and mode.
func (x *extractor) file(name string, hdr *tar.Header, mode fs.FileMode, r io.Reader) error {
	f, err := x.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(onlyWriter{f}, r, x.buf)
	x.written.Add(n)
	if err == nil {
		err = f.Chown(hdr.Uid, hdr.Gid)
	}
	if err == nil {
		err = f.Chmod(mode) // after chown, which clears setuid
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// mknod makes a device node or FIFO; made is false when this system
// cannot (the entry is counted as skipped).
func (x *extractor) mknod(name string, hdr *tar.Header, mode fs.FileMode) (made bool, err error) {
	parent, err := x.root.Open(path.Dir(name))
	if err != nil {
		return false, err
	}
	defer parent.Close()
	err = mknodAt(parent, path.Base(name), hdr.Typeflag, unixPerm(mode), hdr.Devmajor, hdr.Devminor)
	if errors.Is(err, errors.ErrUnsupported) {
		x.skipped++
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return false, err
	}
	return true, x.root.Chmod(name, mode)
}

func (x *extractor) skippedText() string {
	if x.skipped == 0 {
		return ""
	}
	return fmt.Sprintf("; %d entries of types that are not made here were skipped", x.skipped)
}

// onlyWriter hides a file's ReadFrom, so io.CopyBuffer uses the buffer
// (large writes) rather than small copy_file_range attempts.
type onlyWriter struct{ io.Writer }

// entryPath checks a tar entry's name and returns it cleaned, relative to
// the archive's top ("." for the top itself). Absolute names and names
// with a ".." element are refused, never rewritten.
func entryPath(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("empty name")
	case strings.IndexByte(name, 0) >= 0:
		return "", errors.New("NUL in the name")
	case strings.HasPrefix(name, "/"):
		return "", errors.New("absolute name: refused (it would land outside DEST_PATH)")
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == ".." {
			return "", errors.New(`".." in the name: refused (it could land outside DEST_PATH)`)
		}
	}
	return path.Clean(name), nil
}
