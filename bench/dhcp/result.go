package main

import (
	"fmt"
	"math"
	"slices"

	"github.com/anvilproj/anvil/internal/benchresult"
)

// Where the DHCP figures are discussed, for a goal not met.
const (
	whySearch = "docs/dhcp.md#benchmark"
	whyRates  = "docs/dhcp.md#at-fixed-offered-rates-2026-11-28"
)

// servers puts the measured programs into res: anvil as the server under
// test, the others as peers, and perfdhcp's command line as the client's.
func servers(res *benchresult.Result, results []*result) {
	for _, r := range results {
		p := r.program
		switch {
		case p.Name == "":
			continue // it never started
		case r.Server == "anvil":
			res.Server = p
		case r.Server == "anvil-base":
			p.Name = "anvil serve of -anvil-base (the baseline build)"
			res.Peers = append(res.Peers, p)
		default:
			res.Peers = append(res.Peers, p)
		}
	}
}

func byServer(results []*result) map[string]*result {
	m := map[string]*result{}
	for _, r := range results {
		m[r.Server] = r
	}
	return m
}

// clientFigures says how the load was generated.
func clientFigures(o options, rate string, summary map[string]any) map[string]any {
	args := perfdhcpArgs(o.clients, 0, int(math.Ceil(o.duration.Seconds())))
	if i := slices.Index(args, "-r"); i >= 0 {
		args[i+1] = "RATE" // each trial's, in the samples
	}
	summary["client"] = map[string]any{
		"program": benchresult.Version("perfdhcp", "-v"),
		"command": append([]string{"ip", "netns", "exec", "anvb-cli-PID"}, args...),
		"rate":    rate,
	}
	return summary
}

// recordSearch writes the rate search's result: the rate anvil sustains
// with 0 drops and its multiple of dnsmasq's (the targets of -min-rate and
// -min-ratio). Kea's rate is shown beside, not judged: a search stops
// each server at another step, so the comparison with Kea is -rates'.
func recordSearch(o options, res *benchresult.Result, results []*result, summary map[string]any) error {
	servers(res, results)
	m := byServer(results)
	a := m["anvil"]
	if a == nil || a.Achieved == 0 {
		return fmt.Errorf("no result file: anvil was not measured (%v)", a)
	}
	peer := func(name string) string {
		if p := m[name]; p != nil && p.Achieved > 0 {
			return fmt.Sprintf("%s %.0f/s, %.1f µs CPU/exchange", name, p.Achieved, p.CPUPerExchange)
		}
		return ""
	}
	scale := fmt.Sprintf("perfdhcp, %d reservations, 0 drops", o.clients)
	g := benchresult.Goal{Measure: "highest rate, " + scale, Target: fmt.Sprintf("≥ %.0f DORA/s", o.minRate),
		Result: fmt.Sprintf("%.0f/s, %.1f µs CPU/exchange", a.Achieved, a.CPUPerExchange), Peer: peer("kea"), Met: a.Achieved >= o.minRate}
	res.Goals = append(res.Goals, g)
	if d := m["dnsmasq"]; d != nil && d.Achieved > 0 {
		q := a.Achieved / d.Achieved
		res.Goals = append(res.Goals, benchresult.Goal{Measure: "highest rate over dnsmasq's, " + scale,
			Target: fmt.Sprintf("≥ %.0f×", o.minRatio), Result: fmt.Sprintf("%.1f×", q), Peer: peer("dnsmasq"), Met: q >= o.minRatio})
	}
	for i := range res.Goals {
		if !res.Goals[i].Met {
			res.Goals[i].Reason = whySearch
		}
	}
	res.Figures = clientFigures(o, "searched per server", summary)
	res.Samples = results
	return res.Save(o.results, "")
}

// recordRates writes -rates mode's result: issue 18's goals, judged at
// the same offered rates for anvil and Kea: at each rate anvil's server
// CPU per exchange at most half Kea's, and no drops at the highest rate
// at which Kea dropped none.
func recordRates(o options, res *benchresult.Result, results []*result, summary map[string]any) error {
	servers(res, results)
	m := byServer(results)
	a, k := m["anvil"], m["kea"]
	if a == nil || len(a.Trials) == 0 {
		return fmt.Errorf("no result file: anvil was not measured (%v)", a)
	}
	drops := func(t *trial) int64 { return t.DODrops + t.RADrops }
	clean := 0 // Kea's highest offered rate with no drops
	for _, rate := range o.rates {
		at := trialAt(a, rate)
		if at == nil {
			continue
		}
		g := benchresult.Goal{Measure: fmt.Sprintf("server CPU per exchange at %d/s offered (perfdhcp, %d reservations)", rate, o.clients),
			Target: "≤ 0.5× Kea's", Result: fmt.Sprintf("%.1f µs, %d drops", at.CPUPerExchange, drops(at))}
		if k == nil {
			g.Reason = "Kea was not measured in this run"
		} else if kt := trialAt(k, rate); kt == nil || kt.CPUPerExchange == 0 {
			g.Reason = "Kea completed no exchange at this rate"
		} else {
			q := at.CPUPerExchange / kt.CPUPerExchange
			g.Result = fmt.Sprintf("%.1f µs (%.2f×), %d drops", at.CPUPerExchange, q, drops(at))
			g.Peer = fmt.Sprintf("Kea %.1f µs, %d drops", kt.CPUPerExchange, drops(kt))
			g.Met = q <= 0.5
			if drops(kt) == 0 && rate > clean { // -rates need not be in order
				clean = rate
			}
		}
		if !g.Met && g.Reason == "" {
			g.Reason = whyRates
		}
		res.Goals = append(res.Goals, g)
	}
	g := benchresult.Goal{Measure: "drops at Kea's highest clean offered rate, same run", Target: "0"}
	if at := trialAt(a, clean); clean > 0 && at != nil {
		g.Result = fmt.Sprintf("%d drops at %d/s", drops(at), clean)
		g.Peer = fmt.Sprintf("Kea 0 drops at %d/s", clean)
		g.Met = drops(at) == 0
		if !g.Met {
			g.Reason = whyRates
		}
	} else {
		g.Result = "not judged"
		g.Reason = "Kea dropped exchanges at every offered rate of this run (or was not measured): no clean rate to judge at"
	}
	res.Goals = append(res.Goals, g)
	res.Figures = clientFigures(o, fmt.Sprint(o.rates), summary)
	res.Samples = results
	return res.Save(o.results, "")
}
