//go:build linux

package kmod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SyscallLoader loads modules into the running kernel: finit_module(2) on
// the file, or init_module(2) on the decompressed image of a .ko.xz,
// .ko.zst or .ko.gz. EEXIST (already loaded) is success. It needs
// CAP_SYS_MODULE. The zero value is ready to use.
type SyscallLoader struct {
	// Params are the module parameters passed to every module ("" for
	// none).
	Params string
}

// Load loads the module file at path.
func (l SyscallLoader) Load(path string) error {
	var err error
	if compression(path) == "" {
		var f *os.File
		if f, err = os.Open(path); err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), l.Params, 0)
		f.Close()
	} else {
		var image []byte
		if image, err = ReadModule(path); err != nil {
			return err
		}
		err = unix.InitModule(image, l.Params)
	}
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load %s: %w", filepath.Base(path), err)
	}
	return nil
}

// RunningDir returns the module directory of the running kernel:
// /lib/modules/RELEASE, RELEASE from uname(2).
func RunningDir() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return filepath.Join(ModulesRoot, unix.ByteSliceToString(u.Release[:])), nil
}
