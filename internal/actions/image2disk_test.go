package actions

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/anvilproj/anvil/internal/testtool"
)

// imageSize is the test disk image's size: not a multiple of any buffer.
const imageSize = 2<<20 + 12345

// compressImage returns img in format f.
func compressImage(t *testing.T, f format, img []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	switch f {
	case formatRaw:
		return img
	case formatGzip:
		w := gzip.NewWriter(&b)
		w.Write(img)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case formatXz:
		w, err := xz.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(img)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case formatZstd:
		w, err := zstd.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(img)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case formatBzip2:
		// Go has no bzip2 writer; scripts/install-deps.sh installs bzip2.
		cmd := exec.Command(testtool.RequireBinary(t, "bzip2", "bzip2"), "-c", "-1")
		cmd.Stdin = bytes.NewReader(img)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	return b.Bytes()
}

// newDisk makes a regular file standing for a disk, filled with old
// contents, and returns its path.
func newDisk(t *testing.T, old []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(p, old, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImage2DiskFormats(t *testing.T) {
	img := diskImage(imageSize, 1)
	srv := newFileServer(t)
	tests := []struct {
		name       string
		format     format
		path       string
		compressed string
		wantLine   string
	}{
		{name: "raw", format: formatRaw, path: "/os.raw", compressed: "false", wantLine: "(raw, by COMPRESSED is false"},
		{name: "raw, COMPRESSED but not compressed", format: formatRaw, path: "/os.img", compressed: "true", wantLine: "(raw, by neither magic bytes nor name"},
		{name: "gzip", format: formatGzip, path: "/os.raw.gz", compressed: "true", wantLine: "(gzip, by magic bytes"},
		{name: "xz", format: formatXz, path: "/os.raw.xz", compressed: "true", wantLine: "(xz, by magic bytes"},
		{name: "zstd", format: formatZstd, path: "/os.raw.zst", compressed: "true", wantLine: "(zstd, by magic bytes"},
		{name: "bzip2", format: formatBzip2, path: "/os.raw.bz2", compressed: "true", wantLine: "(bzip2, by magic bytes"},
		{name: "zstd with a name that says nothing", format: formatZstd, path: "/download?id=7", compressed: "TRUE", wantLine: "(zstd, by magic bytes"},
		{name: "gzip named .xz: the bytes win", format: formatGzip, path: "/mislabelled.xz", compressed: "yes", wantLine: "(gzip, by magic bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			served := compressImage(t, tc.format, img)
			srv.mu.Lock()
			srv.files[strings.Split(tc.path, "?")[0]] = served
			srv.mu.Unlock()
			m := newMachine(t)
			disk := newDisk(t, bytes.Repeat([]byte("old "), imageSize)) // longer than the image
			out := &recorder{}
			res, err := runAction(t, m.catalog(), "quay.io/tinkerbell/actions/image2disk:v1.0.0", Spec{Env: map[string]string{
				"IMG_URL": srv.url(tc.path), "DEST_DISK": disk, "COMPRESSED": tc.compressed,
			}}, out)
			if err != nil {
				t.Fatalf("image2disk: %v\n%s", err, out.text(""))
			}
			if res.Then != nil {
				t.Error("image2disk returned a Then; it must not take the machine down")
			}
			got, err := os.ReadFile(disk)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, img) {
				t.Errorf("disk holds %d bytes (sha256 %x); want the image's %d (sha256 %x)", len(got), sha256.Sum256(got), len(img), sha256.Sum256(img))
			}
			if !strings.Contains(out.text(StreamAction), tc.wantLine) {
				t.Errorf("action lines lack %q:\n%s", tc.wantLine, out.text(""))
			}
			ps := out.progresses()
			if len(ps) == 0 {
				t.Fatal("no Progress reported")
			}
			last := ps[len(ps)-1]
			want := Progress{Bytes: int64(len(served)), TotalBytes: int64(len(served)), Written: int64(len(img))}
			if last.Bytes != want.Bytes || last.TotalBytes != want.TotalBytes || last.Written != want.Written {
				t.Errorf("last Progress = %+v; want Bytes %d, TotalBytes %d, Written %d", last, want.Bytes, want.TotalBytes, want.Written)
			}
			if len(m.rereads) != 0 {
				t.Errorf("partition table re-read on a regular file: %v", m.rereads)
			}
		})
	}
}

func TestImage2DiskChecksum(t *testing.T) {
	img := diskImage(imageSize, 2)
	served := compressImage(t, formatZstd, img)
	sum256, sum512 := sha256.Sum256(served), sha512.Sum512(served)
	rawSum := sha256.Sum256(img)
	srv := newFileServer(t)
	srv.files["/os.raw.zst"] = served
	tests := []struct {
		name      string
		checksum  string
		wantErr   string // "" for success
		wantLine  string
		wantImage bool // the disk holds the image afterwards
	}{
		{name: "sha256 of the download", checksum: "sha256:" + hex.EncodeToString(sum256[:]), wantLine: "checksum sha256:", wantImage: true},
		{name: "sha256 in upper case", checksum: "SHA256:" + strings.ToUpper(hex.EncodeToString(sum256[:])), wantLine: "verified", wantImage: true},
		{name: "sha512", checksum: "sha512:" + hex.EncodeToString(sum512[:]), wantLine: "checksum sha512:", wantImage: true},
		{name: "bare hex is sha256", checksum: hex.EncodeToString(sum256[:]), wantLine: "verified", wantImage: true},
		{name: "the uncompressed image's sum is not the download's", checksum: "sha256:" + hex.EncodeToString(rawSum[:]),
			wantErr: "CHECKSUM mismatch: " + srv.url("/os.raw.zst") + " has sha256:" + hex.EncodeToString(sum256[:]), wantImage: true},
		{name: "malformed: nothing fetched", checksum: "sha256:abc", wantErr: `CHECKSUM: "abc" is not a sha256 digest`},
		{name: "unknown algorithm", checksum: "md5:0123", wantErr: `checksum algorithm "md5" is not supported`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			old := []byte("old disk contents")
			disk := newDisk(t, old)
			out := &recorder{}
			before := srv.hitCount("/os.raw.zst")
			_, err := runAction(t, m.catalog(), "image2disk", Spec{Env: map[string]string{
				"IMG_URL": srv.url("/os.raw.zst"), "DEST_DISK": disk, "COMPRESSED": "true", "CHECKSUM": tc.checksum,
			}}, out)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("image2disk: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("image2disk error = %v; want it to contain %q", err, tc.wantErr)
			}
			if tc.wantLine != "" && !strings.Contains(out.text(StreamAction), tc.wantLine) {
				t.Errorf("action lines lack %q:\n%s", tc.wantLine, out.text(""))
			}
			got, _ := os.ReadFile(disk)
			if tc.wantImage != bytes.Equal(got, img) {
				t.Errorf("disk holds the image: %v; want %v", !tc.wantImage, tc.wantImage)
			}
			if !tc.wantImage {
				if !bytes.Equal(got, old) {
					t.Errorf("disk changed by a refused action: %q", got[:min(len(got), 40)])
				}
				if n := srv.hitCount("/os.raw.zst") - before; n != 0 {
					t.Errorf("image fetched %d times for an action refused before it started", n)
				}
			}
		})
	}
}

