package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestUISmall runs the bench for real at a small scale, without the
// peer: 200 machines in a freshly built `anvil serve`, each page loaded
// once cold and once warm in headless Chromium. Every load must have
// timings and the page's items (the fleet page's counts, 50 rows of the
// list), and the result must validate. Nothing here judges how fast.
func TestUISmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds anvil and runs it with a browser")
	}
	testtool.RequireBinary(t, "chromium", "chromium")
	root := testtool.ModuleRoot(t)
	bin := filepath.Join(t.TempDir(), "anvil")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/anvil")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/anvil: %v\n%s", err, out)
	}
	dir := t.TempDir()
	o := options{n: 200, runs: 1, anvil: bin, chromium: "chromium", shots: dir, results: dir, timeout: 3 * time.Minute}
	var out strings.Builder
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	res, err := benchresult.Read(filepath.Join(dir, "ui-200.json"))
	if err != nil {
		t.Fatal(err)
	}
	samples, ok := res.Samples.([]any)
	if !ok || len(samples) != 4 {
		t.Fatalf("samples %v; want 4 (2 pages × cold and warm)", res.Samples)
	}
	for _, s := range samples {
		m := s.(map[string]any)
		want := 50.0 // rows of the list's first page
		if m["page"] == "fleet" {
			want = 7 // one count per state
		}
		if m["items"] != want || m["load_ms"].(float64) <= 0 || m["ttfb_ms"].(float64) <= 0 {
			t.Errorf("sample %v: want %v items and timings", m, want)
		}
	}
	if len(res.Goals) != 2 || res.Server.Name != benchresult.ServerUnderTest {
		t.Errorf("goals %+v, server %q", res.Goals, res.Server.Name)
	}
}

func TestSummarize(t *testing.T) {
	s := []sample{
		{Server: "a", Page: "p", Mode: "cold", FCPMs: 30, LoadMs: 10},
		{Server: "a", Page: "p", Mode: "cold", FCPMs: 10, LoadMs: 50},
		{Server: "a", Page: "p", Mode: "cold", FCPMs: 20, LoadMs: 20},
		{Server: "a", Page: "p", Mode: "warm", FCPMs: 1000, LoadMs: 1000},
		{Server: "b", Page: "p", Mode: "cold", FCPMs: 1000, LoadMs: 1000},
	}
	got := summarize(s, "a", "p", "cold")
	if got.Runs != 3 || got.FCPMedianMs != 20 || got.FCPMaxMs != 30 || got.LoadMedianMs != 20 || got.LoadMaxMs != 50 {
		t.Errorf("summarize = %+v; want 3 runs, FCP 20 (30), load 20 (50)", got)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 1..4 = %v; want 2.5", m)
	}
}

func TestTotalLine(t *testing.T) {
	if got := totalLine("Hardware\n  Showing 1 to 50 of 10000 results \nnode-1"); got != `it says "Showing 1 to 50 of 10000 results"` {
		t.Errorf("totalLine = %s", got)
	}
	if got := totalLine("nothing here"); got != "no line of it gives a total" {
		t.Errorf("totalLine = %s", got)
	}
}
