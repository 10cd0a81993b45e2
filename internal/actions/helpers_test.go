package actions

import (
	"bufio"
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/testtool"
)

// recorder is an Output that keeps everything.
type recorder struct {
	mu       sync.Mutex
	lines    []outLine
	progress []Progress
	onLine   func(outLine) // called outside the lock, may be nil
}

type outLine struct{ stream, text string }

func (r *recorder) Line(stream, line string) {
	r.mu.Lock()
	r.lines = append(r.lines, outLine{stream, line})
	f := r.onLine
	r.mu.Unlock()
	if f != nil {
		f(outLine{stream, line})
	}
}

func (r *recorder) Progress(p Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress = append(r.progress, p)
}

// text is every line of stream ("" for all), joined by newlines.
func (r *recorder) text(stream string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, l := range r.lines {
		if stream == "" || l.stream == stream {
			b.WriteString(l.text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (r *recorder) progresses() []Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Progress(nil), r.progress...)
}

// newTestClock is a clock that never sleeps: After fires at once,
// moving the time by its wait, and each Now is 1 ms after the last (a
// rate is never over zero seconds); tickers fire on Advance.
func newTestClock() *clock.Fake {
	c := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	c.Step, c.Instant = time.Millisecond, true
	return c
}

// machine is the system a test Catalog acts on: "devices" are
// directories, bind-mounted where the action mounts them (real mount(2),
// so the test needs root); binds of host directories (cexec's /dev,
// /proc, /sys) are real too. Power, kexec and partition re-reads are
// recorded.
type machine struct {
	t     *testing.T
	clock *clock.Fake
	tmp   string // Config.TempDir

	mu       sync.Mutex
	mounts   []mountCall
	unmounts []string
	power    []int
	syncs    int
	rereads  []string
	kexecs   []kexecCall
	kexecErr error
}

type mountCall struct {
	source, target, fstype string
	flags                  uintptr
}

type kexecCall struct {
	kernel, initrd []byte
	cmdline        string
	flags          int
}

func newMachine(t *testing.T) *machine {
	t.Helper()
	return &machine{t: t, clock: newTestClock(), tmp: t.TempDir()}
}

func (m *machine) config() Config {
	return Config{
		Mount:   m.mount,
		Unmount: m.unmount,
		Power: func(cmd int) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.power = append(m.power, cmd)
			return nil
		},
		KexecLoad:        m.kexec,
		RereadPartitions: m.reread,
		Sync: func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.syncs++
		},
		Clock:       m.clock,
		TempDir:     m.tmp,
		WriteBuffer: 64 << 10, // many buffers for a small image
	}
}

func (m *machine) catalog() *Catalog { return New(m.config()) }

func (m *machine) mount(source, target, fstype string, flags uintptr, data string) error {
	m.mu.Lock()
	m.mounts = append(m.mounts, mountCall{source, target, fstype, flags})
	m.mu.Unlock()
	if flags&unix.MS_BIND == 0 {
		// The "device" is a directory: bind it.
		return unix.Mount(source, target, "", unix.MS_BIND, "")
	}
	return unix.Mount(source, target, fstype, flags, data)
}

func (m *machine) unmount(target string, flags int) error {
	m.mu.Lock()
	m.unmounts = append(m.unmounts, target)
	m.mu.Unlock()
	return unix.Unmount(target, flags)
}

func (m *machine) reread(f *os.File) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rereads = append(m.rereads, f.Name())
	return nil
}