func TestImage2DiskBadImages(t *testing.T) {
	img := diskImage(imageSize, 3)
	zst := compressImage(t, formatZstd, img)
	gz := compressImage(t, formatGzip, img)
	corruptGz := append([]byte(nil), gz...)
	for i := len(gz) / 2; i < len(gz)/2+64; i++ {
		corruptGz[i] ^= 0x5a
	}
	srv := newFileServer(t)
	srv.files["/truncated.raw.zst"] = zst[:len(zst)/2]
	srv.files["/corrupt.raw.gz"] = corruptGz
	srv.files["/raw-named.raw.gz"] = img
	srv.files["/short.zst"] = zst[:3]
	srv.files["/empty.raw"] = []byte{}
	srv.special["/cut.raw.zst"] = func(w http.ResponseWriter, r *http.Request, hit int) { cutAfter(w, zst, len(zst)/3) }
	srv.special["/error.raw"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		http.Error(w, "disk on fire", http.StatusInternalServerError)
	}
	tests := []struct {
		name    string
		path    string
		want    []string // substrings of the error
		written bool     // bytes reached the disk before the failure
	}{
		{name: "404", path: "/missing.raw.zst", want: []string{"fetch " + srv.url("/missing.raw.zst"), "HTTP 404 Not Found"}},
		{name: "500 without retries", path: "/error.raw", want: []string{"HTTP 500 Internal Server Error"}},
		{name: "truncated zstd", path: "/truncated.raw.zst", written: true,
			want: []string{srv.url("/truncated.raw.zst") + ": zstd data is corrupt or truncated near byte " + itoa(len(zst)/2) + " of " + itoa(len(zst)/2)}},
		{name: "corrupt gzip", path: "/corrupt.raw.gz", written: true,
			want: []string{srv.url("/corrupt.raw.gz") + ": gzip data is corrupt or truncated near byte"}},
		{name: "connection cut mid-stream", path: "/cut.raw.zst", written: true,
			want: []string{"fetch " + srv.url("/cut.raw.zst") + ": connection lost at byte " + itoa(len(zst)/3) + " of " + itoa(len(zst))}},
		{name: "name says gzip, bytes do not", path: "/raw-named.raw.gz", want: []string{"the name says gzip but the data does not start with gzip's magic bytes"}},
		{name: "three bytes of zstd", path: "/short.zst", want: []string{"the name says zstd"}},
		{name: "empty", path: "/empty.raw", want: []string{srv.url("/empty.raw") + " is empty (0 bytes): nothing written"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			old := []byte("old disk contents that must survive a refused image")
			disk := newDisk(t, old)
			out := &recorder{}
			_, err := runAction(t, m.catalog(), "image2disk", Spec{Env: map[string]string{
				"IMG_URL": srv.url(tc.path), "DEST_DISK": disk, "COMPRESSED": "true",
			}}, out)
			if err == nil {
				t.Fatal("image2disk succeeded; want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error = %q\nwant it to contain %q", err, w)
				}
			}
			got, _ := os.ReadFile(disk)
			if !tc.written && !bytes.Equal(got, old) {
				t.Errorf("disk changed although nothing should have been written: %q", got[:min(len(got), 40)])
			}
			if tc.written && bytes.Equal(got, old) {
				t.Errorf("disk unchanged; the failure should come after writing began")
			}
		})
	}
}

