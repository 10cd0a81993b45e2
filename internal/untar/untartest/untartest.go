// Package untartest builds tar archives for tests: of the extractor
// itself, of archive2disk, and of OCI image layers. It is for tests and
// benchmarks only; no command imports it.
package untartest

import (
	"archive/tar"
	"bytes"
	"testing"
	"time"
)

// Entry is one archive entry. Zero Type is a regular file, zero Mode 0644.
type Entry struct {
	Name, Link string
	Type       byte
	Mode       int64
	UID, GID   int
	Body       string
}

// MTime is every entry's modification time.
var MTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// Tar returns the PAX archive of entries, in order.
func Tar(t testing.TB, entries []Entry) []byte {
	t.Helper()
	b, err := TarBytes(entries)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TarBytes is Tar for programs without a testing.TB (benchmarks).
func TarBytes(entries []Entry) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.Name, Linkname: e.Link, Typeflag: typ, Mode: mode, Uid: e.UID, Gid: e.GID,
			Size: int64(len(e.Body)), ModTime: MTime, Format: tar.FormatPAX}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// RootFS is a small root filesystem's archive: owners, setuid, links
// (one absolute, kept as written), a hard link, a FIFO, parents missing
// from the archive, a sticky directory.
var RootFS = []Entry{
	{Name: "./", Type: tar.TypeDir, Mode: 0o755},
	{Name: "./etc/", Type: tar.TypeDir, Mode: 0o755},
	{Name: "./etc/os-release", Body: "ID=debian\n"},
	{Name: "./etc/shadow", Mode: 0o640, GID: 42, Body: "root:*:1::::::\n"},
	{Name: "./usr/bin/sudo", Mode: 0o4755, Body: "ELF"}, // parents not in the archive
	{Name: "./bin", Type: tar.TypeSymlink, Link: "usr/bin"},
	{Name: "./etc/localtime", Type: tar.TypeSymlink, Link: "/usr/share/zoneinfo/UTC"}, // absolute: kept as written
	{Name: "./usr/bin/sudoedit", Type: tar.TypeLink, Link: "./usr/bin/sudo"},
	{Name: "./home/ops/", Type: tar.TypeDir, Mode: 0o700, UID: 1000, GID: 1000},
	{Name: "./home/ops/.profile", Mode: 0o600, UID: 1000, GID: 1000, Body: "PS1='$ '\n"},
	{Name: "./run/initctl", Type: tar.TypeFifo, Mode: 0o600},
	{Name: "./tmp/", Type: tar.TypeDir, Mode: 0o1777},
}
