package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anvilproj/anvil/internal/benchresult"
)

// report is the run's figures.
type report struct {
	Machines   int              `json:"machines"`
	CPUs       int              `json:"cpus"`
	BootEnv    string           `json:"bootenv"` // "real" or "sized"
	Files      map[string]int64 `json:"file_bytes"`
	ServerArgs string           `json:"server_args,omitempty"`
	SetupS     float64          `json:"setup_s"`
	StormS     float64          `json:"storm_s"`
	FloorS     float64          `json:"floor_s,omitempty"`
	// FloorCPUS is the bench's CPU time during the floor (both ends of
	// every copy are the bench's).
	FloorCPUS      float64        `json:"floor_cpu_s,omitempty"`
	OverFloor      float64        `json:"storm_over_floor,omitempty"`
	Bytes          int64          `json:"bytes"`
	MachineP50S    float64        `json:"machine_p50_s"`
	MachineP99S    float64        `json:"machine_p99_s"`
	Phases         []phaseStats   `json:"phases"`
	ServerCPUS     float64        `json:"server_cpu_s"`
	BenchCPUS      float64        `json:"bench_cpu_s"`
	PeakRSSMiB     float64        `json:"server_peak_rss_mib"`
	SampledRSSMiB  float64        `json:"server_sampled_rss_mib"`
	Failures       int            `json:"failures"`
	FailuresByKind map[string]int `json:"failures_by_kind"`
	FirstFailure   string         `json:"first_failure,omitempty"`
	// Refusals are responses with Retry-After that the machines waited
	// out and retried, as iPXE does, by status.
	Refusals map[int]int `json:"refusals_retried"`
	// DHCPRetransmits and TFTPRetransmits are requests the machines sent
	// again for want of an answer (after 4 s for DHCP, 1 s for TFTP).
	DHCPRetransmits int `json:"dhcp_retransmits"`
	TFTPRetransmits int `json:"tftp_retransmits"`
	// FloorTFTPRetransmits are the floor's: a floor that lost packets is
	// no floor.
	FloorTFTPRetransmits int          `json:"floor_tftp_retransmits"`
	Abuse                *abuseReport `json:"abuse,omitempty"`
	// PeakInFlight is the most boot path requests the server was serving
	// at once (its anvil_http_boot_requests_in_flight, read every 100 ms,
	// the abusive client's included): what --boot-concurrency must hold.
	PeakInFlight float64 `json:"peak_boot_requests_in_flight"`

	result  *benchresult.Result
	samples samples
}

type phaseStats struct {
	Phase string  `json:"phase"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// EndS is when the last machine finished the phase, from the start.
	SumS float64 `json:"sum_s"`
}

type abuseReport struct {
	Address    string  `json:"address"`
	Served     int64   `json:"served"`
	Refused    int64   `json:"refused"`
	Failed     int64   `json:"failed"`
	ServedPerS float64 `json:"served_per_s"`
}

// samples are the raw per-machine figures of the result file.
type samples struct {
	// PhaseMs[i] is machine i's time in each phase (phaseNames order),
	// in milliseconds; TotalMs[i] its whole boot.
	Phases  []string    `json:"phases"`
	PhaseMs [][]float64 `json:"phase_ms"`
	TotalMs []float64   `json:"total_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (r *report) summarize(outs []machineOut) {
	r.FailuresByKind = map[string]int{}
	r.Refusals = map[int]int{}
	r.samples.Phases = phaseNames[:]
	var totals []time.Duration
	per := make([][]time.Duration, numPhases)
	for _, o := range outs {
		r.Bytes += o.bytes
		r.DHCPRetransmits += o.dhcpRetransmits
		r.TFTPRetransmits += o.tftpRetransmits
		for s, c := range o.refusals {
			r.Refusals[s] += c
		}
		row := make([]float64, numPhases)
		for p := range numPhases {
			row[p] = ms(o.phase[p])
		}
		r.samples.PhaseMs = append(r.samples.PhaseMs, row)
		r.samples.TotalMs = append(r.samples.TotalMs, ms(o.total))
		if o.err != nil {
			r.Failures++
			r.FailuresByKind[o.kind]++
			if r.FirstFailure == "" {
				r.FirstFailure = o.err.Error()
			}
			continue
		}
		totals = append(totals, o.total)
		for p := range numPhases {
			per[p] = append(per[p], o.phase[p])
		}
	}
	r.MachineP50S = percentile(totals, 0.50).Seconds()
	r.MachineP99S = percentile(totals, 0.99).Seconds()
	for p := range numPhases {
		d := per[p]
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		st := phaseStats{Phase: phaseNames[p], P50ms: ms(percentile(d, 0.5)), P99ms: ms(percentile(d, 0.99)), SumS: sum.Seconds()}
		if len(d) > 0 {
			st.MaxMs = ms(d[len(d)-1])
		}
		r.Phases = append(r.Phases, st)
	}
}

