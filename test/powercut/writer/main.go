// Command writer is the /init of test/powercut's virtual machine: it
// writes to Anvil's real store and audit log on an ext4 disk, as `anvil
// serve` does, and reports every acknowledged write on the console, so
// that the test can cut the power under it and check that nothing it
// reported was lost.
//
// It loads the virtio disk driver and ext4 from the modules in its
// initramfs, mounts /dev/vda on /data, opens /data/anvil.db with
// internal/store/bolt and /data/audit/audit.log with internal/audit (the
// paths and options of `anvil serve`), then runs storetest.Churn in
// powercut.writers= goroutines (kernel command line; default 8). Each
// acknowledged write is recorded in the audit log, as the API's guard
// does before it answers, and then reported as one line
//
//	POWERCUT ack SEQ OP NAMESPACE/NAME RV TOKEN CRC
//
// (RV "-" for a delete; SEQ counts the ack lines from 1, so a lost line
// shows; CRC is the CRC-32 (IEEE) of the fields before it, in hex, so a
// line mangled on the way shows too). The line is written only after the store's and the audit log's
// fsyncs have returned: whatever the test has read, the disk was told to
// keep. A line "stop" on the console (read with echo off, so that it cannot
// land in the middle of an ack line) makes the writers finish the write
// each has in flight; it then reports "POWERCUT done acks=N", closes the
// store and the log, unmounts and powers off. Anything that goes wrong is
// reported as "POWERCUT error ...".
//
// It touches nothing but its own disk and console. Called as modprobe
// (the kernel's request_module for crc32c), it answers as modprobe, like
// anvil's agent.
package main

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/kmod"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/store/storetest"
	"golang.org/x/sys/unix"
)

// Marker starts every line the test reads.
const Marker = "POWERCUT"

// The data directory's layout, as `anvil serve` has it (internal/server:
// storeFile, auditFile).
const (
	dataDir   = "/data"
	storeFile = "anvil.db"
	auditFile = "audit/audit.log"
	disk      = "vda"
)

// defaultWriters is how many goroutines write when the command line does
// not say: enough for the store's group commit to batch.
const defaultWriters = 8

func main() {
	if filepath.Base(os.Args[0]) == "modprobe" {
		os.Exit(kmod.ModprobeCommand(os.Args[1:], kmod.ProberConfig{}, os.Stderr))
	}
	for _, m := range []struct{ src, dst, fs string }{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := syscall.Mount(m.src, m.dst, m.fs, 0, ""); err != nil && err != syscall.EBUSY {
			say("error mount %s: %v", m.dst, err)
		}
	}
	if err := run(); err != nil {
		say("error %v", err)
	}
	syscall.Sync()
	time.Sleep(200 * time.Millisecond) // let the serial line drain
	_ = syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // PID 1 must not exit
}

func run() error {
	writers := defaultWriters
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "powercut.writers="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 255 {
				return fmt.Errorf("powercut.writers=%s: want 1 to 255", v)
			}
			writers = n
		}
	}
	if err := loadModules(); err != nil {
		return err
	}
	// The test relies on the guest sending flushes; a disk without a
	// volatile write cache would get none.
	wc, err := os.ReadFile("/sys/block/" + disk + "/queue/write_cache")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("/dev/"+disk, dataDir, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount /dev/%s: %w", disk, err)
	}
	say("disk write_cache=%q mount=%q", strings.TrimSpace(string(wc)), mountOptions(dataDir))

	// Stage 1 of `anvil serve`: the store, then the audit log.
	st, err := bolt.Open(filepath.Join(dataDir, storeFile), bolt.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	al, err := audit.Open(filepath.Join(dataDir, auditFile))
	if err != nil {
		return err
	}
	if err := noEcho(); err != nil {
		return err
	}
	stop := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "stop" {
				break
			}
		}
		close(stop)
	}()
	say("ready writers=%d", writers)

	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		first  error
		ackMu  sync.Mutex
		acks   int
		seed   = uint64(time.Now().UnixNano())
		record = func(w storetest.ChurnWrite) error {
			// The guard's order: the call has happened, it is audited,
			// then it is answered.
			if err := al.Append(audit.Record{Time: time.Now().UTC(), Subject: "powercut", Procedure: w.Op,
				Namespace: "default", Object: w.Key, Outcome: "ok", Message: w.Token}); err != nil {
				return err
			}
			rv := w.RV
			if rv == "" {
				rv = "-"
			}
			ackMu.Lock()
			defer ackMu.Unlock()
			acks++
			fields := fmt.Sprintf("%d %s %s %s %s", acks, w.Op, w.Key, rv, w.Token)
			say("ack %s %08x", fields, crc32.ChecksumIEEE([]byte(fields)))
			return nil
		}
	)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := storetest.Churn(st, stop, storetest.ChurnConfig{
				Prefix: "w" + strconv.Itoa(g), Writer: uint8(g),
				Rand: rand.New(rand.NewPCG(seed, uint64(g))), After: record,
			})
			if err != nil {
				errMu.Lock()
				if first == nil {
					first = err
				}
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	say("done acks=%d", acks)
	if err := st.Close(); err != nil {
		return err
	}
	if err := al.Close(); err != nil {
		return err
	}
	return syscall.Unmount(dataDir, 0)
}

// loadModules loads the disk driver and the filesystem, with what they
// need, and waits for the disk.
func loadModules() error {
	dir, err := kmod.RunningDir()
	if err != nil {
		return err
	}
	idx, err := kmod.Open(dir)
	if err != nil {
		return err
	}
	p := kmod.NewProber(kmod.ProberConfig{Index: idx})
	for _, m := range []string{"virtio_pci", "virtio_blk", "crc32c_generic", "ext4"} {
		if _, err := p.Probe(m); err != nil {
			return err
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat("/dev/" + disk); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/dev/%s did not appear", disk)
		}
	}
}

// noEcho turns the console's echo off.
func noEcho() error {
	tio, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	tio.Lflag &^= unix.ECHO | unix.ECHONL
	if err := unix.IoctlSetTermios(int(os.Stdin.Fd()), unix.TCSETS, tio); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}

// mountOptions returns the options /proc/mounts shows for dir.
func mountOptions(dir string) string {
	b, _ := os.ReadFile("/proc/mounts")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == dir {
			return f[2] + " " + f[3]
		}
	}
	return "?"
}

// say prints one marked line on the console with one write.
var sayMu sync.Mutex

func say(format string, args ...any) {
	line := fmt.Sprintf(Marker+" "+format+"\n", args...)
	sayMu.Lock()
	defer sayMu.Unlock()
	_, _ = os.Stdout.WriteString(line)
}
