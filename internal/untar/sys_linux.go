package untar

import (
	"archive/tar"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// mknodAt makes a device node or FIFO (a tar type flag) called name in
// the directory dir.
func mknodAt(dir *os.File, name string, typeflag byte, perm uint32, major, minor int64) error {
	var kind uint32
	switch typeflag {
	case tar.TypeChar:
		kind = unix.S_IFCHR
	case tar.TypeBlock:
		kind = unix.S_IFBLK
	case tar.TypeFifo:
		kind = unix.S_IFIFO
	default:
		return errors.ErrUnsupported
	}
	dev := unix.Mkdev(uint32(major), uint32(minor))
	if err := unix.Mknodat(int(dir.Fd()), name, kind|perm, int(dev)); err != nil {
		return &os.PathError{Op: "mknod", Path: name, Err: err}
	}
	return nil
}
