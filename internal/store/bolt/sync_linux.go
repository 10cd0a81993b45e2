package bolt

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync flushes f's data (and the size, which reading it back needs),
// without the rest of its metadata: what a log append needs to be durable.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
