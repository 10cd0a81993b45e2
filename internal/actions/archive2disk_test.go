package actions

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/untar/untartest"
)

func TestArchive2Disk(t *testing.T) {
	needRoot(t)
	plain := untartest.Tar(t, untartest.RootFS)
	srv := newFileServer(t)
	for _, f := range []struct {
		path string
		f    format
	}{{"/rootfs.tar", formatRaw}, {"/rootfs.tar.gz", formatGzip}, {"/rootfs.tar.zst", formatZstd}, {"/rootfs.tar.xz", formatXz}} {
		srv.files[f.path] = compressImage(t, f.f, plain)
	}
	// GNU tar pads an archive to its record size; this one has far more
	// after its end than any tar writer pads.
	srv.files["/padded.tar.gz"] = compressImage(t, formatGzip, append(append([]byte{}, plain...), make([]byte, 256<<10)...))
	sumOf := func(p string) string {
		s := sha256.Sum256(srv.files[p])
		return "sha256:" + hex.EncodeToString(s[:])
	}
	tests := []struct {
		name     string
		path     string
		typ      string
		checksum string
		insecure string
		destPath string
		wantErr  string
	}{
		{name: "tar", path: "/rootfs.tar", typ: "tar", checksum: sumOf("/rootfs.tar"), destPath: "/"},
		{name: "targz into a directory", path: "/rootfs.tar.gz", typ: "targz", checksum: sumOf("/rootfs.tar.gz"), destPath: "/srv/root"},
		{name: "tarzst", path: "/rootfs.tar.zst", typ: "TARZST", checksum: sumOf("/rootfs.tar.zst"), destPath: "/"},
		{name: "tarxz without a checksum, insecure", path: "/rootfs.tar.xz", typ: "tarxz", insecure: "true", destPath: "/"},
		{name: "checksum required", path: "/rootfs.tar", typ: "tar", destPath: "/", wantErr: "TARFILE_CHECKSUM is required (sha256:HEX), or set INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION=true"},
		{name: "zeros past the tar's end: the served file's checksum", path: "/padded.tar.gz", typ: "targz", checksum: sumOf("/padded.tar.gz"), destPath: "/"},
		{name: "targz with the checksum of the tar inside, as upstream checks it", path: "/rootfs.tar.gz", typ: "targz", checksum: sumOf("/rootfs.tar"), destPath: "/"},
		{name: "wrong checksum: unpacked, then refused", path: "/rootfs.tar.gz", typ: "targz", checksum: sumOf("/rootfs.tar.xz"), destPath: "/",
			wantErr: "TARFILE_CHECKSUM mismatch: " + srv.url("/rootfs.tar.gz") + " has " + sumOf("/rootfs.tar.gz") + " as served and " + sumOf("/rootfs.tar") +
				" decompressed, want " + sumOf("/rootfs.tar.xz")},
		{name: "wrong checksum of a plain tar", path: "/rootfs.tar", typ: "tar", checksum: sumOf("/rootfs.tar.xz"), destPath: "/",
			wantErr: "TARFILE_CHECKSUM mismatch: " + srv.url("/rootfs.tar") + " has " + sumOf("/rootfs.tar") + ", want " + sumOf("/rootfs.tar.xz")},
		{name: "type that does not match the data", path: "/rootfs.tar", typ: "targz", insecure: "true", destPath: "/", wantErr: "not a gzip stream"},
		{name: "unknown type", path: "/rootfs.tar", typ: "zip", insecure: "true", destPath: "/", wantErr: `ARCHIVE_TYPE "zip" is not one of`},
		{name: "404", path: "/nope.tar", typ: "tar", insecure: "true", destPath: "/", wantErr: "HTTP 404"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			m := newMachine(t)
			out := &recorder{}
			_, err := runAction(t, m.catalog(), "quay.io/tinkerbell/actions/archive2disk:v1.0.0", Spec{Env: map[string]string{
				"ARCHIVE_URL": srv.url(tc.path), "ARCHIVE_TYPE": tc.typ, "TARFILE_CHECKSUM": tc.checksum,
				"INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION": tc.insecure,
				"DEST_DISK": top, "FS_TYPE": "ext4", "DEST_PATH": tc.destPath,
			}}, out)
			m.checkUnmounted()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("archive2disk: %v\n%s", err, out.text(""))
			}
			checkRootFS(t, filepath.Join(top, tc.destPath))
			ps := out.progresses()
			if len(ps) == 0 || ps[len(ps)-1].Bytes != int64(len(srv.files[tc.path])) {
				t.Errorf("progress %+v; want a last report of all %d bytes", ps, len(srv.files[tc.path]))
			}
			if !strings.Contains(out.text(StreamAction), "unpacked 12 entries") {
				t.Errorf("action lines:\n%s", out.text(StreamAction))
			}
		})
	}
}

