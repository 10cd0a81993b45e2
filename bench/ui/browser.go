package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// page is one page measured.
type page struct {
	// Name is what the result calls it: "fleet", "hardware".
	Name string
	// Path is its path on the server (after the base URL).
	Path string
	// Items is a CSS selector of what the first screen shows (the
	// counts, the rows of the list): how many there are is recorded, and
	// a page with none is a failed run.
	Items string
}

// sample is one page load, every time from the navigation's start
// (PerformanceNavigationTiming's time origin).
type sample struct {
	Server string `json:"server"` // "anvil serve" or "tinkerbell"
	Page   string `json:"page"`
	// Mode is "cold" (the browser's cache emptied first) or "warm" (the
	// same page loaded again, its assets as cached).
	Mode string `json:"mode"`
	Run  int    `json:"run"`
	// TTFBMs is the first byte of the page's answer, FCPMs the first
	// contentful paint, DCLMs the end of DOMContentLoaded, LoadMs the end
	// of the load event.
	TTFBMs float64 `json:"ttfb_ms"`
	FCPMs  float64 `json:"fcp_ms"`
	DCLMs  float64 `json:"dcl_ms"`
	LoadMs float64 `json:"load_ms"`
	// PageBytes is the page's HTML as sent (transferSize, 0 from the
	// cache) and as decoded.
	PageBytes    int64 `json:"page_bytes"`
	PageBodySize int64 `json:"page_body_bytes"`
	// Resources are the page's subresources (stylesheet, scripts, fonts,
	// images): count, bytes over the network and how many came from the
	// browser's cache without a request.
	Resources      int   `json:"resources"`
	ResourceBytes  int64 `json:"resource_bytes"`
	ResourceCached int   `json:"resources_cached"`
	// Items is how many elements of the page's Items selector it had at
	// its load event.
	Items int `json:"items"`
}

// timingJS waits (in the page) for the load event's end and the first
// contentful paint, then returns the navigation's timings. A page that
// never paints content within 5 s of its load reports FCP -1.
const timingJS = `new Promise(resolve => {
  const t0 = performance.now();
  const f = () => {
    const n = performance.getEntriesByType("navigation")[0];
    const p = performance.getEntriesByName("first-contentful-paint")[0];
    if (n && n.loadEventEnd > 0 && (p || performance.now() - t0 > 5000)) {
      const rs = performance.getEntriesByType("resource");
      resolve({ttfb_ms: n.responseStart, fcp_ms: p ? p.startTime : -1, dcl_ms: n.domContentLoadedEventEnd, load_ms: n.loadEventEnd,
        page_bytes: n.transferSize, page_body_bytes: n.decodedBodySize, resources: rs.length,
        resource_bytes: rs.reduce((s, r) => s + r.transferSize, 0),
        resources_cached: rs.filter(r => r.transferSize === 0 && r.decodedBodySize > 0).length,
        items: document.querySelectorAll(%q).length});
    } else {
      setTimeout(f, 10);
    }
  };
  f();
})`

// load navigates to base+p.Path (emptying the browser's cache first when
// cold) and reads the timings.
func load(ctx context.Context, server, base string, p page, cold bool, run int) (sample, error) {
	mode := "warm"
	if cold {
		mode = "cold"
		if _, err := chromedp.Call(ctx, network.ClearBrowserCache, cdp.Empty{}); err != nil {
			return sample{}, fmt.Errorf("clear the cache: %w", err)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a bound, not a measure
	defer cancel()
	if err := chromedp.Do(lctx, chromedp.Navigate(base+p.Path)); err != nil {
		return sample{}, fmt.Errorf("%s %s: %w", server, p.Path, err)
	}
	s, err := chromedp.Run(lctx, chromedp.Evaluate[sample](fmt.Sprintf(timingJS, p.Items), chromedp.EvalAwaitPromise))
	if err != nil {
		return sample{}, fmt.Errorf("%s %s: timings: %w", server, p.Path, err)
	}
	s.Server, s.Page, s.Mode, s.Run = server, p.Name, mode, run
	if s.Items == 0 {
		return s, fmt.Errorf("%s %s: nothing matches %q at the load event: not the page expected", server, p.Path, p.Items)
	}
	return s, nil
}

// measure loads p runs times cold and runs times warm, alternating (a
// cold load, then the same page again), and saves a screenshot of the
// last load into dir (when not empty).
func measure(ctx context.Context, server, base string, p page, runs int, dir, shot string) ([]sample, error) {
	var out []sample
	for r := range runs {
		for _, cold := range []bool{true, false} {
			s, err := load(ctx, server, base, p, cold, r)
			if err != nil {
				return out, err
			}
			progress("%s %s %s run %d: FCP %.0f ms, load %.0f ms (%d items, page %d bytes)", server, p.Name, s.Mode, r, s.FCPMs, s.LoadMs, s.Items, s.PageBodySize)
			out = append(out, s)
		}
	}
	if dir != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			return out, fmt.Errorf("screenshot: %w", err)
		}
		path := filepath.Join(dir, shot)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			return out, err
		}
		progress("screenshot: %s", path)
	}
	return out, nil
}

// stats are the figures of one server's page in one mode.
type stats struct {
	Server       string  `json:"server"`
	Page         string  `json:"page"`
	Mode         string  `json:"mode"`
	Runs         int     `json:"runs"`
	TTFBMedianMs float64 `json:"ttfb_median_ms"`
	FCPMedianMs  float64 `json:"fcp_median_ms"`
	FCPMaxMs     float64 `json:"fcp_max_ms"`
	LoadMedianMs float64 `json:"load_median_ms"`
	LoadMaxMs    float64 `json:"load_max_ms"`
	// ServerCPUMs is the server's CPU time (with the peer's API server
	// and etcd) per load, cold and warm together.
	ServerCPUMs float64 `json:"server_cpu_per_load_ms"`
}

// summarize is the median and worst of the samples of server, page and
// mode.
func summarize(samples []sample, server, pageName, mode string) stats {
	var fcp, ld, ttfb []float64
	for _, s := range samples {
		if s.Server == server && s.Page == pageName && s.Mode == mode {
			fcp, ld, ttfb = append(fcp, s.FCPMs), append(ld, s.LoadMs), append(ttfb, s.TTFBMs)
		}
	}
	return stats{Server: server, Page: pageName, Mode: mode, Runs: len(ld), TTFBMedianMs: median(ttfb),
		FCPMedianMs: median(fcp), FCPMaxMs: maxOf(fcp), LoadMedianMs: median(ld), LoadMaxMs: maxOf(ld)}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Max(v)
}