func TestImage2DiskRetry(t *testing.T) {
	img := diskImage(imageSize, 4)
	zst := compressImage(t, formatZstd, img)
	srv := newFileServer(t)
	srv.files["/os.raw.zst"] = zst
	srv.special["/cut-once.raw.zst"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		if hit == 1 {
			cutAfter(w, zst, len(zst)/2)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(zst))
	}
	srv.special["/busy-once.raw.zst"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		if hit == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(zst))
	}
	srv.special["/no-ranges.raw.zst"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		if hit == 1 {
			cutAfter(w, zst, len(zst)/2)
			return
		}
		w.Write(zst) // 200, whatever the Range
	}
	srv.special["/changed.raw.zst"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		if hit == 1 {
			cutAfter(w, zst, len(zst)/2)
			return
		}
		w.Header().Set("ETag", `"v2"`) // If-Range "v1" no longer matches: 200, whole new file
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(zst))
	}
	tests := []struct {
		name      string
		path      string
		retry     string
		wantErr   string
		wantRange bool
		wantLine  string
	}{
		{name: "cut once, resumed", path: "/cut-once.raw.zst", retry: "true", wantRange: true, wantLine: "resuming " + srv.url("/cut-once.raw.zst") + " at byte " + itoa(len(zst)/2)},
		{name: "503 once, retried", path: "/busy-once.raw.zst", retry: "true", wantLine: "HTTP 503 Service Unavailable; retrying in 1s"},
		{name: "503 once without retries", path: "/busy-once.raw.zst", retry: "false", wantErr: "HTTP 503"},
		{name: "server without ranges", path: "/no-ranges.raw.zst", retry: "true", wantRange: true, wantErr: "cannot resume at byte " + itoa(len(zst)/2) + ": the server does not serve byte ranges"},
		{name: "file changed on the server", path: "/changed.raw.zst", retry: "true", wantRange: true, wantErr: `the file changed on the server (was "v1", now "v2")`},
		{name: "404 is not retried", path: "/missing", retry: "true", wantErr: "HTTP 404"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv.mu.Lock()
			srv.hits = map[string]int{}
			srv.ranges = nil
			srv.mu.Unlock()
			m := newMachine(t)
			disk := newDisk(t, nil)
			out := &recorder{}
			_, err := runAction(t, m.catalog(), "image2disk", Spec{Env: map[string]string{
				"IMG_URL": srv.url(tc.path), "DEST_DISK": disk, "COMPRESSED": "true",
				"RETRY_ENABLED": tc.retry, "RETRY_DURATION_MINUTES": "1",
			}}, out)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("image2disk: %v\n%s", err, out.text(""))
				}
				if got, _ := os.ReadFile(disk); !bytes.Equal(got, img) {
					t.Error("disk does not hold the image")
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("image2disk error = %v; want it to contain %q", err, tc.wantErr)
			}
			if tc.wantLine != "" && !strings.Contains(out.text(StreamAction), tc.wantLine) {
				t.Errorf("action lines lack %q:\n%s", tc.wantLine, out.text(""))
			}
			srv.mu.Lock()
			ranges := srv.ranges
			srv.mu.Unlock()
			if tc.wantRange != (len(ranges) > 0) {
				t.Errorf("range requests %q; want some: %v", ranges, tc.wantRange)
			}
			if tc.wantRange && ranges[0] != tc.path+" bytes="+itoa(len(zst)/2)+"-" {
				t.Errorf("range request %q; want it from byte %d", ranges[0], len(zst)/2)
			}
		})
	}
}