// TestArchive2DiskEscapes: entries that would land outside DEST_PATH are
// refused, and nothing is written outside it.
func TestArchive2DiskEscapes(t *testing.T) {
	needRoot(t)
	outside := t.TempDir()
	tests := []struct {
		name    string
		entries []untartest.Entry
		want    string
	}{
		{name: "dot-dot", entries: []untartest.Entry{{Name: "../evil", Body: "x"}}, want: `entry 1 "../evil": ".." in the name: refused`},
		{name: "dot-dot inside", entries: []untartest.Entry{{Name: "ok", Body: "x"}, {Name: "a/../../evil", Body: "x"}}, want: `entry 2 "a/../../evil": ".." in the name`},
		{name: "absolute", entries: []untartest.Entry{{Name: "/etc/evil", Body: "x"}}, want: `entry 1 "/etc/evil": absolute name: refused`},
		{name: "write through an absolute symlink", entries: []untartest.Entry{
			{Name: "link", Type: tar.TypeSymlink, Link: outside}, {Name: "link/pwned", Body: "x"}}, want: `entry 2 "link/pwned": `},
		{name: "write through a relative symlink that climbs out", entries: []untartest.Entry{
			{Name: "up", Type: tar.TypeSymlink, Link: "../.."}, {Name: "up/pwned", Body: "x"}}, want: `entry 2 "up/pwned": `},
		{name: "symlink chain", entries: []untartest.Entry{
			{Name: "a", Type: tar.TypeSymlink, Link: "b"}, {Name: "b", Type: tar.TypeSymlink, Link: "../"}, {Name: "a/pwned", Body: "x"}}, want: `entry 3 "a/pwned": `},
		{name: "hard link to outside", entries: []untartest.Entry{{Name: "h", Type: tar.TypeLink, Link: "../outside"}}, want: `entry 1 "h": hard link to "../outside": ".." in the name`},
		{name: "hard link through a symlink", entries: []untartest.Entry{
			{Name: "up", Type: tar.TypeSymlink, Link: ".."}, {Name: "h", Type: tar.TypeLink, Link: "up/sentinel"}}, want: `entry 2 "h": `},
		{name: "directory through a symlink", entries: []untartest.Entry{
			{Name: "up", Type: tar.TypeSymlink, Link: ".."}, {Name: "up/newdir/", Type: tar.TypeDir, Mode: 0o755}}, want: `entry 2 "up/newdir/": `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			os.WriteFile(filepath.Join(top, "sentinel"), []byte("s"), 0o644)
			srv := newFileServer(t)
			srv.files["/evil.tar"] = untartest.Tar(t, tc.entries)
			m := newMachine(t)
			_, err := runAction(t, m.catalog(), "archive2disk", Spec{Env: map[string]string{
				"ARCHIVE_URL": srv.url("/evil.tar"), "ARCHIVE_TYPE": "tar", "INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION": "1",
				"DEST_DISK": top, "FS_TYPE": "ext4", "DEST_PATH": "/target",
			}}, &recorder{})
			m.checkUnmounted()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want %q", err, tc.want)
			}
			// Outside DEST_PATH: only the sentinel and DEST_PATH itself.
			ents, _ := os.ReadDir(top)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if strings.Join(names, ",") != "sentinel,target" {
				t.Errorf("the filesystem's top holds %v; want only sentinel and target", names)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("written outside the filesystem: %v", ents)
			}
			if st, _ := os.Stat(filepath.Join(top, "sentinel")); st == nil || st.Sys().(*syscall.Stat_t).Nlink != 1 {
				t.Error("the sentinel outside DEST_PATH got a hard link")
			}
		})
	}
}

