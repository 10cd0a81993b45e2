package bootenv

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// Device numbers of /dev/console, which the kernel opens for init's
// standard streams before init could mount devtmpfs.
const (
	consoleMajor = 5
	consoleMinor = 1
)

// archive is the initramfs's contents before it is written: entries by
// path (no leading slash), each written once, parents before children.
type archive struct {
	entries map[string]*entry
}

type entry struct {
	mode   uint64 // type bits and permissions, as cpio wants them
	src    string // a file on disk to copy, or
	data   []byte // the contents
	target string // a symbolic link's target
	rmajor uint64 // a device's numbers
	rminor uint64
	size   int64
}

func newArchive() *archive { return &archive{entries: map[string]*entry{}} }

// clean turns a path of the archive into its canonical form: relative,
// slash-separated, no "." or "..".
func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// add puts e at name, creating missing parent directories; a name taken
// by something else than a directory is an error.
func (a *archive) add(name string, e *entry) error {
	name = clean(name)
	if name == "" {
		return fmt.Errorf("cannot add the root directory")
	}
	if prev, ok := a.entries[name]; ok {
		if prev.mode&cpio.S_IFMT == cpio.S_IFDIR && e.mode&cpio.S_IFMT == cpio.S_IFDIR {
			prev.mode = e.mode // an explicit directory wins over an implied one
			return nil
		}
		return fmt.Errorf("/%s is in the boot environment twice", name)
	}
	if dir := path.Dir(name); dir != "." {
		if p, ok := a.entries[dir]; ok && p.mode&cpio.S_IFMT != cpio.S_IFDIR {
			return fmt.Errorf("/%s: /%s is not a directory", name, dir)
		}
		if _, ok := a.entries[dir]; !ok {
			if err := a.add(dir, &entry{mode: cpio.S_IFDIR | 0o755}); err != nil {
				return err
			}
		}
	}
	a.entries[name] = e
	return nil
}

func (a *archive) dir(name string, perm uint64) error {
	return a.add(name, &entry{mode: cpio.S_IFDIR | perm})
}

func (a *archive) file(name, src string, perm uint64) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	return a.add(name, &entry{mode: cpio.S_IFREG | perm, src: src, size: fi.Size()})
}

func (a *archive) bytes(name string, data []byte, perm uint64) error {
	return a.add(name, &entry{mode: cpio.S_IFREG | perm, data: data, size: int64(len(data))})
}

func (a *archive) symlink(name, target string) error {
	return a.add(name, &entry{mode: cpio.S_IFLNK | 0o777, target: target, size: int64(len(target))})
}

func (a *archive) charDev(name string, perm, major, minor uint64) error {
	return a.add(name, &entry{mode: cpio.S_IFCHR | perm, rmajor: major, rminor: minor})
}

// tree adds the directory src at name: its directories, regular files
// (with their permissions) and symbolic links, as they are.
func (a *archive) tree(name, src string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		dst := path.Join(name, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		perm := uint64(info.Mode().Perm())
		switch {
		case d.IsDir():
			return a.dir(dst, perm)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return a.symlink(dst, target)
		case d.Type().IsRegular():
			return a.file(dst, p, perm)
		}
		return fmt.Errorf("%s: not a file, directory or symbolic link", p)
	})
}

// contentSize is the sum of the regular files' sizes.
func (a *archive) contentSize() int64 {
	var n int64
	for _, e := range a.entries {
		if e.mode&cpio.S_IFMT == cpio.S_IFREG {
			n += e.size
		}
	}
	return n
}

// names returns the paths in archive order: sorted, so parents come
// before their children and the archive is the same for the same inputs.
func (a *archive) names() []string {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// write writes the archive as a newc cpio stream to w. Every record has
// owner root, modification time 0 and its own inode number, so the output
// depends on the contents only.
func (a *archive) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := cpio.Newc.Writer(bw)
	for i, name := range a.names() {
		e := a.entries[name]
		info := cpio.Info{
			Ino: uint64(i + 1), Mode: e.mode, NLink: 1, Name: name,
			Rmajor: e.rmajor, Rminor: e.rminor,
		}
		var rec cpio.Record
		switch e.mode & cpio.S_IFMT {
		case cpio.S_IFDIR:
			info.NLink = 2
			rec = cpio.Record{Info: info}
		case cpio.S_IFLNK:
			rec = cpio.StaticRecord([]byte(e.target), info)
		case cpio.S_IFREG:
			if e.src == "" {
				rec = cpio.StaticRecord(e.data, info)
				break
			}
			f, err := os.Open(e.src)
			if err != nil {
				return err
			}
			fi, err := f.Stat()
			if err != nil {
				f.Close()
				return err
			}
			if fi.Size() != e.size {
				f.Close()
				return fmt.Errorf("%s changed size while the boot environment was built", e.src)
			}
			info.FileSize = uint64(e.size)
			rec = cpio.Record{ReaderAt: f, Info: info} // the writer closes f
		default:
			rec = cpio.Record{Info: info}
		}
		if err := cw.WriteRecord(rec); err != nil {
			return fmt.Errorf("write /%s: %w", name, err)
		}
	}
	if err := cpio.WriteTrailer(cw); err != nil {
		return err
	}
	return bw.Flush()
}
