package actions

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"strings"
)

// Defaults of writefile's MODE and DIRMODE.
const (
	defaultFileMode fs.FileMode = 0o644
	defaultDirMode  fs.FileMode = 0o755
)

// writefile writes CONTENTS to DEST_PATH on the filesystem FS_TYPE of the
// partition DEST_DISK, owned by UID:GID with MODE; missing parent
// directories are made with DIRMODE and the same owner.
func (c *Catalog) writefile(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	var req [3]string
	for i, name := range []string{"DEST_DISK", "FS_TYPE", "DEST_PATH"} {
		v, err := e.required(name)
		if err != nil {
			return Result{}, fmt.Errorf("writefile: %w", err)
		}
		req[i] = v
	}
	dev, fstype, destPath := req[0], req[1], req[2]
	w := fileWrite{contents: s.Env["CONTENTS"], ownerless: ownerless(fstype), out: out}
	var err error
	if w.rel, err = insidePath(destPath); err != nil {
		return Result{}, fmt.Errorf("writefile: DEST_PATH: %w", err)
	}
	if w.uid, err = e.id("UID"); err != nil {
		return Result{}, fmt.Errorf("writefile: %w", err)
	}
	if w.gid, err = e.id("GID"); err != nil {
		return Result{}, fmt.Errorf("writefile: %w", err)
	}
	if w.mode, err = e.mode("MODE", defaultFileMode); err != nil {
		return Result{}, fmt.Errorf("writefile: %w", err)
	}
	if w.dirMode, err = e.mode("DIRMODE", defaultDirMode); err != nil {
		return Result{}, fmt.Errorf("writefile: %w", err)
	}

	m, err := c.mountDevice(ctx, dev, fstype)
	if err != nil {
		return Result{}, fmt.Errorf("writefile: %w", err)
	}
	err = w.into(m.dir)
	if uerr := m.unmount(); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("writefile: %s on %s: %w", destPath, dev, err)
	}
	linef(out, "wrote %d bytes to %s on %s (mode %04o, owner %d:%d)", len(w.contents), destPath, dev, unixPerm(w.mode), w.uid, w.gid)
	return Result{}, nil
}

// fileWrite is one writefile.
type fileWrite struct {
	rel           string // DEST_PATH inside the filesystem
	contents      string
	uid, gid      int
	mode, dirMode fs.FileMode
	ownerless     bool
	out           Output
}

// into writes the file into the filesystem mounted at dir: a temporary
// file next to it, flushed, then renamed over it, so a crash leaves the
// old file or the new one. Paths resolve inside dir only (os.Root): a
// symbolic link cannot lead the write out of the filesystem.
func (w *fileWrite) into(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	parent := path.Dir(w.rel)
	if err := w.mkdirs(root, parent); err != nil {
		return err
	}
	if st, err := root.Lstat(w.rel); err == nil && st.IsDir() {
		return errors.New("it is a directory")
	}
	tmp := path.Join(parent, "."+path.Base(w.rel)+".anvil-"+randomSuffix())
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = w.fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, w.rel)
	}
	if err != nil {
		root.Remove(tmp)
		return err
	}
	d, err := root.Open(parent)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// fill writes the contents, owner and mode to the temporary file f.
func (w *fileWrite) fill(f *os.File) error {
	if _, err := f.WriteString(w.contents); err != nil {
		return err
	}
	// chown before chmod: chown clears setuid and setgid.
	if err := w.tolerate(f.Chown(w.uid, w.gid), "owner %d:%d", w.uid, w.gid); err != nil {
		return err
	}
	if err := w.tolerate(f.Chmod(w.mode), "mode %04o", unixPerm(w.mode)); err != nil {
		return err
	}
	return f.Sync()
}

// mkdirs makes the missing directories of dir, each with DIRMODE and
// owned by UID:GID. Directories that exist are left as they are.
func (w *fileWrite) mkdirs(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	cur := ""
	for _, elem := range strings.Split(dir, "/") {
		cur = path.Join(cur, elem)
		err := root.Mkdir(cur, w.dirMode)
		if errors.Is(err, fs.ErrExist) {
			st, serr := root.Stat(cur)
			if serr != nil {
				return serr
			}
			if !st.IsDir() {
				return fmt.Errorf("%s is not a directory", cur)
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := w.tolerate(root.Chown(cur, w.uid, w.gid), "owner %d:%d of /%s", w.uid, w.gid, cur); err != nil {
			return err
		}
		// Mkdir's mode is cut by the umask; DIRMODE is meant as written.
		if err := w.tolerate(root.Chmod(cur, w.dirMode), "mode %04o of /%s", unixPerm(w.dirMode), cur); err != nil {
			return err
		}
	}
	return nil
}

// tolerate passes err on, except a permission error from a filesystem
// that cannot store owners and modes (vfat): that is a note in the log.
func (w *fileWrite) tolerate(err error, what string, args ...any) error {
	if err != nil && w.ownerless && errors.Is(err, errPerm) {
		linef(w.out, "note: the filesystem cannot store %s; left as it is", fmt.Sprintf(what, args...))
		return nil
	}
	return err
}

// ownerless reports whether filesystem type fstype has no Unix owners
// and modes.
func ownerless(fstype string) bool {
	switch strings.ToLower(fstype) {
	case "vfat", "fat", "msdos", "exfat", "ntfs", "ntfs3":
		return true
	}
	return false
}

// insidePath turns an absolute path inside a filesystem (DEST_PATH) into
// the relative one os.Root takes; ".." cannot climb above the top.
func insidePath(p string) (string, error) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return "", fmt.Errorf("%q names the filesystem's top directory, not a file", p)
	}
	return rel, nil
}

// unixPerm is a mode as chmod(2) bits, for messages.
func unixPerm(m fs.FileMode) uint32 {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= modeSetuid
	}
	if m&fs.ModeSetgid != 0 {
		n |= modeSetgid
	}
	if m&fs.ModeSticky != 0 {
		n |= modeSticky
	}
	return n
}

// randomSuffix is a short random name part for temporary files. It is
// not crypto/rand on purpose: early in boot, on a machine without a
// hardware random source, the kernel's random pool is not ready for seconds
// and crypto/rand waits for it (1.2 s of a QEMU install); a temporary name
// only has to differ from its neighbours'.
func randomSuffix() string {
	var b [6]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return hex.EncodeToString(b[:])
}