// TestImage2DiskRetryGivesUp: a server that keeps failing is retried
// with backoff until RETRY_DURATION_MINUTES is over (on the test clock).
func TestImage2DiskRetryGivesUp(t *testing.T) {
	srv := newFileServer(t)
	srv.special["/down"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		http.Error(w, "down", http.StatusBadGateway)
	}
	m := newMachine(t)
	out := &recorder{}
	start := m.clock.Now()
	_, err := runAction(t, m.catalog(), "image2disk", Spec{Env: map[string]string{
		"IMG_URL": srv.url("/down"), "DEST_DISK": newDisk(t, nil), "RETRY_ENABLED": "true", "RETRY_DURATION_MINUTES": "2",
	}}, out)
	if err == nil || !strings.Contains(err.Error(), "HTTP 502 Bad Gateway (gave up: RETRY_DURATION_MINUTES is over)") {
		t.Fatalf("error = %v; want the 502 and that retries are over", err)
	}
	// Backoff 1, 2, 4, 8, 16, 30, 30 s: the 8th would pass 2 minutes.
	if got, want := srv.hitCount("/down"), 8; got != want {
		t.Errorf("%d requests; want %d (1 + 7 retries within 2 minutes)", got, want)
	}
	if waited := m.clock.Now().Sub(start); waited > 2*time.Minute {
		t.Errorf("waited %s on the clock; want at most the 2 minutes allowed", waited)
	}
}

