package main

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// inFlightSeries is the server's gauge of admitted boot path requests being
// served: its peak during the storm is what --boot-concurrency must hold
// for no machine to be refused.
const inFlightSeries = "anvil_http_boot_requests_in_flight"

// peakInFlight reads the gauge from the server's /metrics every 100 ms
// until ctx ends, and returns the largest value read.
func peakInFlight(ctx context.Context, metricsURL string) float64 {
	hc := &http.Client{Timeout: 2 * time.Second}
	peak := 0.0
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if v, ok := scrape(ctx, hc, metricsURL, inFlightSeries); ok && v > peak {
			peak = v
		}
		select {
		case <-ctx.Done():
			return peak
		case <-t.C:
		}
	}
}

// scrape reads one unlabelled series from a Prometheus text page.
func scrape(ctx context.Context, hc *http.Client, url, series string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
