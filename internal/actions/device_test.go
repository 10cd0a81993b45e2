package actions

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestRealDevice runs image2disk, writefile and cexec with Config's
// defaults — the real mount(2), umount2(2) and BLKRRPART — against a loop
// device: an ext4 filesystem image (with a static busybox) streamed onto
// it, a file written into it, and a command run chrooted in it. The
// table tests use directories; this one proves the system calls.
func TestRealDevice(t *testing.T) {
	needRoot(t)
	testtool.RequireBinary(t, "losetup", "mount")
	testtool.RequireBinary(t, "mkfs.ext4", "e2fsprogs")
	const fsSize, diskSize = 12 << 20, 16 << 20

	// The image: ext4, populated with busybox and the chroot's mount points.
	tree := busyboxRoot(t, "dev", "proc", "sys", "etc")
	fsImg := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(fsImg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", tree, fsImg, "12M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	img, err := os.ReadFile(fsImg)
	if err != nil || len(img) != fsSize {
		t.Fatalf("filesystem image: %d bytes, %v", len(img), err)
	}
	srv := newFileServer(t)
	srv.files["/fs.img.zst"] = compressImage(t, formatZstd, img)
	srv.files["/too-big.raw"] = make([]byte, diskSize+4096)

	// The disk: a loop device over a file of old contents.
	backing := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(backing, bytes.Repeat([]byte{0xa5}, diskSize), 0o644); err != nil {
		t.Fatal(err)
	}
	dev := loopDevice(t, backing)

	tmp := t.TempDir()
	c := New(Config{TempDir: tmp})
	run := func(image string, env map[string]string) (*recorder, error) {
		t.Helper()
		r, err := c.Lookup(image)
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		res, err := r(context.Background(), Spec{Env: env}, rec)
		if res.Then != nil {
			t.Fatalf("%s returned a Then", image)
		}
		m := &machine{t: t, tmp: tmp}
		m.checkUnmounted()
		return rec, err
	}

	t.Run("image larger than the disk", func(t *testing.T) {
		_, err := run("image2disk", map[string]string{"IMG_URL": srv.url("/too-big.raw"), "DEST_DISK": dev})
		want := "is " + itoa(diskSize+4096) + " bytes, larger than " + dev + " (" + itoa(diskSize) + " bytes): nothing written"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error = %v; want %q", err, want)
		}
		if got := readDevice(t, dev, 16); !bytes.Equal(got, bytes.Repeat([]byte{0xa5}, 16)) {
			t.Errorf("the disk changed: % x", got)
		}
	})
	t.Run("image2disk onto the block device", func(t *testing.T) {
		rec, err := run("quay.io/tinkerbell/actions/image2disk:v1.0.0", map[string]string{
			"IMG_URL": srv.url("/fs.img.zst"), "DEST_DISK": dev, "COMPRESSED": "true"})
		if err != nil {
			t.Fatalf("image2disk: %v\n%s", err, rec.text(""))
		}
		// losetup without --partscan: BLKRRPART says EINVAL, a note.
		if !strings.Contains(rec.text(StreamAction), dev+" holds no partitions") {
			t.Errorf("action lines lack the partition note:\n%s", rec.text(""))
		}
		if got := readDevice(t, dev, diskSize); !bytes.Equal(got[:fsSize], img) || !bytes.Equal(got[fsSize:], bytes.Repeat([]byte{0xa5}, diskSize-fsSize)) {
			t.Error("the disk does not hold the image followed by its old contents")
		}
	})
	t.Run("writefile with a real mount", func(t *testing.T) {
		if _, err := run("writefile", map[string]string{"DEST_DISK": dev, "FS_TYPE": "ext4",
			"DEST_PATH": "/etc/hostname", "CONTENTS": "rack1-node07\n", "MODE": "0644"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("cexec chrooted in a real mount", func(t *testing.T) {
		rec, err := run("cexec", map[string]string{"BLOCK_DEVICE": dev, "FS_TYPE": "ext4", "CHROOT": "y",
			"DEFAULT_INTERPRETER": "/busybox sh -c", "CMD_LINE": "cat /etc/hostname; grep -c ' / ' /proc/self/mounts"})
		if err != nil {
			t.Fatalf("cexec: %v\n%s", err, rec.text(""))
		}
		if got := rec.text(StreamStdout); !strings.HasPrefix(got, "rack1-node07\n") {
			t.Errorf("stdout = %q; want the hostname writefile wrote", got)
		}
	})
	t.Run("wrong filesystem type", func(t *testing.T) {
		_, err := run("writefile", map[string]string{"DEST_DISK": dev, "FS_TYPE": "xfs", "DEST_PATH": "/x"})
		if err == nil || !strings.Contains(err.Error(), "mount "+dev+" (xfs) at "+tmp) {
			t.Fatalf("error = %v; want the mount's failure", err)
		}
	})
}

// readDevice reads the first n bytes of a device.
func readDevice(t *testing.T, dev string, n int) []byte {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		t.Fatal(err)
	}
	return b
}
