package actions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/anvilproj/anvil/internal/oci/ocitest"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/untar/untartest"
)

// The upstream actions Anvil has no native implementation of run through
// the container path, as Tinkerbell's own programs: these tests run them
// (../shared/tinkerbell, rebuilt as FROM-scratch images) and check what
// they did to the disk.

// loopDisk is a loop device over a file of size bytes of 0xa5, and the
// file.
func loopDisk(t *testing.T, size int) (dev, backing string) {
	t.Helper()
	backing = filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(backing, bytes.Repeat([]byte{0xa5}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	return loopDevice(t, backing), backing
}

// ext4Device is a loop device over a new ext4 filesystem of size
// (mkfs.ext4's, "8M").
func ext4Device(t *testing.T, size string) string {
	t.Helper()
	mkfs := testtool.RequireBinary(t, "mkfs.ext4", "e2fsprogs")
	backing := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(backing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", backing, size).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	return loopDevice(t, backing)
}

// mountDevice mounts dev on a new directory until the test's end.
func mountDevice(t *testing.T, dev string) string {
	t.Helper()
	mnt := t.TempDir()
	if b, err := exec.Command("mount", dev, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v %s", dev, err, b)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	return mnt
}

// TestUpstreamOCI2DiskInContainer: upstream oci2disk (no native
// implementation: Select picks the container) pulls a disk image pushed
// as an ORAS artifact and writes the same disk as native image2disk
// writes from the same file over HTTP.
func TestUpstreamOCI2DiskInContainer(t *testing.T) {
	l := newLab(t, 0)
	const diskSize = 8 << 20
	img := diskImage(5<<20+4321, 9)
	gz := compressImage(t, formatGzip, img)

	// The artifact as `oras push REG/test/debian:raw.gz ./debian.raw.gz`
	// makes it: one layer of the file, titled with its name.
	artifact := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), "application/vnd.unknown.config.v1+json")
	artifact, err := mutate.Append(artifact, mutate.Addendum{
		Layer:       static.NewLayer(gz, "application/vnd.oci.image.layer.v1.tar"),
		Annotations: map[string]string{"org.opencontainers.image.title": "debian.raw.gz"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// oci2disk speaks only HTTPS (SKIP_VERIFY accepts the test's
	// certificate): the artifact is in a registry of its own.
	artifacts := ocitest.NewRegistry(t, ocitest.WithTLS())
	artifacts.Push(t, artifacts.Ref("test/debian:raw.gz"), artifact)
	image := l.push(t, "tinkerbell/actions/oci2disk:v1.0.0", ocitest.UpstreamImage(t, "oci2disk"))

	cdev, cbacking := loopDisk(t, diskSize)
	s := l.spec(t, image, map[string]string{"DEST_DISK": cdev, "IMG_URL": artifacts.Ref("test/debian:raw.gz"), "COMPRESSED": "true", "SKIP_VERIFY": "true"})
	s.Runtime = RuntimeAuto
	out, sel, err := l.run(context.Background(), t, s)
	if err != nil {
		t.Fatalf("upstream oci2disk: %v\n%s", err, out.text(""))
	}
	if sel.Path != PathContainer || sel.Why != "no native oci2disk" {
		t.Fatalf("oci2disk ran %s (%s); want the container path", sel.Path, sel.Why)
	}

	srv := newFileServer(t)
	srv.files["/debian.raw.gz"] = gz
	ndev, nbacking := loopDisk(t, diskSize)
	ns := l.spec(t, "quay.io/tinkerbell/actions/image2disk:v1.0.0", map[string]string{"DEST_DISK": ndev, "IMG_URL": srv.url("/debian.raw.gz"), "COMPRESSED": "true"})
	ns.Runtime = RuntimeAuto
	if out, sel, err := l.run(context.Background(), t, ns); err != nil || sel.Path != PathNative {
		t.Fatalf("native image2disk: %s, %v\n%s", sel.Path, err, out.text(""))
	}
	viaOCI, _ := os.ReadFile(cbacking)
	native, _ := os.ReadFile(nbacking)
	if !bytes.Equal(native[:len(img)], img) {
		t.Fatal("native image2disk did not write the image")
	}
	if !bytes.Equal(viaOCI, native) {
		t.Errorf("oci2disk's disk differs from image2disk's (first %d bytes equal: %v)\n%s", len(img), bytes.Equal(viaOCI[:len(img)], img), out.text(""))
	}
	if want := "Successfully written"; !strings.Contains(out.text(""), want) {
		t.Errorf("oci2disk's output lacks %q:\n%s", want, out.text(""))
	}
}

// TestUpstreamRootioInContainer: upstream rootio reads the machine's
// storage layout from the metadata service (MIRROR_HOST, port 50061, as
// Hegel and Anvil serve it) and partitions the disk as the metadata asks.
// MBR: the upstream program (tinkerbell/actions ae3e51d) fails to write
// any GPT ("partition 0 has invalid index 0", go-diskfs wants partition
// indexes it does not set), logs the error and exits 0, in a container
// or not.
func TestUpstreamRootioInContainer(t *testing.T) {
	l := newLab(t, 0)
	if _, err := exec.LookPath("sfdisk"); err != nil {
		t.Skip("sfdisk is missing")
	}
	dev, backing := loopDisk(t, 16<<20)
	// rootio asks port 50061 of MIRROR_HOST, a fixed port: the test
	// takes it on a loopback address of its own.
	ln := listenWhenFree(t, "127.0.0.61:50061")
	layout := map[string]any{"metadata": map[string]any{"instance": map[string]any{"hostname": "node1", "storage": map[string]any{
		"disks": []any{map[string]any{"device": dev, "wipe_table": true, "partitions": []any{
			map[string]any{"label": "FAT32_ACTIVE", "number": 1, "size": 4096},
			map[string]any{"label": "LINUX", "number": 2, "size": 0},
		}}},
	}}}}
	var asked string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.Path
		json.NewEncoder(w).Encode(layout)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	image := l.push(t, "tinkerbell/actions/rootio:v1.0.0", ocitest.UpstreamImage(t, "rootio"))
	s := l.spec(t, image, map[string]string{"MIRROR_HOST": "127.0.0.61", "MBR": "true"})
	s.Command = []string{"partition"}
	s.Runtime = RuntimeAuto
	out, sel, err := l.run(context.Background(), t, s)
	if err != nil {
		t.Fatalf("upstream rootio: %v\n%s", err, out.text(""))
	}
	if sel.Path != PathContainer || asked != "/metadata" {
		t.Fatalf("rootio ran %s and asked for %q", sel.Path, asked)
	}
	b, err := exec.Command("sfdisk", "--json", backing).Output()
	if err != nil {
		t.Fatalf("sfdisk --json: %v\n%s", err, out.text(""))
	}
	var table struct {
		PartitionTable struct {
			Label      string `json:"label"`
			Partitions []struct {
				Start    int64  `json:"start"`
				Size     int64  `json:"size"`
				Type     string `json:"type"`
				Bootable bool   `json:"bootable"`
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatal(err)
	}
	pt := table.PartitionTable
	p := pt.Partitions
	if pt.Label != "dos" || len(p) != 2 || p[0].Start != 2048 || p[0].Size != 4096 || p[0].Type != "c" || !p[0].Bootable ||
		p[1].Start != 6144 || p[1].Start+p[1].Size != 16<<20/512 || p[1].Type != "83" {
		t.Errorf("partition table %+v; want MBR: a bootable FAT32 partition of 4096 sectors from 2048, Linux on the rest\n%s", pt, out.text(""))
	}
}

// TestUpstreamArchive2DiskInContainer: the upstream archive2disk, in a
// container, unpacks onto an ext4 partition the files of the archive
// TestArchive2Disk unpacks natively (checkRootFSFiles). Upstream (tinkerbell/actions
// ae3e51d) keeps less than Anvil's native one: owners, the sticky
// world-writable /tmp, FIFOs ("File type 54 unhandled") and mtimes are
// lost; checkRootFS, which the native one passes, would fail.
func TestUpstreamArchive2DiskInContainer(t *testing.T) {
	l := newLab(t, 0)
	srv := newFileServer(t)
	plain := untartest.Tar(t, untartest.RootFS)
	srv.files["/rootfs.tar.gz"] = compressImage(t, formatGzip, plain)
	// Upstream's TARFILE_CHECKSUM is of the archive as unpacked (the tar),
	// Anvil's of the file as served.
	sum := sha256.Sum256(plain)
	dev := ext4Device(t, "16M")
	image := l.push(t, "tinkerbell/actions/archive2disk:v1.0.0", ocitest.UpstreamImage(t, "archive2disk"))
	s := l.spec(t, image, map[string]string{"ARCHIVE_URL": srv.url("/rootfs.tar.gz"), "ARCHIVE_TYPE": "targz",
		"TARFILE_CHECKSUM": "sha256:" + hex.EncodeToString(sum[:]), "DEST_DISK": dev, "FS_TYPE": "ext4", "DEST_PATH": "/"})
	out, sel, err := l.run(context.Background(), t, s)
	if err != nil || sel.Path != PathContainer {
		t.Fatalf("upstream archive2disk: %s, %v\n%s", sel.Path, err, out.text(""))
	}
	mnt := mountDevice(t, dev)
	checkRootFSFiles(t, mnt)

	// The same action, natively: upstream's checksum (of the tar) holds.
	s.Env["DEST_DISK"] = ext4Device(t, "16M")
	s.Runtime = RuntimeAuto
	out, sel, err = l.run(context.Background(), t, s)
	if err != nil || sel.Path != PathNative {
		t.Fatalf("native archive2disk of the same action: %s, %v\n%s", sel.Path, err, out.text(""))
	}
	if want := "verified (the tar, decompressed)"; !strings.Contains(out.text(StreamAction), want) {
		t.Errorf("native archive2disk's lines lack %q:\n%s", want, out.text(StreamAction))
	}
}

// listenWhenFree listens on addr, waiting while another test package's
// server (go test runs packages side by side) holds the port on all
// addresses; after two minutes it fails naming the holder.
func listenWhenFree(t *testing.T, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln
		}
		if time.Now().After(deadline) {
			_, port, _ := net.SplitHostPort(addr)
			holder, _ := exec.Command("ss", "-Hltnp", "sport = :"+port).CombinedOutput()
			t.Fatalf("%s stayed taken for two minutes: %v; held by: %s", addr, err, holder)
		}
		time.Sleep(time.Second)
	}
}
