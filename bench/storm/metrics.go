package main

import (
	"context"
	"net/http"
	"time"

	"github.com/anvilproj/anvil/internal/benchproc"
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
		if m, err := benchproc.ScrapeMetrics(ctx, hc, metricsURL); err == nil {
			if v, ok := m.Value(inFlightSeries); ok && v > peak {
				peak = v
			}
		}
		select {
		case <-ctx.Done():
			return peak
		case <-t.C:
		}
	}
}
