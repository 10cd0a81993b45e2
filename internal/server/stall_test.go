package server

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestStalledDownloadsFreeTheBootPath is issue 13's probe, replayed:
// --boot-concurrency's default (issue 13 had 70) connections, 8 from each
// address, ask for an OS image and never read (their
// receive buffers are small, so the server's writes block). They fill the
// default --boot-concurrency and a machine is refused 503. Then each is
// cut after --boot-stall-timeout (short here), counted, its slot freed,
// and curl downloads the whole image.
func TestStalledDownloadsFreeTheBootPath(t *testing.T) {
	curl := testtool.RequireBinary(t, "curl", "curl")
	const size = 32 << 20 // far more than the socket buffers hold
	images := t.TempDir()
	f, err := os.Create(filepath.Join(images, "os.raw"))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Truncate(size), f.Close()); err != nil {
		t.Fatal(err)
	}
	base, _, _, _, logs := startWith(t, func(c *Config) {
		c.ImagesDir = images
		c.BootRate, c.BootBurst, c.BootConcurrency = DefaultBootRate, DefaultBootBurst, DefaultBootConcurrency
		c.BootClientRate, c.BootClientBurst, c.BootClientConcurrency = DefaultBootClientRate, DefaultBootClientBurst, DefaultBootClientConcurrency
		// Short, so the test waits little (what it waits for is the
		// counter and the gauge, not the time), yet long enough that the
		// stalled connections are all admitted before the first is cut, and
		// that curl's own download never pauses as long, on a busy
		// machine.
		c.BootStallTimeout = 10 * time.Second
	})
	addr := strings.TrimPrefix(base, "http://")
	url := base + "/images/os.raw"
	cutSeries := `anvil_http_boot_cut_total{reason="stall"}`
	cutsBefore := metricValue(t, metricsText(t, base), cutSeries)

	const stalled = DefaultBootConcurrency
	const stallers = (stalled + DefaultBootClientConcurrency - 1) / DefaultBootClientConcurrency
	for i := range stalled {
		// 127.0.0.1, 127.0.0.2, …, at most 8 (the per-client limit) each.
		testtool.StalledGet(t, net.IPv4(127, 0, 0, byte(1+i/DefaultBootClientConcurrency)), addr, "/images/os.raw")
	}
	// curl asks from an address none of them has, so that only the
	// overall limit can refuse it.
	curlAddr := "127.0.0." + strconv.Itoa(stallers+1)
	inFlight := func() float64 { return metricValue(t, metricsText(t, base), "anvil_http_boot_requests_in_flight") }
	testtool.WaitFor(t, "the stalled downloads to fill --boot-concurrency", func() bool { return inFlight() == stalled })

	// curl from another address: refused, the server is full.
	out, err := exec.Command(curl, "-sS", "--interface", curlAddr, "-o", os.DevNull, "-w", "%{http_code}", url).Output()
	if err != nil || string(out) != "503" {
		t.Fatalf("curl with every slot held by a stalled download: %q, %v; want 503", out, err)
	}

	testtool.WaitFor(t, "the stalled downloads to be cut", func() bool {
		return metricValue(t, metricsText(t, base), cutSeries)-cutsBefore == stalled
	})
	testtool.WaitFor(t, "every slot to be free", func() bool { return inFlight() == 0 })
	out, err = exec.Command(curl, "-sS", "--interface", curlAddr, "-o", os.DevNull, "-w", "%{http_code} %{size_download}", url).Output()
	if want := "200 " + strconv.Itoa(size); err != nil || string(out) != want {
		t.Errorf("curl after the cuts: %q, %v; want %q", out, err, want)
	}
	if got := strings.Count(logs.String(), "download cut"); got != stalled {
		t.Errorf("%d download cut lines in the log; want %d", got, stalled)
	}
}
