package server

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestBootLoadWrk hammers a boot file of a real `anvil serve` (Run, on
// loopback) with wrk — far above --boot-rate — at the default limits,
// and checks from the
// server's own counters that:
//
//   - requests were refused (anvil_http_boot_limited_total went up);
//   - the 200s served stay within the token bucket: at most
//     burst + rate × (the time the test measured around wrk) — a count,
//     not a timing, so a slow or busy machine cannot make it flaky;
//   - the API (Connect JSON List) and /healthz answer 200 throughout.
//
// Every request comes from 127.0.0.1, so the per-client limits are off
// here (they would refuse first and hide the overall ones); TestBootLimits
// and internal/httplimit test them.
func TestBootLoadWrk(t *testing.T) {
	wrk := testtool.RequireBinary(t, "wrk", "wrk")
	const (
		rate        = DefaultBootRate
		burst       = DefaultBootBurst
		concurrency = DefaultBootConcurrency
		connections = 100 // enough to exceed the rate many times over
		duration    = 3 * time.Second
		route       = `/ipxe/binary/{name}`
	)
	tftpDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(tftpDir, "load.bin"), make([]byte, 16<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _, _, _, _ := startWith(t, func(c *Config) {
		c.TFTPDir = tftpDir
		c.BootRate, c.BootBurst, c.BootConcurrency = rate, burst, concurrency
	})
	served := `anvil_http_boot_requests_total{code="200",route="` + route + `"}`
	limited := func(text string) (total float64, by map[string]float64) {
		by = map[string]float64{}
		for _, l := range []string{"rate", "concurrency", "client_rate", "client_concurrency"} {
			by[l] = metricValue(t, text, `anvil_http_boot_limited_total{limit="`+l+`"}`)
			total += by[l]
		}
		return total, by
	}
	before := metricsText(t, base)

	// The control plane, asked while wrk runs: each call must answer 200.
	probeCtx, stopProbes := context.WithCancel(context.Background())
	type probeResult struct {
		calls int
		errs  []string
	}
	probed := make(chan probeResult, 1)
	go func() {
		var res probeResult
		client := &http.Client{Timeout: 10 * time.Second}
		defer func() { probed <- res }()
		for probeCtx.Err() == nil {
			for _, call := range []func() (*http.Response, error){
				func() (*http.Response, error) { return client.Get(base + "/healthz") },
				func() (*http.Response, error) {
					return client.Post(base+"/anvil.v1.HardwareService/List", "application/json", strings.NewReader(`{}`))
				},
			} {
				resp, err := call()
				res.calls++
				if err != nil {
					res.errs = append(res.errs, err.Error())
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					res.errs = append(res.errs, resp.Status)
				}
			}
			select {
			case <-probeCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	cmd := exec.Command(wrk, "-t", "2", "-c", strconv.Itoa(connections), "-d", duration.String(),
		base+"/ipxe/binary/load.bin")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	stopProbes()
	probes := <-probed
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	after := metricsText(t, base)

	total, err := wrkCount(out, `(\d+) requests in`)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	non2xx, err := wrkCount(out, `Non-2xx or 3xx responses: (\d+)`)
	if err != nil {
		non2xx = 0 // wrk omits the line when every answer was 2xx
	}
	got := metricValue(t, after, served) - metricValue(t, before, served)
	limBefore, byBefore := limited(before)
	limAfter, by := limited(after)
	refused := limAfter - limBefore
	for l := range by {
		by[l] -= byBefore[l]
	}
	t.Logf("wrk: %d requests in %.2f s (%.0f req/s offered), %d non-2xx; server: %.0f served 200 (%.0f/s), %.0f refused %v; control plane: %d calls",
		total, elapsed.Seconds(), float64(total)/elapsed.Seconds(), non2xx, got, got/elapsed.Seconds(), refused, by, probes.calls)

	if refused <= 0 {
		t.Errorf("no request was limited: wrk offered %d in %s against --boot-rate %d", total, elapsed, rate)
	}
	// The bucket starts full (burst) and earns rate per second; 1% slack
	// for float rounding only.
	if bound := (burst + rate*elapsed.Seconds()) * 1.01; got > bound {
		t.Errorf("served %.0f in %s; want at most burst + rate × elapsed = %.0f", got, elapsed, bound)
	}
	if got == 0 {
		t.Error("nothing was served")
	}
	// wrk's own split agrees with the server's: every refusal is a non-2xx
	// (requests cut off when wrk stopped are neither).
	if float64(non2xx) > refused || refused-float64(non2xx) > float64(connections) {
		t.Errorf("wrk saw %d non-2xx; the server refused %.0f", non2xx, refused)
	}
	if len(probes.errs) > 0 || probes.calls == 0 {
		t.Errorf("control plane during the load: %d calls, failures %q; want every call 200", probes.calls, probes.errs)
	}
	// Every admitted request has ended: nothing leaks a place.
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(t, metricsText(t, base), "anvil_http_boot_requests_in_flight") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("anvil_http_boot_requests_in_flight did not return to 0 after the load")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wrkCount returns the number the first group of pattern matches in wrk's
// report.
func wrkCount(out []byte, pattern string) (int, error) {
	m := regexp.MustCompile(pattern).FindSubmatch(out)
	if m == nil {
		return 0, &wrkReportError{pattern}
	}
	return strconv.Atoi(string(m[1]))
}

type wrkReportError struct{ pattern string }

func (e *wrkReportError) Error() string { return "wrk's report has no match for " + e.pattern }
