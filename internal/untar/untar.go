// Package untar unpacks a tar stream into a directory and never writes
// outside it, whatever the archive's names and links say: every path is
// resolved through an os.Root, absolute names and names with a ".." element
// are refused, and what is already at an entry's name (a link an earlier
// entry made) is replaced, never written through.
//
// It is shared by archive2disk (a tar archive into a filesystem) and the
// OCI image cache (an image's flattened layers into a root filesystem), so
// that one extractor decides what "inside" means. It knows nothing of
// either: no HTTP, no images, no mounts.
package untar

import (
	"archive/tar"
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

// copyBuffer is the buffer of each extracted file's copy.
const copyBuffer = 1 << 20

// dirMode is the mode of parent directories made for an entry whose
// directory the archive did not list first.
const dirMode fs.FileMode = 0o755

// ErrOutside is wrapped by the error for an entry whose name would land
// outside the directory (absolute, or with a ".." element).
var ErrOutside = errors.New("refused: it could land outside the destination")

// Extractor unpacks tar streams into Root. Its counters may be read from
// other goroutines while Extract runs (a progress reporter does); Extract
// itself must not be called concurrently.
type Extractor struct {
	// Root is the destination; nothing is made outside it. Required.
	Root *os.Root

	written atomic.Int64
	entries atomic.Int64
	skipped int // entries of types that cannot be made here
	dirs    []dirTimes
	buf     []byte
}

// dirTimes is a directory's modification time, set after its contents.
type dirTimes struct {
	name  string
	mtime time.Time
}

// Written is how many bytes of file data have been written so far.
func (x *Extractor) Written() int64 { return x.written.Load() }

// Entries is how many entries have been unpacked so far.
func (x *Extractor) Entries() int { return int(x.entries.Load()) }

// Skipped is how many entries were of a type this system cannot make
// (device nodes where mknod is unsupported, and unknown types).
func (x *Extractor) Skipped() int { return x.skipped }

// SkippedText is "" or a sentence for a summary line saying how many
// entries were skipped.
func (x *Extractor) SkippedText() string {
	if x.skipped == 0 {
		return ""
	}
	return fmt.Sprintf("; %d entries of types that are not made here were skipped", x.skipped)
}

// Extract unpacks every entry of the tar stream r. The first entry that
// fails or is refused ends it with an error naming the entry (its number,
// from 1, and its name). Directory modification times are set last, so
// that making their contents does not change them.
func (x *Extractor) Extract(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	if x.buf == nil {
		x.buf = make([]byte, copyBuffer)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the tar after %d entries: %w", x.Entries(), err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("entry %d %q: %w", x.Entries()+1, hdr.Name, err)
		}
		x.entries.Add(1)
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.Root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return fmt.Errorf("directory %q: %w", d.name, err)
		}
	}
	x.dirs = nil
	return nil
}

// entry makes one tar entry.
func (x *Extractor) entry(hdr *tar.Header, r io.Reader) error {
	name, err := EntryPath(hdr.Name)
	if err != nil {
		return err
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if name != "." {
		if err := x.Root.MkdirAll(path.Dir(name), dirMode); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.Root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := x.Root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if err := x.Root.Chmod(name, mode); err != nil {
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
		if err := x.Root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		return x.Root.Lchown(name, hdr.Uid, hdr.Gid)
	case tar.TypeLink:
		target, err := EntryPath(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
		}
		return x.Root.Link(target, name)
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
	return x.Root.Chtimes(name, hdr.AccessTime, hdr.ModTime)
}

// clear removes what is at name unless it is a directory, as tar does
// before it makes an entry: a link left by an earlier entry is replaced,
// never written through.
func (x *Extractor) clear(name string) error {
	st, err := x.Root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return errors.New("a directory is in the way")
	}
	return x.Root.Remove(name)
}

// file makes a regular file with the entry's data, owner and mode.
func (x *Extractor) file(name string, hdr *tar.Header, mode fs.FileMode, r io.Reader) error {
	f, err := x.Root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
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
func (x *Extractor) mknod(name string, hdr *tar.Header, mode fs.FileMode) (made bool, err error) {
	parent, err := x.Root.Open(path.Dir(name))
	if err != nil {
		return false, err
	}
	defer parent.Close()
	err = mknodAt(parent, path.Base(name), hdr.Typeflag, uint32(hdr.Mode)&0o7777, hdr.Devmajor, hdr.Devminor)
	if errors.Is(err, errors.ErrUnsupported) {
		x.skipped++
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := x.Root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return false, err
	}
	return true, x.Root.Chmod(name, mode)
}

// onlyWriter hides a file's ReadFrom, so io.CopyBuffer uses the buffer
// (large writes) rather than small copy_file_range attempts.
type onlyWriter struct{ io.Writer }

// EntryPath checks a tar entry's name and returns it cleaned, relative to
// the archive's top ("." for the top itself). Absolute names and names
// with a ".." element are refused (wrapping ErrOutside), never rewritten.
func EntryPath(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("empty name")
	case strings.IndexByte(name, 0) >= 0:
		return "", errors.New("NUL in the name")
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("absolute name: %w", ErrOutside)
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == ".." {
			return "", fmt.Errorf(`".." in the name: %w`, ErrOutside)
		}
	}
	return path.Clean(name), nil
}
