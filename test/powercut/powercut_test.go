// Package powercut proves that Anvil's store (internal/store/bolt) and
// audit log (internal/audit) keep every acknowledged write through a power
// cut, which a killed process cannot show: SIGKILL leaves the kernel's
// page cache to finish the writes, so a missing fsync goes unnoticed.
//
// TestPowerCut boots a VM (QEMU, TCG) whose /init is ./writer, writing to
// the real store and audit log on an ext4 disk. The disk is served by an
// NBD server inside the test with a volatile write cache: a write reaches
// the "media" only with the guest's next flush. At random moments during
// the writes the test cuts the power: it takes the media plus a random
// choice of the cached writes (none, all, each write or each sector by a
// coin), as a disk losing power could leave it, and notes how many writes
// the guest had acknowledged by then. Each image is then mounted by the
// host's kernel (which replays the ext4 journal, as after a real cut),
// checked with bolt.CheckFile and e2fsck, opened with bolt.Open as `anvil
// serve` opens it and with audit.Open. Every write acknowledged before
// the cut must be there with its version and value, its audit record too,
// and the store must be a snapshot: each name exactly as the writes up to
// the file's revision counter left it.
// The same run also cuts a lying disk that acknowledges flushes it does
// not perform, and the test must find lost writes there: proof that it can
// fail.
//
// It needs root (loop mounts), QEMU, e2fsprogs and the Debian kernel
// (scripts/fetch-kernel.sh); `make test` installs them. In CI it fails
// when something is missing; elsewhere it skips. The tests of the harness
// itself (the NBD server, the disk model, the judge) need nothing.
package powercut

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/bootenv"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/store/storetest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// repoRoot is the module root, two levels up from this package.
var repoRoot = filepath.Join("..", "..")

const (
	// cuts is how many power cuts TestPowerCut makes (the issue asks for
	// at least 100); cutsShort under -short.
	cuts      = 100
	cutsShort = 20
	// meanGap is the mean number of NBD requests between two cuts.
	meanGap = 100
	// lyingCuts of the cuts, evenly spread, are also taken of the lying
	// disk, which performs one flush in lieEvery.
	lyingCuts = 10
	lieEvery  = 16
	// diskSize is the guest's disk.
	diskSize = 64 << 20
	// writers is how many goroutines write in the guest.
	writers = 8
	// vmTimeout bounds the VM's run under TCG on a busy machine; no
	// assertion depends on it.
	vmTimeout = 10 * time.Minute
)

// requireLab fails (in CI) or skips (elsewhere) unless the test can run.
func requireLab(t *testing.T) {
	t.Helper()
	for _, b := range []struct{ name, pkg string }{
		{"qemu-system-x86_64", "qemu-system-x86"}, {"mkfs.ext4", "e2fsprogs"}, {"e2fsck", "e2fsprogs"},
		{"mount", "mount"}, {"umount", "mount"},
	} {
		testtool.RequireBinary(t, b.name, b.pkg)
	}
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		missing = append(missing, "loop devices (/dev/loop-control)")
	}
	if len(missing) > 0 {
		testtool.Need(t, "%s: the host's kernel mounts each crash image on a loop device, replaying its journal",
			strings.Join(missing, " and "))
	}
}

