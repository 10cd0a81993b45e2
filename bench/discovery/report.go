package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/anvilproj/anvil/internal/benchresult"
)

// report is a run: the throughput phase and, unless switched off, the
// storm phase.
type report struct {
	CPUs       int    `json:"cpus"`
	Inventory  string `json:"inventory_fixture"`
	InvBytes   int    `json:"inventory_bytes"` // machine 0's, as sent
	Throughput *phase `json:"throughput"`
	Storm      *phase `json:"storm,omitempty"`
	// Peer is Tinkerbell's run of the same machines (-peer).
	Peer *phase `json:"peer,omitempty"`

	peer *peerRun
}

func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "discovery bench: %d CPUs, inventory %s (%d bytes each)\n", r.CPUs, r.Inventory, r.InvBytes)
	fmt.Fprintln(tw, "phase\tmachines\tmax\tenrolled\twaiting\tmade\twall s\t/s\tp50 s\tp99 s\trefusals\tbusy\tfull\tCPU s\tCPU/machine ms\tpeak RSS MiB\tRSS/machine KiB\theap/machine KiB\tstore/machine KiB\tGet p50/p99 ms\tfailures")
	for _, p := range []*phase{r.Throughput, r.Peer, r.Storm} {
		if p == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.0f\t%.2f\t%.2f\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f/%.1f\t%d\n",
			p.Name, p.Machines, p.DiscoveryMax, p.Enrolled, p.Waiting, p.HardwareMade, p.WallS, p.PerSecond, p.MachineP50S, p.MachineP99S,
			p.Refusals, p.ServerResults["busy"], p.ServerResults["full"], p.ServerCPUS, p.CPUPerMachineMs, p.PeakRSSMiB,
			p.RSSPerMachineKiB, p.HeapPerMachineKiB, p.StorePerMachineKiB, p.API.P50Ms, p.API.P99Ms, p.Failures)
	}
	tw.Flush()
	for _, p := range []*phase{r.Throughput, r.Peer, r.Storm} {
		if p != nil && p.FirstFailure != "" {
			fmt.Fprintf(w, "%s: first failure: %s\n", p.Name, p.FirstFailure)
		}
	}
}

// errs is what makes the run a failure: a machine that failed, a
// throughput phase that did not enrol every machine, a storm that made
// other than exactly max Hardware or left the API failing.
func (r *report) errs() []error {
	var errs []error
	if p := r.Throughput; p != nil {
		if p.Failures > 0 || p.Enrolled != p.Machines || p.HardwareMade != p.Machines {
			errs = append(errs, fmt.Errorf("throughput: %d of %d enrolled, %d Hardware made, %d failed; first: %s",
				p.Enrolled, p.Machines, p.HardwareMade, p.Failures, p.FirstFailure))
		}
	}
	if p := r.Storm; p != nil {
		if !p.stormHeld() {
			errs = append(errs, fmt.Errorf("storm: %d machines against --discovery-max %d: %d Hardware made, %d enrolled, %d waiting, %d failed; first: %s",
				p.Machines, p.DiscoveryMax, p.HardwareMade, p.Enrolled, p.Waiting, p.Failures, p.FirstFailure))
		}
	}
	if p := r.Peer; p != nil && (p.Failures > 0 || p.Enrolled != p.Machines) {
		errs = append(errs, fmt.Errorf("peer: %d of %d machines got an action from Tinkerbell, %d Hardware made, %d failed; first: %s",
			p.Enrolled, p.Machines, p.HardwareMade, p.Failures, p.FirstFailure))
	}
	for _, p := range []*phase{r.Throughput, r.Storm} {
		if p != nil && (p.API.Errors > 0 || p.API.Calls == 0) {
			errs = append(errs, fmt.Errorf("%s: the API probe: %d calls, %d failed", p.Name, p.API.Calls, p.API.Errors))
		}
	}
	return errs
}

