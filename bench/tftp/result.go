package main

import (
	"fmt"

	"github.com/anvilproj/anvil/internal/benchresult"
)

// whyTFTP is where the TFTP figures are discussed, for a goal not met.
const whyTFTP = "docs/tftp.md#benchmark"

// peerRatio is issue 18's TFTP goal: anvil at least as fast as a peer
// with the same client and the same options.
const peerRatio = 1.0

// record writes the run's result file. Every comparison is at equal
// options: anvil's row against atftpd's with the same client, blksize and
// windowsize (issue 18: ≥ 1.0×), and for the many-clients file against
// tftpd-hpa's too; plus the earlier goal (windowsize ≥ 5× the fastest peer
// without it) and no failed transfer.
func record(res *benchresult.Result, cfg config, servers []*server, rows []*row) error {
	for _, s := range servers {
		p := benchresult.Program{Name: s.name, Options: s.argv}
		switch s.name {
		case "anvil":
			p.Name = benchresult.ServerUnderTest
			p.Version = benchresult.Version(cfg.anvil, "version")
		case "dnsmasq":
			p.Version = benchresult.Version(cfg.dnsmasq, "--version")
		case "tftpd-hpa":
			p.Version = benchresult.Version(cfg.hpa, "-V")
		case "atftpd":
			p.Version = benchresult.Version(cfg.atftpd, "--version")
		default: // the harness: a diagnostic beside anvil serve
			p.Name = s.name + " (" + s.note + ")"
		}
		if p.Name == benchresult.ServerUnderTest {
			res.Server = p
		} else {
			res.Peers = append(res.Peers, p)
		}
	}
	find := func(server, test, client string) *row {
		for _, r := range rows {
			if r.Server == server && r.Test == test && r.Client == client {
				return r
			}
		}
		return nil
	}
	figure := func(r *row) string {
		return fmt.Sprintf("%.1f MiB/s, %.2f s server CPU, %d/%d failed", r.MiBps, r.ServerCPU, r.Failed, r.Transfers)
	}
	failed, transfers := 0, 0
	for _, a := range rows {
		if a.Server != "anvil" {
			continue
		}
		failed += a.Failed
		transfers += a.Transfers
		for _, peer := range []string{"atftpd", "tftpd-hpa"} {
			p := find(peer, a.Test, a.Client)
			if peer == "tftpd-hpa" && (a.Test == fmt.Sprintf("%s × 1", sizeName(cfg.bigSize))) {
				continue // issue 18 names tftpd-hpa for the many-clients file
			}
			g := benchresult.Goal{Measure: fmt.Sprintf("MiB/s, %s, %s, same options as %s", a.Test, a.Client, peer),
				Target: fmt.Sprintf("≥ %.1f× %s", peerRatio, peer), Result: figure(a)}
			switch {
			case p == nil && peer == "atftpd" && cfg.atftpd == "":
				g.Reason = "atftpd was not run (-atftpd not given: its .deb could not be fetched)"
			case p == nil:
				continue // the peer does not grant these options (tftpd-hpa: no windowsize)
			case p.MiBps == 0:
				g.Peer, g.Reason = figure(p), peer+" moved nothing"
			default:
				q := a.MiBps / p.MiBps
				g.Result = fmt.Sprintf("%.2f× (%s)", q, figure(a))
				g.Peer = figure(p)
				g.Met = q >= peerRatio
			}
			if !g.Met && g.Reason == "" {
				g.Reason = whyTFTP
			}
			res.Goals = append(res.Goals, g)
		}
		if a.Window > 0 && a.Test == fmt.Sprintf("%s × 1", sizeName(cfg.bigSize)) {
			g := benchresult.Goal{Measure: fmt.Sprintf("MiB/s, %s, %s, over the fastest peer without windowsize", a.Test, a.Client),
				Target: fmt.Sprintf("≥ %.0f×", targetRatio), Result: fmt.Sprintf("%.1f× (%.1f MiB/s)", a.Ratio, a.MiBps), Met: a.Ratio >= targetRatio}
			if !g.Met {
				g.Reason = whyTFTP
			}
			res.Goals = append(res.Goals, g)
		}
	}
	g := benchresult.Goal{Measure: "failed transfers from anvil, every row", Target: "0",
		Result: fmt.Sprintf("%d of %d", failed, transfers), Met: failed == 0 && transfers > 0}
	if !g.Met {
		g.Reason = "see the run's log: a client's exit status or content differing"
	}
	res.Goals = append(res.Goals, g)

	var samples []map[string]any
	for _, r := range rows {
		for i, s := range r.samples {
			samples = append(samples, map[string]any{"test": r.Test, "client": r.Client, "server": r.Server, "windowsize": r.Window,
				"run": i + 1, "mib_per_s": s.mibps, "wall_s": s.wall, "server_cpu_s": s.serverCPU, "client_cpu_s": s.clientCPU, "failed": s.failed})
		}
	}
	res.Figures = map[string]any{"runs": cfg.runs, "medians": rows, "netns": cfg.netns,
		"clients": map[string]string{"atftp": benchresult.Version("atftp", "--version"), "curl": benchresult.Version("curl", "--version")}}
	res.Samples = samples
	return res.Save(cfg.results, "")
}
