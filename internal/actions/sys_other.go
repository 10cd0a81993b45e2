//go:build !linux

package actions

import (
	"errors"
	"os"
	"syscall"
)

// The actions run on Linux only; elsewhere the package builds (so the
// agent's code compiles everywhere) and every system call fails.
const (
	powerRestart    = 0x01234567
	powerOff        = 0x4321fedc
	powerKexec      = 0x45584543
	kexecNoInitrd   = 0x4
	mountBind       = 0x1000
	mountRecursive  = 0x4000
	unmountDetach   = 0x2
	errBusy         = syscall.EBUSY
	errPerm         = syscall.EPERM
	errNoPartitions = syscall.EINVAL
)

var errUnsupported = errors.New("native actions need Linux")

func setSystemDefaults(cfg *Config) {
	if cfg.Mount == nil {
		cfg.Mount = func(string, string, string, uintptr, string) error { return errUnsupported }
	}
	if cfg.Unmount == nil {
		cfg.Unmount = func(string, int) error { return errUnsupported }
	}
	if cfg.Power == nil {
		cfg.Power = func(int) error { return errUnsupported }
	}
	if cfg.KexecLoad == nil {
		cfg.KexecLoad = func(int, int, string, int) error { return errUnsupported }
	}
	if cfg.RereadPartitions == nil {
		cfg.RereadPartitions = func(*os.File) error { return errUnsupported }
	}
	if cfg.Sync == nil {
		cfg.Sync = func() {}
	}
}

func startWriteback(*os.File, int64, int64) {}
func waitWriteback(*os.File, int64, int64)  {}

func blockDeviceSize(*os.File) (int64, error) { return 0, errUnsupported }