// buildVM builds the writer and its boot environment (Debian's kernel, an
// initramfs with the writer as /init and the virtio disk and ext4
// modules) and returns the kernel and initramfs.
func buildVM(t *testing.T, dir string) (kernel, initrd string) {
	t.Helper()
	kdir := filepath.Join(repoRoot, ".cache", "kernel")
	if out, err := exec.Command(filepath.Join(repoRoot, "scripts", "fetch-kernel.sh"), kdir).CombinedOutput(); err != nil {
		testtool.Need(t, "Debian's kernel (scripts/fetch-kernel.sh, make kernel): %v\n%s", err, out)
	}
	writer := filepath.Join(dir, "writer")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", writer, "./test/powercut/writer")
	cmd.Dir, cmd.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build writer: %v\n%s", err, out)
	}
	res, err := bootenv.Build(t.Context(), bootenv.Config{
		OutDir: filepath.Join(dir, "bootenv"), Kernel: filepath.Join(kdir, "vmlinuz"), Modules: filepath.Join(kdir, "modules"),
		Anvil: writer, Busybox: bootenv.BusyboxNone, NoDefaultModules: true,
		Include:     []string{"virtio_pci", "virtio_blk", "crc32c_generic", "ext4"},
		Compression: bootenv.CompressNone, ModuleCompression: bootenv.ModuleCompressNone,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Kernel, res.Initramfs
}

// newDisk makes an empty ext4 filesystem as mkfs.ext4 makes one for a
// small disk, with 4 KiB blocks (the page size bbolt writes) and nothing
// left for the kernel to initialise lazily in the background.
func newDisk(t *testing.T, dir string) []byte {
	t.Helper()
	p := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, diskSize); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0", p).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ack is one write the guest acknowledged.
type ack struct {
	seq            int // 1, 2, … in the order the lines came
	op, key, token string
	rev            uint64 // the resourceVersion of a create or update; 0 for a delete
	present        bool   // the object exists after the write
}

// history is every acknowledged write, in order.
type history struct {
	acks  []ack
	byKey map[string][]ack
}

// powerCut is one cut: how many acknowledgements the test had read when
// it happened, and what the disks held.
type powerCut struct {
	n       int
	request int64 // NBD requests before it
	acks    int
	honest  crashImage
	lying   *crashImage // lyingCuts of them
}

// imageState is what one crash image holds, as the store and the audit
// log read it after the host's kernel replayed the journal.
type imageState struct {
	problems []string // the image is damaged: it does not mount, the store does not open, …
	revision uint64
	hardware map[string]model.Object
	audit    map[string]bool // tokens of the records in the audit log
	torn     int             // audit lines that do not parse
}

// verdict is an image judged against the writes acknowledged before its cut.
type verdict struct {
	checked   int      // names with an acknowledged write
	lost      []string // acknowledged writes the store does not hold
	auditLost int      // acknowledged writes without their audit record
	problems  []string
}

func (v verdict) failed() bool { return len(v.lost) > 0 || v.auditLost > 0 || len(v.problems) > 0 }

func TestPowerCut(t *testing.T) {
	requireLab(t)
	start := time.Now()
	want := cuts
	if testing.Short() {
		want = cutsShort
	}
	work := t.TempDir()
	kernel, initrd := buildVM(t, work)
	disk := newVolatileDisk(newDisk(t, work), lieEvery)
	built := time.Now()
	var ready, stopped time.Time // set by the console reader and the main loop
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (cut moments and which cached writes survive)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	// The guest's console: marked lines in, "stop" out.
	var (
		mu       sync.Mutex
		hist     = &history{byKey: map[string][]ack{}}
		acked    atomic.Int64
		console  []string
		guestErr = make(chan string, 1)
		done     = make(chan int, 1)
	)
	readConsole := func(r io.Reader) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			mu.Lock()
			console = append(console, line)
			mu.Unlock()
			rest, ok := strings.CutPrefix(line, "POWERCUT ")
			if !ok {
				continue
			}
			f := append(strings.Fields(rest), "")
			switch {
			case f[0] == "ack":
				a, err := parseAck(f[:len(f)-1])
				mu.Lock()
				if err == nil && a.seq != len(hist.acks)+1 {
					err = fmt.Errorf("ack %d after %d: the console lost a line", a.seq, len(hist.acks))
				}
				if err == nil {
					hist.acks = append(hist.acks, a)
					hist.byKey[a.key] = append(hist.byKey[a.key], a)
				}
				mu.Unlock()
				if err != nil {
					sendOnce(guestErr, fmt.Sprintf("%v: %q", err, line))
					continue
				}
				acked.Store(int64(a.seq))
			case f[0] == "done":
				n, _ := strconv.Atoi(strings.TrimPrefix(f[1], "acks="))
				done <- n
			case f[0] == "error":
				sendOnce(guestErr, rest)
			default:
				if f[0] == "ready" {
					mu.Lock()
					ready = time.Now()
					mu.Unlock()
				}
				t.Logf("guest: %s", rest)
			}
		}
	}

	// The NBD server; the cuts happen between its requests.
	sock := filepath.Join(work, "nbd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cutc := make(chan powerCut, want)
	stop := make(chan struct{})
	var requests int64
	next := int64(1 + rng.IntN(2*meanGap))
	var taken atomic.Int64 // read by the main goroutine's messages
	srv := &nbdServer{disk: disk, before: func(uint16) {
		requests++
		if int(taken.Load()) >= want || requests < next {
			return
		}
		// The acknowledgements first, then the media: every ack counted
		// was written after its flush, which this goroutine performed
		// before now.
		a := int(acked.Load())
		if a == 0 {
			return // the writes have not started
		}
		n := int(taken.Add(1))
		c := powerCut{n: n, request: requests, acks: a,
			honest: disk.crash(false, crashModes[rng.IntN(len(crashModes))], rng)}
		if n%(want/lyingCuts) == 0 {
			img := disk.crash(true, crashNone, rng)
			c.lying = &img
		}
		cutc <- c
		next = requests + 1 + int64(rng.IntN(2*meanGap))
		if n == want {
			close(stop)
		}
	}}
	served := make(chan error, 1)
	go func() {
		defer close(cutc)
		conn, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer conn.Close()
		served <- srv.serve(conn)
	}()

	ctx, cancel := context.WithTimeout(t.Context(), vmTimeout)
	defer cancel()

	// Each image is checked while the guest goes on writing, in memory if
	// it can be: the checks' fsyncs and the unmount's writeback then cost
	// nothing.
	scratch := work
	if d, err := os.MkdirTemp("/dev/shm", "anvil-powercut-"); err == nil {
		scratch = d
		defer os.RemoveAll(d)
	}
	type checked struct {
		cut           powerCut
		honest, lying imageState
	}
	results := make([]checked, want) // by cut number - 1
	var inspecting time.Duration
	verified := make(chan struct{})
	// One checker only: a process another goroutine forks holds copies of
	// every open file until it execs, and one of those in a crash image
	// would make its unmount fail as busy.
	go func() {
		defer close(verified)
		for c := range cutc {
			if ctx.Err() != nil {
				continue // the test is failing: drain
			}
			t0 := time.Now()
			r := checked{cut: c, honest: inspect(disk, c.honest, filepath.Join(scratch, fmt.Sprintf("cut%d", c.n)))}
			if c.lying != nil {
				r.lying = inspect(disk, *c.lying, filepath.Join(scratch, fmt.Sprintf("cut%d-lying", c.n)))
			}
			results[c.n-1] = r
			inspecting += time.Since(t0)
		}
	}()

	qemu := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-smp", "1",
		"-nodefaults", "-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
		"-append", fmt.Sprintf("console=ttyS0 quiet loglevel=1 panic=-1 powercut.writers=%d", writers),
		"-blockdev", "driver=nbd,node-name=disk,server.type=unix,server.path="+sock,
		// write-cache=on: the guest sees a volatile cache and flushes it.
		"-device", "virtio-blk-pci,drive=disk,write-cache=on")
	var stderr strings.Builder // read only once QEMU has been waited for
	qemu.Stderr = &stderr
	stdin, err := qemu.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := qemu.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := qemu.Start(); err != nil {
		t.Fatal(err)
	}
	consoleDone := make(chan struct{})
	go func() { readConsole(stdout); close(consoleDone) }()
	tail := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(console[max(0, len(console)-40):], "\n")
	}
	// finish stops the VM, the server and the checks, and waits for all
	// of them (nothing may outlive the test, least of all a mount).
	waited := false
	finish := func() error {
		cancel()
		ln.Close()
		<-consoleDone // QEMU is dead: its output has ended
		var err error
		if !waited {
			waited, err = true, qemu.Wait()
		}
		<-verified
		return err
	}
	defer finish()
	fail := func(format string, args ...any) {
		finish()
		t.Fatalf(format+"\n--- console (last lines) ---\n%s\n--- qemu stderr ---\n%s", append(args, tail(), stderr.String())...)
	}

	var guestAcks int
	var acksAtStop int64
	waitDone := true
	for waitDone {
		select {
		case <-stop:
			stop, stopped, acksAtStop = nil, time.Now(), acked.Load()
			if _, err := io.WriteString(stdin, "stop\n"); err != nil {
				fail("telling the guest to stop: %v", err)
			}
		case guestAcks = <-done:
			waitDone = false
		case msg := <-guestErr:
			fail("guest: %s", msg)
		case <-consoleDone:
			fail("the VM ended before the writer was done (%d of %d cuts taken)", taken.Load(), want)
		case <-ctx.Done():
			fail("the VM did not finish in %s (%d of %d cuts taken)", vmTimeout, taken.Load(), want)
		}
	}
	// The guest powers off by itself now; QEMU's output ends when it exits.
	select {
	case <-consoleDone:
	case <-ctx.Done():
		fail("the VM did not power off in %s", vmTimeout)
	}
	waited = true
	if err := qemu.Wait(); err != nil {
		fail("qemu: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("NBD server: %v", err)
	}
	ended := time.Now()
	<-verified

	mu.Lock()
	defer mu.Unlock()
	if guestAcks != len(hist.acks) {
		t.Fatalf("the guest acknowledged %d writes; the console carried %d", guestAcks, len(hist.acks))
	}
	if n := int(taken.Load()); n != want {
		t.Fatalf("%d cuts taken; want %d", n, want)
	}

	// Every image against the whole history: what was acknowledged before
	// the cut must be there; what came after may or may not be.
	var (
		honest, lying       tally
		modes               = map[string]int{}
		minAcks, maxAcks    = -1, 0
		droppedWrites, torn int
	)
	for _, r := range results {
		v := judge(r.honest, hist, r.cut.acks)
		honest.add(v)
		modes[r.cut.honest.mode]++
		if minAcks < 0 || r.cut.acks < minAcks {
			minAcks = r.cut.acks
		}
		maxAcks = max(maxAcks, r.cut.acks)
		droppedWrites += r.cut.honest.lost
		torn += r.honest.torn
		if v.failed() {
			t.Errorf("cut %d (request %d, %s, %d cached writes dropped, %d writes acknowledged): %d acknowledged writes lost %q, %d audit records lost, problems %q",
				r.cut.n, r.cut.request, r.cut.honest.mode, r.cut.honest.lost, r.cut.acks, len(v.lost), first(v.lost, 5), v.auditLost, first(v.problems, 5))
		}
		if r.cut.lying != nil {
			lv := judge(r.lying, hist, r.cut.acks)
			lying.add(lv)
			if len(lv.problems) > 0 {
				t.Logf("lying disk, cut %d: %q", r.cut.n, first(lv.problems, 3))
			}
		}
	}
	t.Logf("%d power cuts (crash modes %v; %d cached writes dropped in all), each after %d to %d of %d acknowledged writes, %d names checked in all: "+
		"%d cuts failed, %d acknowledged writes lost, %d audit records lost, %d cuts with other problems; %d torn audit lines",
		len(results), modes, droppedWrites, minAcks, maxAcks, guestAcks, honest.checked,
		honest.failed, honest.lost, honest.auditLost, honest.problems, torn)
	t.Logf("disk: %d writes, %d flushes, %d FUA writes", disk.writes, disk.flushes, disk.fuaWrites)
	sec := func(a, b time.Time) string { return b.Sub(a).Round(100 * time.Millisecond).String() }
	t.Logf("time: %s in all; build %s, boot to the first write %s, writes until the last cut %s (%.1f acknowledged writes/s), "+
		"to the end %s, then checks %s more (%s checking %d images)", sec(start, time.Now()), sec(start, built), sec(built, ready),
		sec(ready, stopped), float64(acksAtStop)/stopped.Sub(ready).Seconds(), sec(stopped, ended),
		sec(ended, time.Now()), inspecting.Round(100*time.Millisecond), honest.images+lying.images)
	// The test can fail: a disk that acknowledges flushes it does not
	// perform loses acknowledged writes, and the same checks see it.
	t.Logf("lying disk (performs 1 flush in %d): %d of %d images failed: %d acknowledged writes lost, %d audit records lost, %d with other problems",
		lieEvery, lying.failed, lying.images, lying.lost, lying.auditLost, lying.problems)
	if lying.lost+lying.auditLost == 0 {
		t.Errorf("no image of the lying disk lost an acknowledged write: the checks cannot see a loss")
	}
}