// TestImage2DiskProgress: progress is reported while the image streams,
// in the units documented (bytes fetched of the Content-Length).
func TestImage2DiskProgress(t *testing.T) {
	img := diskImage(imageSize, 5)
	release := make(chan struct{})
	srv := newFileServer(t)
	srv.special["/slow.raw"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		w.Header().Set("Content-Length", itoa(len(img)))
		w.Write(img[:len(img)/2])
		w.(http.Flusher).Flush()
		<-release
		w.Write(img[len(img)/2:])
	}
	m := newMachine(t)
	out := &recorder{}
	done := make(chan error, 1)
	go func() {
		_, err := runAction(t, m.catalog(), "image2disk", Spec{Env: map[string]string{
			"IMG_URL": srv.url("/slow.raw"), "DEST_DISK": newDisk(t, nil), "PROGRESS_INTERVAL_SECONDS": "5",
		}}, out)
		done <- err
	}()
	// Tick until a report shows the first half fetched.
	var mid Progress
	for found := false; !found; {
		m.clock.Advance(5 * time.Second) // a progress interval: the reporter's ticker fires
		select {
		case err := <-done:
			t.Fatalf("image2disk ended before the second half was sent: %v", err)
		case <-time.After(10 * time.Millisecond): // the reporter's turn
		}
		for _, p := range out.progresses() {
			if p.Bytes >= int64(len(img)/2) {
				mid, found = p, true
				break
			}
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if mid.Bytes != int64(len(img)/2) || mid.TotalBytes != int64(len(img)) {
		t.Errorf("mid-stream Progress = %+v; want Bytes %d of TotalBytes %d", mid, len(img)/2, len(img))
	}
	if mid.BytesPerSec <= 0 {
		t.Errorf("mid-stream Progress = %+v; want a rate", mid)
	}
	ps := out.progresses()
	for i := 1; i < len(ps); i++ {
		if ps[i].Bytes < ps[i-1].Bytes || ps[i].Written < ps[i-1].Written {
			t.Errorf("progress went backwards: %+v then %+v", ps[i-1], ps[i])
		}
	}
	if last := ps[len(ps)-1]; last.Bytes != int64(len(img)) || last.Written != int64(len(img)) {
		t.Errorf("last Progress = %+v; want all %d bytes fetched and written", last, len(img))
	}
}

// TestImage2DiskStall: a server that stops sending is given up on after
// StallTimeout, with the offset.
func TestImage2DiskStall(t *testing.T) {
	img := diskImage(1<<20, 6)
	release := make(chan struct{})
	defer close(release)
	srv := newFileServer(t)
	srv.special["/stuck.raw"] = func(w http.ResponseWriter, r *http.Request, hit int) {
		w.Header().Set("Content-Length", itoa(len(img)))
		w.Write(img[:1000])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	m := newMachine(t)
	cfg := m.config()
	cfg.StallTimeout = 50 * time.Millisecond
	r, _ := New(cfg).Lookup("image2disk")
	_, err := r(context.Background(), Spec{Env: map[string]string{"IMG_URL": srv.url("/stuck.raw"), "DEST_DISK": newDisk(t, nil)}}, &recorder{})
	want := "fetch " + srv.url("/stuck.raw") + ": connection lost at byte 1000 of " + itoa(len(img)) + ": no data for 50ms"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v; want it to contain %q", err, want)
	}
}

// TestImage2DiskCancel: the action's context ends it mid-stream, also
// while a decoder's own goroutine waits on the network.
func TestImage2DiskCancel(t *testing.T) {
	img := diskImage(1<<20, 7)
	for _, f := range []format{formatRaw, formatZstd, formatGzip} {
		t.Run(f.String(), func(t *testing.T) {
			data := compressImage(t, f, img)
			srv := newFileServer(t)
			srv.special["/endless"] = func(w http.ResponseWriter, r *http.Request, hit int) {
				w.Write(data[:len(data)/2])
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}
			m := newMachine(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			out := &recorder{onLine: func(l outLine) {
				if strings.HasPrefix(l.text, "writing ") {
					cancel(errors.New("action timed out"))
				}
			}}
			r, _ := m.catalog().Lookup("image2disk")
			_, err := r(ctx, Spec{Env: map[string]string{"IMG_URL": srv.url("/endless"), "DEST_DISK": newDisk(t, nil), "COMPRESSED": "true"}}, out)
			if err == nil || !strings.Contains(err.Error(), "image2disk: stopped at byte ") || !strings.Contains(err.Error(), "action timed out") {
				t.Fatalf("error = %v; want it stopped with the context's cause", err)
			}
		})
	}
}

func TestImage2DiskBadEnv(t *testing.T) {
	srv := newFileServer(t)
	srv.files["/os.raw"] = []byte("x")
	disk := newDisk(t, nil)
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{name: "no IMG_URL", env: map[string]string{"DEST_DISK": disk}, want: "image2disk: IMG_URL is required"},
		{name: "no DEST_DISK", env: map[string]string{"IMG_URL": srv.url("/os.raw")}, want: "image2disk: DEST_DISK is required"},
		{name: "ftp URL", env: map[string]string{"IMG_URL": "ftp://x/os.raw", "DEST_DISK": disk}, want: `"ftp://x/os.raw" is not an http:// or https:// URL`},
		{name: "COMPRESSED not a boolean", env: map[string]string{"IMG_URL": srv.url("/os.raw"), "DEST_DISK": disk, "COMPRESSED": "gz"}, want: `COMPRESSED: "gz" is not a boolean`},
		{name: "progress interval 0", env: map[string]string{"IMG_URL": srv.url("/os.raw"), "DEST_DISK": disk, "PROGRESS_INTERVAL_SECONDS": "0"}, want: `PROGRESS_INTERVAL_SECONDS: "0" is not a whole number from 1 to 3600`},
		{name: "retry minutes", env: map[string]string{"IMG_URL": srv.url("/os.raw"), "DEST_DISK": disk, "RETRY_DURATION_MINUTES": "ten"}, want: `RETRY_DURATION_MINUTES: "ten"`},
		{name: "missing disk is not created", env: map[string]string{"IMG_URL": srv.url("/os.raw"), "DEST_DISK": disk + "-typo"}, want: "DEST_DISK: open " + disk + "-typo: no such file or directory"},
		{name: "a directory", env: map[string]string{"IMG_URL": srv.url("/os.raw"), "DEST_DISK": t.TempDir()}, want: "is a directory"},
		{name: "a character device", env: map[string]string{"IMG_URL": srv.url("/os.raw"), "DEST_DISK": "/dev/null"}, want: "DEST_DISK /dev/null is neither a block device nor a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			_, err := runAction(t, m.catalog(), "image2disk", Spec{Env: tc.env}, &recorder{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(disk + "-typo"); err == nil {
		t.Error("image2disk created a missing DEST_DISK")
	}
}