// stormHeld: exactly max made and enrolled, every other machine refused
// to the end, nothing failed.
func (p *phase) stormHeld() bool {
	return p.HardwareMade == p.DiscoveryMax && p.Enrolled == p.DiscoveryMax &&
		p.Waiting == p.Machines-p.DiscoveryMax && p.Failures == 0 && p.ServerResults["full"] >= float64(p.Waiting)
}

// result is the run as a benchresult file: the goals are the issue's
// figures, reported (with Tinkerbell's beside them when -peer ran it), and
// the storm's bound, judged.
func (r *report) result(res *benchresult.Result, version string) {
	t := r.Throughput
	res.Server = benchresult.AnvilServer(version, t.serverArgs)
	scale := fmt.Sprintf("%d unknown machines at once (Discover → Hardware → WorkflowRuleSet → Workflow → token)", t.Machines)
	res.Goals = []benchresult.Goal{
		{Measure: "discovery throughput, " + scale, Target: "report",
			Result: fmt.Sprintf("%.0f machines/s (%.2f s; per machine p50 %.2f s, p99 %.2f s)", t.PerSecond, t.WallS, t.MachineP50S, t.MachineP99S),
			Met:    t.Failures == 0 && t.Enrolled == t.Machines},
		{Measure: "server memory per discovered machine, " + scale, Target: "report",
			Result: fmt.Sprintf("%.0f KiB RSS, %.0f KiB heap (peak RSS %.0f MiB)", t.RSSPerMachineKiB, t.HeapPerMachineKiB, t.PeakRSSMiB),
			Met:    true},
		{Measure: "server CPU per discovered machine, " + scale, Target: "report",
			Result: fmt.Sprintf("%.2f ms", t.CPUPerMachineMs), Met: true},
	}
	if p := r.Peer; p != nil && r.peer != nil {
		res.Peers = []benchresult.Program{r.peer.program}
		res.Goals[0].Peer = fmt.Sprintf("Tinkerbell %.0f machines/s (%.2f s)", p.PerSecond, p.WallS)
		res.Goals[1].Peer = fmt.Sprintf("Tinkerbell + kube-apiserver + etcd %.0f KiB RSS (peaks %.0f MiB together)", p.RSSPerMachineKiB, p.PeakRSSMiB)
		res.Goals[2].Peer = fmt.Sprintf("Tinkerbell + kube-apiserver + etcd %.2f ms", p.CPUPerMachineMs)
	}
	if s := r.Storm; s != nil {
		g := benchresult.Goal{
			Measure: fmt.Sprintf("discovery storm: %d unknown machines against --discovery-max %d", s.Machines, s.DiscoveryMax),
			Target:  fmt.Sprintf("exactly %d made, %d refused, 0 failures", s.DiscoveryMax, s.Machines-s.DiscoveryMax),
			Result: fmt.Sprintf("%d made, %d refused to the end (%.0f full, %.0f busy answers), %d failures",
				s.HardwareMade, s.Waiting, s.ServerResults["full"], s.ServerResults["busy"], s.Failures),
			Met: s.stormHeld(),
		}
		if !g.Met {
			g.Reason = "docs/benchmarks.md#discovery-benchdiscovery"
		}
		res.Goals = append(res.Goals, g, benchresult.Goal{
			Measure: "HardwareService.Get during the discovery storm",
			Target:  "answers, 0 errors",
			Result:  fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d calls, %d errors)", s.API.P50Ms, s.API.P99Ms, s.API.MaxMs, s.API.Calls, s.API.Errors),
			Met:     s.API.Errors == 0 && s.API.Calls > 0,
		})
	}
	res.Figures = r
	samples := map[string]phaseSamples{"throughput": t.samples}
	if r.Storm != nil {
		samples["storm"] = r.Storm.samples
	}
	res.Samples = samples
}

// variant is the result file's suffix: the machine count.
func (o options) resultVariant() string {
	if o.variant != "" {
		return o.variant
	}
	return strconv.Itoa(o.n)
}
