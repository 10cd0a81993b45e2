package actions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/untar"
)

// archiveTypes maps ARCHIVE_TYPE to the compression around the tar.
var archiveTypes = map[string]format{
	"tar":    formatRaw,
	"targz":  formatGzip,
	"tgz":    formatGzip,
	"tarzst": formatZstd,
	"tarxz":  formatXz,
	"tarbz2": formatBzip2,
}

// maxTarTrailer is how much of a decompressed stream after the tar's end
// is hashed for TARFILE_CHECKSUM: GNU tar pads to 10 KiB records, other
// writers to 20.
const maxTarTrailer = 64 << 10

// archive2disk mounts DEST_DISK (FS_TYPE) and unpacks the tar archive at
// ARCHIVE_URL (ARCHIVE_TYPE) into DEST_PATH on it. Entries that would
// land outside DEST_PATH (absolute names, "..", links that lead out) are
// refused. TARFILE_CHECKSUM (sha256:HEX, of the file as served or, as
// upstream checks it, of the tar decompressed) is required unless
// INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION is true.
func (c *Catalog) archive2disk(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	var req [5]string
	for i, name := range []string{"ARCHIVE_URL", "ARCHIVE_TYPE", "DEST_DISK", "FS_TYPE", "DEST_PATH"} {
		v, err := e.required(name)
		if err != nil {
			return Result{}, fmt.Errorf("archive2disk: %w", err)
		}
		req[i] = v
	}
	archiveURL, archiveType, dev, fstype, destPath := req[0], strings.ToLower(req[1]), req[2], req[3], req[4]
	f, ok := archiveTypes[archiveType]
	if !ok {
		return Result{}, fmt.Errorf("archive2disk: ARCHIVE_TYPE %q is not one of tar, targz, tgz, tarzst, tarxz, tarbz2", req[1])
	}
	want, err := e.checksum("TARFILE_CHECKSUM")
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	insecure, err := e.boolean("INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION", false)
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	if want == nil && !insecure {
		return Result{}, errors.New("archive2disk: TARFILE_CHECKSUM is required (sha256:HEX), or set INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION=true")
	}
	retryFor, err := retryDuration(e)
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	interval, err := e.integer("PROGRESS_INTERVAL_SECONDS", defaultProgressInterval, 1, maxProgressInterval)
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	rel := strings.TrimPrefix(path.Clean("/"+destPath), "/")

	m, err := c.mountDevice(ctx, dev, fstype)
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	err = c.unpackURL(ctx, out, m.dir, rel, archiveURL, f, want, retryFor, time.Duration(interval)*time.Second)
	if uerr := m.unmount(); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("archive2disk: %w", err)
	}
	return Result{}, nil
}

// unpackURL fetches the archive and unpacks it into rel under dir.
func (c *Catalog) unpackURL(parent context.Context, out Output, dir, rel, archiveURL string, f format,
	want *checksum, retryFor, interval time.Duration) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if rel != "" {
		if err := root.MkdirAll(rel, defaultDirMode); err != nil {
			return fmt.Errorf("DEST_PATH: %w", err)
		}
	} else {
		rel = "."
	}
	dest, err := root.OpenRoot(rel)
	if err != nil {
		return fmt.Errorf("DEST_PATH: %w", err)
	}
	defer dest.Close()

	opts := fetchOpts{retryFor: retryFor}
	if want != nil {
		opts.hash = want.newHash()
	}
	src, err := c.startFetch(ctx, out, archiveURL, opts)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", archiveURL, err)
	}
	defer src.Close()
	dec, err := newDecoder(f, src)
	if err != nil {
		if src.Err() != nil {
			return src.Err()
		}
		return fmt.Errorf("%s: not a %s stream: %w", archiveURL, f, err)
	}
	linef(out, "unpacking %s (%s tar, %s) into /%s", archiveURL, f, sizeText(src.Size()), strings.TrimPrefix(rel, "."))

	// Upstream's archive2disk checks TARFILE_CHECKSUM against the tar as
	// unpacked (decompressed); Anvil's first checked the file as served.
	// Either matches, so templates written for either keep working.
	var tarHash hash.Hash
	var tarStream io.Reader = dec
	if want != nil {
		tarHash = want.newHash()
		tarStream = io.TeeReader(dec, tarHash)
	}
	x := &untar.Extractor{Root: dest}
	stop := c.reportProgress(out, interval, src.Size, src.Fetched, x.Written)
	xerr := x.Extract(ctx, tarStream)
	if xerr == nil && tarHash != nil {
		// The tar's own end: the zero blocks padding its last record. More
		// than a tar writer pads is not a tar's: only the served file's
		// checksum can match then.
		n, err := io.CopyN(io.Discard, tarStream, maxTarTrailer+1)
		switch {
		case n > maxTarTrailer:
			tarHash = nil
		case err != nil && err != io.EOF:
			xerr = err
		}
	}
	if xerr != nil {
		cancel()
	}
	dec.Close() // waits for its goroutines: from here on only this one reads src
	if xerr == nil {
		if _, err := io.Copy(io.Discard, src); err != nil {
			xerr = err
		}
	}
	stop()
	out.Progress(Progress{Bytes: src.Fetched(), TotalBytes: max(src.Size(), 0), Written: x.Written()})
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("stopped at byte %d%s of %s (%d entries unpacked): %w", src.Fetched(), src.ofSize(), archiveURL, x.Entries(), context.Cause(parent))
	case src.Err() != nil:
		return fmt.Errorf("%w (%d entries unpacked)", src.Err(), x.Entries())
	case xerr != nil:
		return fmt.Errorf("%s near byte %d%s of the download: %w", archiveURL, src.Fetched(), src.ofSize(), xerr)
	}
	if want != nil {
		served := opts.hash.Sum(nil)
		var tarSum []byte
		if tarHash != nil {
			tarSum = tarHash.Sum(nil)
		}
		switch {
		case bytes.Equal(served, want.sum):
			linef(out, "checksum %s verified (the file as served)", want)
		case bytes.Equal(tarSum, want.sum):
			linef(out, "checksum %s verified (the tar, decompressed)", want)
		default:
			has := fmt.Sprintf("%s:%x", want.algo, served)
			if tarSum != nil && !bytes.Equal(tarSum, served) {
				has += fmt.Sprintf(" as served and %s:%x decompressed", want.algo, tarSum)
			}
			return fmt.Errorf("TARFILE_CHECKSUM mismatch: %s has %s, want %s; its %d entries are unpacked in %s and must not be trusted",
				archiveURL, has, want, x.Entries(), "/"+strings.TrimPrefix(rel, "."))
		}
	}
	linef(out, "unpacked %d entries (%d bytes of file data)%s", x.Entries(), x.Written(), x.SkippedText())
	return nil
}
