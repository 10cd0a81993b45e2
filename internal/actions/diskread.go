package actions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// DiskReader is a disk open for commission-disk-read.
type DiskReader interface {
	io.ReaderAt
	io.Closer
}

// Defaults and bounds of commission-disk-read.
const (
	// defaultDiskReadMiB is how much is read at each of the three places.
	defaultDiskReadMiB = 8
	maxDiskReadMiB     = 1024
	// diskReadChunk is the size of each read; diskReadAlign what O_DIRECT
	// needs of offsets, sizes and the buffer (4 KiB covers 512-byte and
	// 4 KiB logical blocks).
	diskReadChunk = 1 << 20
	diskReadAlign = 4096
)

// diskRead reads DISK_READ_MIB (default 8) MiB from the start, the middle
// and the end of each disk, past the page cache (O_DIRECT), and fails on
// an I/O error, on a read that comes back short of the size the kernel
// gives the disk, or below DISK_READ_MIN_MBPS (default 0: no minimum).
// DISKS chooses the disks (default: every disk).
func (c *Catalog) diskRead(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	mib, err := e.integer("DISK_READ_MIB", defaultDiskReadMiB, 1, maxDiskReadMiB)
	if err != nil {
		return c.configFailure(NameCommissionDiskRead, err)
	}
	minRate, err := e.integer("DISK_READ_MIN_MBPS", 0, 0, 1<<20)
	if err != nil {
		return c.configFailure(NameCommissionDiskRead, err)
	}
	disks, err := c.disks(ctx, e)
	if err != nil {
		return c.configFailure(NameCommissionDiskRead, err)
	}
	checks := make([]check, len(disks))
	for i, d := range disks {
		checks[i] = check{name: "disk-read/" + d, run: func() (string, string, map[string]string) {
			return c.readDisk(ctx, d, mib<<20, float64(minRate))
		}}
	}
	return c.runChecks(ctx, NameCommissionDiskRead, checks, out)
}

// readDisk reads n bytes at the start, middle and end of one disk.
func (c *Catalog) readDisk(ctx context.Context, name string, n int64, minRate float64) (string, string, map[string]string) {
	sectors, err := readSysInt(c.sysPath("/sys/block/" + name + "/size"))
	if err != nil {
		return CheckFailed, fmt.Sprintf("size: %v", err), nil
	}
	size := sectors * 512 // the kernel counts 512-byte sectors, whatever the disk's
	n = min(n, size) &^ (diskReadAlign - 1)
	if n == 0 {
		return CheckFailed, fmt.Sprintf("the disk is %d bytes, too small to read", size), nil
	}
	dev := c.sysPath("/dev/" + name)
	direct := true
	f, err := c.cfg.OpenDisk(dev, os.O_RDONLY|openDirect)
	if errors.Is(err, syscall.EINVAL) {
		// O_DIRECT refused (a filesystem that has none): read through
		// the page cache, and say so.
		direct = false
		f, err = c.cfg.OpenDisk(dev, os.O_RDONLY)
	}
	if err != nil {
		return CheckFailed, fmt.Sprintf("open: %v", err), nil
	}
	defer f.Close()
	buf := alignedBuffer(diskReadChunk, diskReadAlign)
	places := []struct {
		name string
		off  int64
	}{
		{"start", 0},
		{"middle", (size/2 - n/2) &^ (diskReadAlign - 1)},
		{"end", (size - n) &^ (diskReadAlign - 1)},
	}
	start := c.cfg.Clock.Now()
	var total int64
	for _, p := range places {
		for off := p.off; off < p.off+n; {
			if err := ctx.Err(); err != nil {
				return CheckFailed, err.Error(), nil
			}
			want := min(int64(len(buf)), p.off+n-off)
			got, err := f.ReadAt(buf[:want], off)
			total += int64(got)
			if int64(got) < want {
				v := values("sizeBytes", size, "failedAtByte", off+int64(got))
				if err == nil || errors.Is(err, io.EOF) {
					return CheckFailed, fmt.Sprintf("short read at byte %d (%s): %d of %d bytes; the kernel says the disk has %d", off, p.name, got, want, size), v
				}
				return CheckFailed, fmt.Sprintf("read error at byte %d (%s): %v", off+int64(got), p.name, err), v
			}
			off += want
		}
	}
	elapsed := c.cfg.Clock.Now().Sub(start)
	rate := float64(total) / 1e6 / max(elapsed.Seconds(), time.Microsecond.Seconds())
	v := values("sizeBytes", size, "bytesRead", total, "readMBps", fmt.Sprintf("%.1f", rate), "direct", direct)
	how := "O_DIRECT"
	if !direct {
		how = "through the page cache (O_DIRECT refused)"
	}
	amount := fmt.Sprintf("%d bytes", n) // a disk smaller than DISK_READ_MIB
	if n%(1<<20) == 0 {
		amount = fmt.Sprintf("%d MiB", n>>20)
	}
	detail := fmt.Sprintf("read %s at the start, middle and end, %s: %.1f MB/s", amount, how, rate)
	if minRate > 0 && rate < minRate {
		return CheckFailed, fmt.Sprintf("%s, below the minimum of %.0f MB/s (DISK_READ_MIN_MBPS)", detail, minRate), v
	}
	return CheckPassed, detail, v
}

// alignedBuffer is n bytes whose first byte is at a multiple of align, as
// O_DIRECT needs.
func alignedBuffer(n, align int) []byte {
	b := make([]byte, n+align)
	off := 0
	if r := int(uintptrOf(b) % uintptr(align)); r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

// openDisk is Config.OpenDisk's default.
func openDisk(path string, flags int) (DiskReader, error) {
	return os.OpenFile(path, flags, 0)
}
