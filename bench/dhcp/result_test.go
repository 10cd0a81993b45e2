package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/benchresult"
)

func ratesRun(keaDrops map[int]int64) []*result {
	anvil := &result{Server: "anvil", program: benchresult.AnvilServer("", []string{"anvil", "serve", "--dhcp-mode", "reservation"})}
	kea := &result{Server: "kea", program: benchresult.Program{Name: "kea-dhcp4", Options: []string{"kea-dhcp4", "-c", "x"}}}
	for _, rate := range []int{2000, 4000, 8000} {
		anvil.Trials = append(anvil.Trials, trial{Rate: rate, Acks: 1000, CPUPerExchange: 30})
		kea.Trials = append(kea.Trials, trial{Rate: rate, Acks: 1000, CPUPerExchange: 50, DODrops: keaDrops[rate]})
	}
	anvil.Trials[2].DODrops = 7 // anvil drops at 8000/s only
	return []*result{anvil, kea}
}

// TestRatesGoals: -rates mode judges anvil against Kea at each offered
// rate, and its drops at the highest rate Kea ran clean, in the same run.
func TestRatesGoals(t *testing.T) {
	o := options{rates: []int{2000, 4000, 8000}, clients: 10, results: t.TempDir()}
	res := benchresult.New("dhcprates")
	if err := recordRates(o, res, ratesRun(map[int]int64{4000: 5}), map[string]any{}); err != nil {
		t.Fatal(err)
	}
	r, err := benchresult.Read(filepath.Join(o.results, "dhcprates.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Goals) != 4 || len(r.Peers) != 1 || r.Peers[0].Name != "kea-dhcp4" {
		t.Fatalf("goals %+v, peers %+v", r.Goals, r.Peers)
	}
	for _, g := range r.Goals[:3] {
		// 30 µs against 50: 0.6×, above the 0.5× goal.
		if g.Met || !strings.Contains(g.Result, "0.60×") || !strings.HasPrefix(g.Peer, "Kea 50.0 µs") || g.Reason == "" {
			t.Errorf("CPU goal %+v", g)
		}
	}
	// Kea dropped at 4000/s but not at 8000/s: its highest clean rate is
	// 8000/s, where anvil dropped 7.
	if d := r.Goals[3]; d.Met || !strings.Contains(d.Result, "7 drops at 8000/s") {
		t.Errorf("drops goal %+v", d)
	}

	res = benchresult.New("dhcprates")
	if err := recordRates(o, res, ratesRun(map[int]int64{8000: 9}), map[string]any{}); err != nil {
		t.Fatal(err)
	}
	r, _ = benchresult.Read(filepath.Join(o.results, "dhcprates.json"))
	if d := r.Goals[3]; !d.Met || !strings.Contains(d.Result, "0 drops at 4000/s") {
		t.Errorf("drops goal with Kea clean up to 4000/s: %+v", d)
	}

	res = benchresult.New("dhcprates")
	if err := recordRates(o, res, ratesRun(map[int]int64{2000: 1, 4000: 1, 8000: 1}), map[string]any{}); err != nil {
		t.Fatal(err)
	}
	r, _ = benchresult.Read(filepath.Join(o.results, "dhcprates.json"))
	if d := r.Goals[3]; d.Met || d.Result != "not judged" || !strings.Contains(d.Reason, "every offered rate") {
		t.Errorf("drops goal with Kea never clean: %+v", d)
	}
}
