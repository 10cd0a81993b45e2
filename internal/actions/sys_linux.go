package actions

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Linux numbers the actions use, named.
const (
	// reboot(2) commands for Config.Power.
	powerRestart  = unix.LINUX_REBOOT_CMD_RESTART
	powerOff      = unix.LINUX_REBOOT_CMD_POWER_OFF
	powerKexec    = unix.LINUX_REBOOT_CMD_KEXEC
	kexecNoInitrd = unix.KEXEC_FILE_NO_INITRAMFS

	// mount(2) and umount2(2) flags.
	mountBind      = unix.MS_BIND
	mountRecursive = unix.MS_REC
	unmountDetach  = unix.MNT_DETACH

	// errBusy is what umount2 and BLKRRPART return while the device is
	// in use; errPerm what a filesystem without owners or modes (vfat)
	// returns for chown and chmod it cannot store.
	errBusy = unix.EBUSY
	errPerm = unix.EPERM
	// errNoPartitions is what BLKRRPART returns for a device that cannot
	// hold partitions (a partition, a loop device without partscan).
	errNoPartitions = unix.EINVAL
)

// setSystemDefaults fills the system functions of cfg that are nil with
// the real system calls.
func setSystemDefaults(cfg *Config) {
	if cfg.Mount == nil {
		cfg.Mount = unix.Mount
	}
	if cfg.Unmount == nil {
		cfg.Unmount = unix.Unmount
	}
	if cfg.Power == nil {
		cfg.Power = unix.Reboot
	}
	if cfg.KexecLoad == nil {
		cfg.KexecLoad = kexecFileLoad
	}
	if cfg.RereadPartitions == nil {
		cfg.RereadPartitions = rereadPartitions
	}
	if cfg.Sync == nil {
		cfg.Sync = unix.Sync
	}
}

// rereadPartitionsTries and rereadPartitionsPause bound how long
// BLKRRPART is retried while the kernel reports the disk busy (a
// partition of it still open for a moment after the write).
const (
	rereadPartitionsTries = 10
	rereadPartitionsPause = 100 * time.Millisecond
)

// rereadPartitions is the BLKRRPART ioctl on disk.
func rereadPartitions(disk *os.File) error {
	var err error
	for range rereadPartitionsTries {
		err = unix.IoctlSetInt(int(disk.Fd()), unix.BLKRRPART, 0)
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(rereadPartitionsPause)
	}
	if err != nil {
		return &os.PathError{Op: "ioctl BLKRRPART", Path: disk.Name(), Err: err}
	}
	return nil
}

// startWriteback asks the kernel to start writing [off, off+n) of f to
// its device now, without waiting, and to drop [0, done) from the page
// cache once written: the final fsync then has little left to do, and a
// machine whose root is in RAM does not fill it with dirty image pages.
// Errors are ignored: this is only a hint.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// waitWriteback waits for [off, off+n) of f to reach the device and
// drops it from the page cache. Errors are ignored: fsync reports them.
func waitWriteback(f *os.File, off, n int64) {
	fd := int(f.Fd())
	_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	_ = unix.Fadvise(fd, off, n, unix.FADV_DONTNEED)
}

// blockDeviceSize is the size of the block device f in bytes.
func blockDeviceSize(f *os.File) (int64, error) {
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	_, err = f.Seek(0, io.SeekStart)
	return n, err
}