func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(f, a...)) }
	row("machines", "%d at once (%d CPUs), %s boot environment: ipxe.efi %d B, kernel %d B, initramfs %d B",
		r.Machines, r.CPUs, r.BootEnv, r.Files["ipxe.efi"], r.Files["vmlinuz"], r.Files["initramfs"])
	if r.ServerArgs != "" {
		row("server flags", "%s", r.ServerArgs)
	}
	row("setup", "%.2f s (Hardware + Workflows applied and rendered)", r.SetupS)
	row("storm", "%.2f s, %.2f GB moved", r.StormS, float64(r.Bytes)/1e9)
	if r.FloorS > 0 {
		row("loopback floor", "%.2f s (storm %.2f× the floor), %.2f s CPU", r.FloorS, r.OverFloor, r.FloorCPUS)
	}
	row("per machine", "p50 %.2f s, p99 %.2f s", r.MachineP50S, r.MachineP99S)
	for _, p := range r.Phases {
		row("  "+p.Phase, "p50 %.1f ms, p99 %.1f ms, max %.1f ms", p.P50ms, p.P99ms, p.MaxMs)
	}
	row("boot requests in flight", "peak %.0f (read every 100 ms)", r.PeakInFlight)
	row("server CPU", "%.2f s (bench %.2f s)", r.ServerCPUS, r.BenchCPUS)
	row("server peak RSS", "%.0f MiB (VmHWM)", r.PeakRSSMiB)
	row("failures", "%d %s", r.Failures, kinds(r.FailuresByKind))
	row("refused, retried", "%s (responses with Retry-After, waited out as iPXE does)", statuses(r.Refusals))
	row("retransmissions", "DHCP %d, TFTP %d (the floor's TFTP %d)", r.DHCPRetransmits, r.TFTPRetransmits, r.FloorTFTPRetransmits)
	if a := r.Abuse; a != nil {
		row("abusive client", "%s: %d served (%.1f/s), %d refused, %d failed", a.Address, a.Served, a.ServedPerS, a.Refused, a.Failed)
	}
	if r.FirstFailure != "" {
		row("first failure", "%s", r.FirstFailure)
	}
	tw.Flush()
}

func kinds(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var ks []string
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(ks)
	return "(" + strings.Join(ks, ", ") + ")"
}

func statuses(m map[int]int) string {
	if len(m) == 0 {
		return "none"
	}
	var ks []string
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("%d × %d", v, k))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// fillResult puts the figures and goals into the result file.
func (r *report) fillResult() {
	res := r.result
	res.Figures = r
	res.Samples = r.samples
	failed := benchresult.Goal{
		Measure: fmt.Sprintf("boot storm: %d machines at once (DHCP via relay, TFTP, HTTP, GetAction), failures", r.Machines),
		Target:  "0 failures",
		Result:  fmt.Sprintf("%d failures %s", r.Failures, kinds(r.FailuresByKind)),
		Met:     r.Failures == 0,
	}
	if r.Failures > 0 {
		failed.Reason = r.FirstFailure
	}
	floor := benchresult.Goal{
		Measure: fmt.Sprintf("boot storm time, %d machines, vs the loopback floor of the same bytes", r.Machines),
		Target:  "report",
		Result:  fmt.Sprintf("%.2f s", r.StormS),
		Met:     true,
	}
	if r.FloorS > 0 {
		floor.Result = fmt.Sprintf("%.2f s (%.2f× the floor)", r.StormS, r.OverFloor)
		floor.Peer = fmt.Sprintf("loopback floor %.2f s", r.FloorS)
	}
	rss := benchresult.Goal{
		Measure: fmt.Sprintf("server peak RSS, boot storm of %d machines", r.Machines),
		Target:  "report",
		Result:  fmt.Sprintf("%.0f MiB", r.PeakRSSMiB),
		Met:     true,
	}
	res.Goals = []benchresult.Goal{failed, floor, rss}
	if r.Abuse != nil {
		res.Goals = append(res.Goals, benchresult.Goal{
			Measure: "abusive client (one address, a loop on one boot file) during the storm",
			Target:  "refused",
			Result:  fmt.Sprintf("%d served (%.1f/s), %d refused", r.Abuse.Served, r.Abuse.ServedPerS, r.Abuse.Refused),
			Met:     r.Abuse.Refused > 0,
		})
	}
}
