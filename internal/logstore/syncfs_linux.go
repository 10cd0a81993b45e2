package logstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncDir makes every file of the directory's file system durable with one
// syncfs(2): one journal commit instead of one fsync per file, which is what
// a boot storm (thousands of machine records written each second) needs.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

const haveSyncDir = true