func (m *machine) kexec(kernelFd, initrdFd int, cmdline string, flags int) error {
	k, err := os.ReadFile("/proc/self/fd/" + itoa(kernelFd))
	if err != nil {
		m.t.Errorf("kexec: reading the kernel fd: %v", err)
	}
	var i []byte
	if initrdFd >= 0 {
		if i, err = os.ReadFile("/proc/self/fd/" + itoa(initrdFd)); err != nil {
			m.t.Errorf("kexec: reading the initrd fd: %v", err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kexecs = append(m.kexecs, kexecCall{k, i, cmdline, flags})
	return m.kexecErr
}

// checkUnmounted fails the test if anything is still mounted under the
// machine's TempDir, or a mount point directory was left there.
func (m *machine) checkUnmounted() {
	m.t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		m.t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], m.tmp) {
			m.t.Errorf("still mounted after the action: %s", fields[4])
			unix.Unmount(fields[4], unix.MNT_DETACH)
		}
	}
	left, _ := filepath.Glob(filepath.Join(m.tmp, "anvil-mnt-*"))
	if len(left) > 0 {
		m.t.Errorf("mount points left behind: %v", left)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// loopDevice attaches backing to a free loop device (detached when the
// test ends) and returns its path.
func loopDevice(t *testing.T, backing string) string {
	t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", backing).Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("losetup: %v", err)
		}
		t.Skipf("no loop device: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "--detach", dev).Run() })
	return dev
}

// needRoot stops a test that mounts or chroots when not root: a failure
// in CI, a skip elsewhere.
func needRoot(t *testing.T) {
	t.Helper()
	testtool.RequireRoot(t, "it mounts filesystems")
}

// diskImage is a deterministic stand-in for an OS disk: 4 KiB blocks,
// some random (incompressible), some zero, some text, and an odd tail so
// that no buffer boundary lines up with the end.
func diskImage(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const block = 4096
	words := []string{"kernel ", "module ", "systemd ", "/usr/lib/", "x86_64 ", "debian ", "0.1.2 ", "\n"}
	img := make([]byte, 0, size)
	for len(img) < size {
		n := min(block, size-len(img))
		switch r.IntN(10) {
		case 0, 1, 2, 3:
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			img = append(img, b...)
		case 4, 5, 6:
			img = append(img, make([]byte, n)...)
		default:
			var b bytes.Buffer
			for b.Len() < n {
				b.WriteString(words[r.IntN(len(words))])
			}
			img = append(img, b.Bytes()[:n]...)
		}
	}
	return img
}

// fileServer serves files by path with http.ServeContent (ranges, ETag
// when set) and counts requests, including those with a Range header.
type fileServer struct {
	mu     sync.Mutex
	files  map[string][]byte
	hits   map[string]int
	ranges []string
	// special handlers by path, called with the hit number (1 first).
	special map[string]func(w http.ResponseWriter, r *http.Request, hit int)
	srv     *httptest.Server
}

func newFileServer(t *testing.T) *fileServer {
	fs := &fileServer{files: map[string][]byte{}, hits: map[string]int{},
		special: map[string]func(http.ResponseWriter, *http.Request, int){}}
	fs.srv = httptest.NewServer(fs)
	t.Cleanup(fs.srv.Close)
	return fs
}

func (fs *fileServer) url(p string) string { return fs.srv.URL + p }

func (fs *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	fs.hits[r.URL.Path]++
	hit := fs.hits[r.URL.Path]
	if rg := r.Header.Get("Range"); rg != "" {
		fs.ranges = append(fs.ranges, r.URL.Path+" "+rg)
	}
	special, data := fs.special[r.URL.Path], fs.files[r.URL.Path]
	fs.mu.Unlock()
	if special != nil {
		special(w, r, hit)
		return
	}
	if data == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", `"v1"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

func (fs *fileServer) hitCount(p string) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.hits[p]
}

// cutAfter writes the first n bytes of data with the full Content-Length,
// then drops the connection.
func cutAfter(w http.ResponseWriter, data []byte, n int) {
	w.Header().Set("Content-Length", itoa(len(data)))
	w.Header().Set("ETag", `"v1"`)
	w.Header().Set("Accept-Ranges", "bytes")
	w.WriteHeader(http.StatusOK)
	w.Write(data[:n])
	w.(http.Flusher).Flush()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// runAction looks the action up and runs it.
func runAction(t *testing.T, c *Catalog, image string, s Spec, out Output) (Result, error) {
	t.Helper()
	r, err := c.Lookup(image)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", image, err)
	}
	if s.Image == "" {
		s.Image = image
	}
	return r(context.Background(), s, out)
}