// TestArchive2DiskTruncated: an archive cut short fails naming the URL
// and the byte offset.
func TestArchive2DiskTruncated(t *testing.T) {
	needRoot(t)
	full := compressImage(t, formatGzip, untartest.Tar(t, append(untartest.RootFS, untartest.Entry{Name: "big", Body: string(diskImage(1<<20, 9))})))
	srv := newFileServer(t)
	srv.files["/short.tar.gz"] = full[:len(full)*2/3]
	m := newMachine(t)
	_, err := runAction(t, m.catalog(), "archive2disk", Spec{Env: map[string]string{
		"ARCHIVE_URL": srv.url("/short.tar.gz"), "ARCHIVE_TYPE": "targz", "INSECURE_NO_TARFILE_CHECKSUM_VERIFICATION": "true",
		"DEST_DISK": t.TempDir(), "FS_TYPE": "ext4", "DEST_PATH": "/",
	}}, &recorder{})
	m.checkUnmounted()
	want := srv.url("/short.tar.gz") + " near byte " + itoa(len(full)*2/3) + " of " + itoa(len(full)*2/3) + " of the download: entry 13 \"big\": unexpected EOF"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v; want %q", err, want)
	}
}

// checkRootFS checks that dest holds untartest.RootFS as unpacked:
// checkRootFSFiles, and the owners, special modes, FIFO and mtimes a tar
// carries.
func checkRootFS(t *testing.T, dest string) {
	t.Helper()
	checkRootFSFiles(t, dest)
	for _, w := range []fileState{
		{path: "etc/shadow", mode: 0o640, gid: 42, contents: "root:*:1::::::\n"},
		{path: "home/ops", dir: true, mode: 0o700, uid: 1000, gid: 1000},
		{path: "home/ops/.profile", mode: 0o600, uid: 1000, gid: 1000, contents: "PS1='$ '\n"},
		{path: "tmp", dir: true, mode: 0o777 | fs.ModeSticky},
	} {
		checkFile(t, dest, w)
	}
	if st, err := os.Lstat(filepath.Join(dest, "run/initctl")); err != nil || st.Mode().Type() != fs.ModeNamedPipe {
		t.Errorf("run/initctl: %v, %v; want a FIFO", st, err)
	}
	if st, _ := os.Stat(filepath.Join(dest, "etc")); st == nil || !st.ModTime().Equal(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)) {
		t.Errorf("etc's mtime is not the archive's: %v", st)
	}
}

// checkRootFSFiles checks the files of untartest.RootFS in dest: regular
// files with their contents and modes (setuid too), symlinks and a hard
// link.
func checkRootFSFiles(t *testing.T, dest string) {
	t.Helper()
	for _, w := range []fileState{
		{path: "etc/os-release", mode: 0o644, contents: "ID=debian\n"},
		{path: "usr/bin/sudo", mode: 0o755 | fs.ModeSetuid, contents: "ELF"},
		{path: "usr/bin", dir: true, mode: 0o755},
	} {
		checkFile(t, dest, w)
	}
	for name, want := range map[string]string{"etc/shadow": "root:*:1::::::\n", "home/ops/.profile": "PS1='$ '\n"} {
		if b, err := os.ReadFile(filepath.Join(dest, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	for link, want := range map[string]string{"bin": "usr/bin", "etc/localtime": "/usr/share/zoneinfo/UTC"} {
		if got, err := os.Readlink(filepath.Join(dest, link)); err != nil || got != want {
			t.Errorf("symlink %s -> %q, %v; want %q", link, got, err, want)
		}
	}
	a, _ := os.Stat(filepath.Join(dest, "usr/bin/sudo"))
	b, _ := os.Stat(filepath.Join(dest, "usr/bin/sudoedit"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Error("usr/bin/sudoedit is not a hard link to usr/bin/sudo")
	}
}
