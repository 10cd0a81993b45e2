package actions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// image2disk defaults and limits, as Tinkerbell's image2disk has them.
const (
	defaultRetryMinutes     = 10
	maxRetryMinutes         = 24 * 60
	defaultProgressInterval = 3
	maxProgressInterval     = 3600
)

// writebackChunk is how far image2disk lets the page cache run ahead of
// the disk: every chunk written is handed to the disk at once
// (startWriteback), and the chunk before it waited for and dropped from
// the cache (waitWriteback).
const writebackChunk = 32 << 20

// image2disk streams IMG_URL, decompressed when COMPRESSED, onto
// DEST_DISK, verifies CHECKSUM if set, then flushes the disk and has the
// kernel re-read its partition table.
func (c *Catalog) image2disk(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	imgURL, err := e.required("IMG_URL")
	if err != nil {
		return Result{}, fmt.Errorf("image2disk: %w", err)
	}
	dest, err := e.required("DEST_DISK")
	if err != nil {
		return Result{}, fmt.Errorf("image2disk: %w", err)
	}
	compressed, err := e.boolean("COMPRESSED", false)
	if err != nil {
		return Result{}, fmt.Errorf("image2disk: %w", err)
	}
	want, err := e.checksum("CHECKSUM")
	if err != nil {
		return Result{}, fmt.Errorf("image2disk: %w", err)
	}
	retryFor, err := retryDuration(e)
	if err != nil {
		return Result{}, fmt.Errorf("image2disk: %w", err)
	}
	interval, err := e.integer("PROGRESS_INTERVAL_SECONDS", defaultProgressInterval, 1, maxProgressInterval)
	if err != nil {
		return Result{}, fmt.Errorf("image2disk: %w", err)
	}
	err = c.streamToDisk(ctx, out, streamJob{
		url:        imgURL,
		dest:       dest,
		compressed: compressed,
		want:       want,
		retryFor:   retryFor,
		interval:   time.Duration(interval) * time.Second,
	})
	if err != nil {
		return Result{}, fmt.Errorf("image2disk: %w", err)
	}
	return Result{}, nil
}

// retryDuration reads RETRY_ENABLED and RETRY_DURATION_MINUTES: how long
// a fetch may keep retrying; 0 when retries are off.
func retryDuration(e env) (time.Duration, error) {
	on, err := e.boolean("RETRY_ENABLED", false)
	if err != nil {
		return 0, err
	}
	minutes, err := e.integer("RETRY_DURATION_MINUTES", defaultRetryMinutes, 1, maxRetryMinutes)
	if err != nil || !on {
		return 0, err
	}
	return time.Duration(minutes) * time.Minute, nil
}

// streamJob is one image2disk run.
type streamJob struct {
	url        string
	dest       string
	compressed bool
	want       *checksum
	retryFor   time.Duration
	interval   time.Duration
}