// tally sums verdicts.
type tally struct {
	images, failed, checked, lost, auditLost, problems int
}

func (tl *tally) add(v verdict) {
	tl.images++
	tl.checked += v.checked
	tl.lost += len(v.lost)
	tl.auditLost += v.auditLost
	if len(v.problems) > 0 {
		tl.problems++
	}
	if v.failed() {
		tl.failed++
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func sendOnce(c chan string, s string) {
	select {
	case c <- s:
	default:
	}
}

// parseAck parses the fields of "ack SEQ OP KEY RV TOKEN CRC".
func parseAck(f []string) (ack, error) {
	if len(f) != 7 {
		return ack{}, errors.New("malformed ack")
	}
	if crc := fmt.Sprintf("%08x", crc32.ChecksumIEEE([]byte(strings.Join(f[1:6], " ")))); crc != f[6] {
		return ack{}, errors.New("ack line mangled (CRC)")
	}
	seq, err := strconv.Atoi(f[1])
	if err != nil || seq < 1 {
		return ack{}, errors.New("malformed ack sequence number")
	}
	a := ack{seq: seq, op: f[2], key: f[3], token: f[5]}
	switch a.op {
	case storetest.OpCreate, storetest.OpUpdate:
		if a.rev, err = strconv.ParseUint(f[4], 10, 64); err != nil || a.rev == 0 {
			return ack{}, errors.New("malformed ack resourceVersion")
		}
		a.present = true
	case storetest.OpDelete:
	default:
		return ack{}, errors.New("malformed ack op")
	}
	return a, nil
}

// inspect mounts img (the host's kernel replays the journal), reads the
// store and the audit log as the server would open them, unmounts and
// runs e2fsck. dir is its own scratch directory.
func inspect(disk *volatileDisk, img crashImage, dir string) (st imageState) {
	problem := func(format string, args ...any) { st.problems = append(st.problems, fmt.Sprintf(format, args...)) }
	if err := os.MkdirAll(filepath.Join(dir, "mnt"), 0o700); err != nil {
		problem("%v", err)
		return st
	}
	defer os.RemoveAll(dir)
	raw := filepath.Join(dir, "disk.raw")
	if err := disk.writeImage(img, raw); err != nil {
		problem("write image: %v", err)
		return st
	}
	mnt := filepath.Join(dir, "mnt")
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop", raw, mnt).CombinedOutput(); err != nil {
		problem("mount: %v: %s", err, strings.TrimSpace(string(out)))
		return st
	}
	readStore(&st, filepath.Join(mnt, "anvil.db"), problem)
	readAudit(&st, filepath.Join(mnt, "audit", "audit.log"), problem)
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		problem("umount: %v: %s", err, strings.TrimSpace(string(out)))
		// Detach it all the same: nothing of the test may stay mounted,
		// and removing dir must not reach into the image.
		if out, err := exec.Command("umount", "--lazy", mnt).CombinedOutput(); err != nil {
			problem("umount --lazy: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return st
	}
	if out, err := exec.Command("e2fsck", "-fn", raw).CombinedOutput(); err != nil {
		problem("e2fsck -fn: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return st
}

// readStore checks the store file, then opens it as `anvil serve` does
// (which writes to it) and checks the store serves what the file holds.
func readStore(st *imageState, path string, problem func(string, ...any)) {
	c, err := bolt.CheckFile(path)
	if err != nil {
		problem("%v", err)
		return
	}
	st.revision, st.hardware = c.Revision, c.Objects[model.KindHardware]
	s, err := bolt.Open(path, bolt.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		problem("%v", err)
		return
	}
	defer func() {
		if err := s.Close(); err != nil {
			problem("close store: %v", err)
		}
	}()
	objs, rv, err := s.List(context.Background(), model.KindHardware, store.ListOptions{})
	if err != nil {
		problem("list: %v", err)
		return
	}
	if len(objs) != len(st.hardware) || rv != strconv.FormatUint(st.revision, 10) {
		problem("the store lists %d Hardware at %s; the file holds %d at %d", len(objs), rv, len(st.hardware), st.revision)
	}
	for _, o := range objs {
		m := o.GetObjectMeta()
		if f := st.hardware[m.Key()]; f == nil || f.GetObjectMeta().ResourceVersion != m.ResourceVersion {
			problem("the store serves %s at %s; the file holds %v", m.Key(), m.ResourceVersion, f)
		}
	}
}

// readAudit opens the audit log as `anvil serve` does, reads every
// record, and checks it takes a new one.
func readAudit(st *imageState, path string, problem func(string, ...any)) {
	l, err := audit.Open(path)
	if err != nil {
		problem("%v", err)
		return
	}
	defer l.Close()
	recs, err := l.List(audit.Filter{})
	if err != nil {
		problem("audit list: %v", err)
		return
	}
	st.audit, st.torn = map[string]bool{}, l.Corrupt()
	for _, r := range recs {
		st.audit[r.Message] = true
	}
	// Appends serialise and sync one by one: a cut can tear at most the
	// record being written.
	if st.torn > 1 {
		problem("%d audit lines do not parse; a cut may tear one", st.torn)
	}
	if err := l.Append(audit.Record{Time: time.Now().UTC(), Subject: "powercut-check", Procedure: "after-cut", Outcome: "ok"}); err != nil {
		problem("append after the cut: %v", err)
		return
	}
	again, err := l.List(audit.Filter{})
	if err != nil || len(again) != len(recs)+1 || again[len(again)-1].Subject != "powercut-check" {
		problem("after the cut, an appended record does not read back last (%d records before, %d after, %v)", len(recs), len(again), err)
	}
}

// judge compares an image with the history of writes, the first acks of
// which were acknowledged before its cut. Two rules:
//
// Acknowledged means kept. Each name holds its last write acknowledged
// before the cut, or a later one; the revision counter is at or above
// every acknowledged revision; every acknowledged write has its audit
// record.
//
// A store file is a snapshot. bbolt commits whole transactions and the
// revision counter is in each, so each name holds exactly what its last
// write at or below the counter left. A delete's revision is not
// reported, only that it is above the write before it, so a name whose
// delete may be at or below the counter may hold either.
func judge(st imageState, h *history, acks int) verdict {
	v := verdict{problems: st.problems}
	if len(st.problems) > 0 {
		return v
	}
	var maxRV uint64
	for _, a := range h.acks[:acks] {
		if !st.audit[a.token] {
			v.auditLost++
		}
		maxRV = max(maxRV, a.rev)
	}
	r := st.revision
	if r < maxRV {
		v.problems = append(v.problems, fmt.Sprintf("revision counter %d below the acknowledged revision %d", r, maxRV))
	}
	for key, writes := range h.byKey {
		// writes[:i] were acknowledged before the cut.
		i, _ := slices.BinarySearchFunc(writes, acks+1, func(a ack, seq int) int { return a.seq - seq })
		obj, present := st.hardware[key]
		// holds reports whether the image holds what writes[j] left.
		holds := func(j int) bool {
			a := writes[j]
			if !a.present || !present {
				return a.present == present
			}
			return obj.GetObjectMeta().ResourceVersion == strconv.FormatUint(a.rev, 10) && storetest.CheckChurnValue(obj, a.token) == nil
		}
		// mayBeIn reports whether writes[j] may be at or below the counter.
		mayBeIn := func(j int) bool {
			if writes[j].present {
				return writes[j].rev <= r
			}
			return j > 0 && writes[j-1].rev < r // a delete follows its name's create
		}
		if i > 0 {
			v.checked++
			kept := false
			for j := i - 1; j < len(writes) && !kept; j++ {
				kept = holds(j) && (j == i-1 || mayBeIn(j))
			}
			if !kept {
				a := writes[i-1]
				v.lost = append(v.lost, fmt.Sprintf("%s: acknowledged %s %s (rv %d), holds %s", key, a.op, a.token, a.rev, held(obj, present)))
				continue
			}
		}
		last := -1 // the last write the counter covers
		for j := range writes {
			if !mayBeIn(j) {
				break
			}
			last = j
		}
		switch {
		case last < 0 && !present:
		case last >= 0 && holds(last):
		case last > 0 && !writes[last].present && holds(last-1): // its delete may not be in
		default:
			want := "nothing"
			if last >= 0 {
				want = writes[last].op + " " + writes[last].token
			}
			v.problems = append(v.problems, fmt.Sprintf("%s holds %s; at revision %d it holds what %s left", key, held(obj, present), r, want))
		}
	}
	for key := range st.hardware {
		if h.byKey[key] == nil {
			v.problems = append(v.problems, key+" is stored but was never written")
		}
	}
	return v
}

// held describes what an image holds for a name.
func held(obj model.Object, present bool) string {
	if !present {
		return "nothing"
	}
	m := obj.GetObjectMeta()
	return fmt.Sprintf("rv %s (%s)", m.ResourceVersion, m.Labels[storetest.ChurnLabel])
}