// streamToDisk does image2disk's work. Nothing is written to the
// destination until the image has answered and its format is known.
func (c *Catalog) streamToDisk(parent context.Context, out Output, j streamJob) error {
	// ctx is cancelled when the stream fails, so that a decoder goroutine
	// blocked on the network returns before the decoder is closed.
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	disk, isBlock, err := openDestination(j.dest)
	if err != nil {
		return err
	}
	defer disk.Close()

	opts := fetchOpts{retryFor: j.retryFor}
	if j.want != nil {
		opts.hash = j.want.newHash()
	}
	src, err := c.startFetch(ctx, out, j.url, opts)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", j.url, err)
	}
	defer src.Close()

	head := make([]byte, magicLen)
	n, err := io.ReadFull(src, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return err
	}
	head = head[:n]
	if n == 0 {
		return fmt.Errorf("%s is empty (0 bytes): nothing written", j.url)
	}
	f, how := formatRaw, "COMPRESSED is false"
	if j.compressed {
		if f, how, err = detect(head, j.url); err != nil {
			return fmt.Errorf("%s: %w", j.url, err)
		}
	} else if g := sniff(head); g != formatRaw {
		linef(out, "warning: %s starts like a %s stream but COMPRESSED is false: writing it as it is", j.url, g)
	}
	size := src.Size()
	if isBlock && f == formatRaw && size > 0 {
		if dsize, err := blockDeviceSize(disk); err == nil && size > dsize {
			return fmt.Errorf("%s is %d bytes, larger than %s (%d bytes): nothing written", j.url, size, j.dest, dsize)
		}
	}
	linef(out, "writing %s (%s, by %s; %s) to %s", j.url, f, how, sizeText(size), j.dest)

	if !isBlock {
		if err := disk.Truncate(0); err != nil {
			return err
		}
	}
	dec, err := newDecoder(f, io.MultiReader(bytes.NewReader(head), src))
	if err != nil {
		return fmt.Errorf("%s: %s: %w (at byte %d)", j.url, f, err, src.Fetched())
	}
	start := c.cfg.Clock.Now()
	w := newDiskWriter(disk, c.cfg.WriteBuffer)
	stop := c.reportProgress(out, j.interval, func() int64 { return size }, src.Fetched, w.Written)
	rerr := w.copyFrom(ctx, dec)
	ok := rerr == nil && !w.failed.Load()
	if !ok {
		cancel()
	}
	// Close waits for the decoder's goroutines: from here on, only this
	// goroutine reads src.
	dec.Close()
	if ok {
		// Bytes after the end of the compressed stream: read them so
		// that the checksum covers the whole file, and say so.
		if extra, err := io.Copy(io.Discard, src); err != nil {
			rerr = err
		} else if extra > 0 {
			linef(out, "warning: %d bytes after the end of the %s stream were ignored", extra, f)
		}
	}
	werr := w.close()
	stop()
	out.Progress(Progress{Bytes: src.Fetched(), TotalBytes: max(size, 0), Written: w.Written(),
		BytesPerSec: rate(src.Fetched(), c.cfg.Clock.Now().Sub(start))})

	switch {
	case parent.Err() != nil:
		return fmt.Errorf("stopped at byte %d%s of %s (%d bytes written to %s): %w", src.Fetched(), src.ofSize(), j.url, w.Written(), j.dest, context.Cause(parent))
	case werr != nil:
		return fmt.Errorf("writing %s: %w (after %d bytes; fetched %d bytes of %s)", j.dest, werr, w.Written(), src.Fetched(), j.url)
	case src.Err() != nil:
		return fmt.Errorf("%w (%d bytes written to %s)", src.Err(), w.Written(), j.dest)
	case rerr != nil:
		return fmt.Errorf("%s: %s data is corrupt or truncated near byte %d%s of the download (%d bytes written to %s): %w",
			j.url, f, src.Fetched(), src.ofSize(), w.Written(), j.dest, rerr)
	}

	if err := disk.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", j.dest, err)
	}
	if isBlock {
		switch err := c.cfg.RereadPartitions(disk); {
		case errors.Is(err, errNoPartitions):
			linef(out, "%s holds no partitions (a partition itself, or a device without partition support): partition table not re-read", j.dest)
		case err != nil:
			return fmt.Errorf("the image is written, but the kernel did not re-read the partition table: %w", err)
		}
	}
	took := c.cfg.Clock.Now().Sub(start)
	if j.want != nil {
		if got := opts.hash.Sum(nil); !bytes.Equal(got, j.want.sum) {
			return fmt.Errorf("CHECKSUM mismatch: %s has %s:%x, want %s; its %d bytes are written to %s, which must not be booted",
				j.url, j.want.algo, got, j.want, w.Written(), j.dest)
		}
		linef(out, "checksum %s verified", j.want)
	}
	linef(out, "wrote %d bytes to %s in %.1fs (%.1f MiB/s), from %d bytes fetched", w.Written(), j.dest,
		took.Seconds(), rate(w.Written(), took)/(1<<20), src.Fetched())
	return nil
}

// openDestination opens DEST_DISK for writing: a block device, or a
// regular file (tests, file-backed disks). It is never created: a typo
// must not fill the boot environment's memory with a file.
func openDestination(path string) (f *os.File, isBlock bool, err error) {
	f, err = os.OpenFile(path, os.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, fmt.Errorf("DEST_DISK: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("DEST_DISK: %w", err)
	}
	switch m := st.Mode(); {
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
		return f, true, nil
	case m.IsRegular():
		return f, false, nil
	}
	f.Close()
	return nil, false, fmt.Errorf("DEST_DISK %s is neither a block device nor a regular file (%s)", path, st.Mode().Type())
}

// sizeText is a size for the action's log.
func sizeText(n int64) string {
	if n < 0 {
		return "size unknown"
	}
	return fmt.Sprintf("%d bytes", n)
}

// rate is n bytes over d in bytes per second; 0 for no time.
func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// reportProgress calls out.Progress every interval until the returned
// stop is called; stop returns once no more calls can happen. total may
// change while it runs (an image pull learns it from the manifest).
func (c *Catalog) reportProgress(out Output, interval time.Duration, total, fetched, written func() int64) (stop func()) {
	ticker := c.cfg.Clock.NewTicker(interval)
	tick, stopTick := ticker.C(), ticker.Stop
	done := make(chan struct{})
	last, lastAt := int64(0), c.cfg.Clock.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-tick:
			}
			now, n := c.cfg.Clock.Now(), fetched()
			out.Progress(Progress{Bytes: n, TotalBytes: max(total(), 0), BytesPerSec: rate(n-last, now.Sub(lastAt)), Written: written()})
			last, lastAt = n, now
		}
	}()
	return func() {
		stopTick()
		close(done)
		wg.Wait()
	}
}

// diskWriter writes a stream to a disk in large writes on its own
// goroutine, so that fetching and decompressing go on while the kernel
// takes the previous buffer; it keeps the disk's writeback close behind
// (startWriteback, waitWriteback).
type diskWriter struct {
	f       *os.File
	free    chan []byte // empty buffers
	full    chan []byte // buffers to write, in order
	done    chan struct{}
	written atomic.Int64
	err     error // the first write error; read after done
	failed  atomic.Bool
}

// diskBuffers is how many buffers a diskWriter cycles: one being filled,
// one being written, one ready.
const diskBuffers = 3

func newDiskWriter(f *os.File, size int) *diskWriter {
	w := &diskWriter{
		f:    f,
		free: make(chan []byte, diskBuffers),
		full: make(chan []byte, diskBuffers),
		done: make(chan struct{}),
	}
	for range diskBuffers {
		w.free <- make([]byte, size)
	}
	go w.run()
	return w
}

// Written is how many bytes have reached the destination.
func (w *diskWriter) Written() int64 { return w.written.Load() }

func (w *diskWriter) run() {
	defer close(w.done)
	var kicked, waited int64
	for b := range w.full {
		if !w.failed.Load() {
			n, err := w.f.Write(b)
			w.written.Add(int64(n))
			if err != nil {
				w.err = explainWriteError(err)
				w.failed.Store(true)
			}
			if at := w.written.Load(); at-kicked >= writebackChunk {
				startWriteback(w.f, kicked, at-kicked)
				if kicked-waited >= writebackChunk {
					waitWriteback(w.f, waited, kicked-waited)
					waited = kicked
				}
				kicked = at
			}
		}
		w.free <- b[:cap(b)]
	}
}

// explainWriteError adds what a full disk means.
func explainWriteError(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: the image is larger than the disk", err)
	}
	return err
}

// copyFrom fills buffers from r and hands them to the writer until r
// ends (nil), r fails, the writer fails or ctx ends (errors).
func (w *diskWriter) copyFrom(ctx context.Context, r io.Reader) error {
	for {
		if w.failed.Load() {
			return nil // close reports it
		}
		var b []byte
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b = <-w.free:
		}
		n, err := fill(r, b)
		if n > 0 {
			w.full <- b[:n]
		} else {
			w.free <- b
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// fill reads from r until b is full or r returns an error, which it
// returns as is (io.EOF at the clean end).
func fill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// close waits for the queued buffers to be written and returns the
// first write error.
func (w *diskWriter) close() error {
	close(w.full)
	<-w.done
	return w.err
}
