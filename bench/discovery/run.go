package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/model"
)

type options struct {
	n         int
	stormMax  int // --discovery-max of the storm phase; 0: no storm phase
	anvil     string
	inventory string
	getAction bool
	wait      time.Duration
	probe     time.Duration
	timeout   time.Duration
	logLevel  string
	serverArg string
	keep      bool
	jsonOut   bool
	results   string
	variant   string
	peer      string // the tinkerbell binary; "": no peer
}

func (o *options) check() error {
	if o.n < 1 || o.n > 1<<24 {
		return fmt.Errorf("-n %d: want 1..%d (a MAC and UUID each)", o.n, 1<<24)
	}
	if o.stormMax < 0 || o.stormMax >= o.n {
		return fmt.Errorf("-storm-max %d: want 0 (no storm phase) or 1..%d (below -n, so that some machines are refused)", o.stormMax, o.n-1)
	}
	if o.wait <= 0 || o.probe <= 0 {
		return errors.New("-wait and -probe-every must be > 0")
	}
	return nil
}

// phase is one server's run: N machines at once against --discovery-max.
type phase struct {
	Name         string `json:"name"` // "throughput" or "storm"
	Machines     int    `json:"machines"`
	DiscoveryMax int    `json:"discovery_max"`
	// Enrolled machines got their workflow (Hardware made, a rule's
	// Workflow made, the token handed over); Waiting ones were still
	// refused when the storm phase ended (a storm phase's N−max).
	Enrolled int `json:"enrolled"`
	Waiting  int `json:"waiting"`
	// HardwareMade is the discovered Hardware listed at the end
	// (HardwareService.List, label anvil.io/discovered=true).
	HardwareMade int `json:"hardware_made"`
	// WallS is from the first Discover call to the last token.
	WallS       float64 `json:"wall_s"`
	PerSecond   float64 `json:"enrolled_per_s"`
	MachineP50S float64 `json:"machine_p50_s"`
	MachineP99S float64 `json:"machine_p99_s"`
	MachineMaxS float64 `json:"machine_max_s"`
	// GetAction is the first GetAction of each enrolled machine, with its
	// token.
	GetActionP50Ms float64 `json:"get_action_p50_ms,omitempty"`
	GetActionP99Ms float64 `json:"get_action_p99_ms,omitempty"`
	// Refusals are RESOURCE_EXHAUSTED answers the machines were given and
	// asked again after the agent's back-off; ServerResults are the
	// server's own anvil_discovery_total{result} during the phase (busy:
	// too many calls at once; full: --discovery-max reached).
	Refusals      int64              `json:"refusals_retried"`
	OtherErrors   int64              `json:"other_errors"`
	ServerResults map[string]float64 `json:"server_discovery_results"`
	Enrolments    map[string]float64 `json:"server_enrolments"`
	ServerCPUS    float64            `json:"server_cpu_s"`
	// CPUPerMachineMs, RSSPerMachineKiB, HeapPerMachineKiB and
	// StorePerMachineKiB are per Hardware made.
	CPUPerMachineMs    float64 `json:"server_cpu_per_machine_ms"`
	BenchCPUS          float64 `json:"bench_cpu_s"`
	PeakRSSMiB         float64 `json:"server_peak_rss_mib"`
	RSSBeforeMiB       float64 `json:"server_rss_before_mib"`
	RSSAfterMiB        float64 `json:"server_rss_after_mib"`
	RSSPerMachineKiB   float64 `json:"server_rss_per_machine_kib"`
	HeapBeforeMiB      float64 `json:"server_heap_before_mib"`
	HeapAfterMiB       float64 `json:"server_heap_after_mib"`
	HeapPerMachineKiB  float64 `json:"server_heap_per_machine_kib"`
	StoreBeforeBytes   int64   `json:"store_before_bytes"`
	StoreAfterBytes    int64   `json:"store_after_bytes"`
	StorePerMachineKiB float64 `json:"store_per_machine_kib"`
	// API is HardwareService.Get of an operator's Hardware, called in a
	// loop during the phase.
	API          probeStats `json:"api_get_hardware"`
	Failures     int        `json:"failures"`
	FirstFailure string     `json:"first_failure,omitempty"`

	serverArgs []string
	samples    phaseSamples
}

type probeStats struct {
	Calls  int     `json:"calls"`
	Errors int     `json:"errors"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// phaseSamples are a phase's raw figures.
type phaseSamples struct {
	// MachineMs[i] is machine i's time to its workflow (0: it got none);
	// Refusals[i] its RESOURCE_EXHAUSTED answers.
	MachineMs []float64 `json:"machine_ms"`
	Refusals  []int64   `json:"refusals"`
	// APIMs are the probe's calls' latencies, in order.
	APIMs []float64 `json:"api_get_hardware_ms"`
}

func progress(format string, args ...any) {
	fmt.Fprintf(stderr, "discovery: "+format+"\n", args...)
}

// runPhase starts a server with --discovery --discovery-max limit, gives
// it the rule sets, and powers on n machines at once. With limit < n (the
// storm), it ends once limit machines have their workflows and each of
// the others has been refused since.
func runPhase(ctx context.Context, o options, base *model.Attributes, name string, n, limit int) (*phase, error) {
	benchproc.RaiseNoFile()
	args := []string{"--discovery", "--discovery-max", strconv.Itoa(limit)}
	args = append(args, strings.Fields(o.serverArg)...)
	srv, err := benchproc.Start(ctx, benchproc.Options{Binary: o.anvil, LogLevel: o.logLevel, Args: args, Progress: progress})
	if err != nil {
		return nil, err
	}
	defer srv.Cleanup(o.keep)
	defer srv.Kill()
	p := &phase{Name: name, Machines: n, DiscoveryMax: limit, serverArgs: srv.Args()}

	admin := benchproc.NewH2CClient()
	grpcURL := "http://" + srv.GRPCAddr
	if _, err := anvilv1connect.NewManifestServiceClient(admin, grpcURL, connect.WithGRPC()).Apply(ctx,
		connect.NewRequest(&v1.ApplyRequest{Source: "discovery-bench.yaml", Content: manifests()})); err != nil {
		return nil, fmt.Errorf("apply the rule sets: %w", err)
	}
	hwc := anvilv1connect.NewHardwareServiceClient(admin, grpcURL, connect.WithGRPC())
	metricsURL := "http://" + srv.HTTPAddr + "/metrics"
	mhc := &http.Client{Timeout: 5 * time.Second}
	m0, err := benchproc.ScrapeMetrics(ctx, mhc, metricsURL)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(srv.Dir, "data")
	p.StoreBeforeBytes = dirBytes(dataDir)
	p.RSSBeforeMiB = benchproc.MiB(benchproc.ProcStatusKB(srv.PID, "VmRSS"))
	p.HeapBeforeMiB = benchproc.MiB(int64(value0(m0, "go_memstats_heap_alloc_bytes")))
	cpu0, self0 := srv.CPU(), benchproc.SelfCPU()

	// The API probe.
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		p.samples.APIMs, p.API.Errors = probeAPI(probeCtx, hwc, o.probe)
	}()

	progress("%s: %d machines at once, --discovery-max %d", name, n, limit)
	mctx, stopMachines := context.WithCancel(ctx)
	defer stopMachines()
	outs := make([]machineOut, n)
	ccs := make([]*countingClient, n)
	hcs := make([]*http.Client, n)
	for i := range n {
		hcs[i] = benchproc.NewH2CClient() // a connection of its own, as each machine has
		ccs[i] = &countingClient{AgentServiceClient: anvilv1connect.NewAgentServiceClient(hcs[i], grpcURL, connect.WithGRPC())}
	}
	var enrolled atomic.Int64
	full := make(chan time.Time, 1) // when limit machines had their workflows
	ready := func() {
		if enrolled.Add(1) == int64(limit) {
			full <- time.Now()
		}
	}
	monitorDone := make(chan struct{})
	if limit < n {
		go func() {
			defer close(monitorDone)
			fullAnswers := func() float64 {
				m, err := benchproc.ScrapeMetrics(mctx, mhc, metricsURL)
				if err != nil {
					return 0
				}
				v, _ := m.Value("anvil_discovery_total", "result", "full")
				return v - value0(m0, "anvil_discovery_total", "result", "full")
			}
			watchStorm(mctx, ccs, n-limit, full, fullAnswers, stopMachines)
		}()
	} else {
		close(monitorDone)
	}
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Go(func() { outs[i] = machine(mctx, i, base, grpcURL, o, hcs[i], ccs[i], ready) })
	}
	wg.Wait()
	stopMachines()
	<-monitorDone
	stopProbe()
	<-probeDone
	p.BenchCPUS = benchproc.SelfCPU() - self0
	p.ServerCPUS = srv.CPU() - cpu0
	p.PeakRSSMiB = benchproc.MiB(benchproc.VmHWM(srv.PID))
	p.RSSAfterMiB = benchproc.MiB(benchproc.ProcStatusKB(srv.PID, "VmRSS"))
	m1, err := benchproc.ScrapeMetrics(ctx, mhc, metricsURL)
	if err != nil {
		return nil, err
	}
	p.HeapAfterMiB = benchproc.MiB(int64(value0(m1, "go_memstats_heap_alloc_bytes")))
	p.ServerResults = deltas(m0, m1, "anvil_discovery_total", "discovered", "refreshed", "known", "collision", "full", "busy", "bad-inventory")
	p.Enrolments = deltas(m0, m1, "anvil_enrolments_total", "enrolled", "failed")
	l, err := hwc.List(ctx, connect.NewRequest(&v1.ListRequest{Namespace: benchfleet.Namespace, LabelSelector: model.LabelDiscovered + "=true"}))
	if err != nil {
		return nil, fmt.Errorf("list discovered Hardware: %w", err)
	}
	p.HardwareMade = len(l.Msg.GetItems())
	if err := srv.Stop(30 * time.Second); err != nil {
		return p, err
	}
	p.StoreAfterBytes = dirBytes(dataDir) // after the store closed: what it keeps
	p.summarize(outs, t0)
	progress("%s: %d enrolled in %.2f s (%.0f/s), %d waiting, %d failed", name, p.Enrolled, p.WallS, p.PerSecond, p.Waiting, p.Failures)
	return p, nil
}

// watchStorm stops the machines (stop) once max of them have their
// workflows (the time comes on full), every other one has been refused
// since, and the server has answered "full" (the cap, not only "busy")
// at least once for each of the refused machines (fullAnswers, a count
// since the phase began).
func watchStorm(ctx context.Context, ccs []*countingClient, refused int, full <-chan time.Time, fullAnswers func() float64, stop func()) {
	var at time.Time
	select {
	case at = <-full:
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		all := true
		for _, cc := range ccs {
			if w, _ := cc.workflow.Load().(string); w == "" && cc.lastRefused.Load() <= at.UnixNano() {
				all = false
				break
			}
		}
		if all && fullAnswers() >= float64(refused) {
			stop()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// summarize fills p's machine figures from outs; t0 is the phase's start.
func (p *phase) summarize(outs []machineOut, t0 time.Time) {
	var totals, gets []time.Duration
	var last time.Time
	p.samples.MachineMs = make([]float64, len(outs))
	p.samples.Refusals = make([]int64, len(outs))
	for i, out := range outs {
		p.samples.Refusals[i] = out.cc.refused.Load()
		p.Refusals += out.cc.refused.Load()
		p.OtherErrors += out.cc.other.Load()
		switch {
		case out.total > 0:
			p.Enrolled++
			totals = append(totals, out.total)
			p.samples.MachineMs[i] = ms(out.total)
			if out.tokenAt.After(last) {
				last = out.tokenAt
			}
			if out.getAction > 0 {
				gets = append(gets, out.getAction)
			}
		case errors.Is(out.err, context.Canceled) && p.DiscoveryMax < p.Machines:
			p.Waiting++ // refused by the cap until the storm ended
			continue
		}
		if out.err != nil {
			if p.Failures == 0 {
				p.FirstFailure = out.err.Error()
			}
			p.Failures++
		}
	}
	if p.Enrolled > 0 {
		p.WallS = last.Sub(t0).Seconds()
		p.PerSecond = float64(p.Enrolled) / p.WallS
	}
	p.MachineP50S = percentile(totals, 0.50).Seconds()
	p.MachineP99S = percentile(totals, 0.99).Seconds()
	p.MachineMaxS = percentile(totals, 1).Seconds()
	if len(gets) > 0 {
		p.GetActionP50Ms = ms(percentile(gets, 0.50))
		p.GetActionP99Ms = ms(percentile(gets, 0.99))
	}
	if made := float64(p.HardwareMade); made > 0 {
		p.CPUPerMachineMs = p.ServerCPUS / made * 1000
		p.RSSPerMachineKiB = (p.RSSAfterMiB - p.RSSBeforeMiB) * 1024 / made
		p.HeapPerMachineKiB = (p.HeapAfterMiB - p.HeapBeforeMiB) * 1024 / made
		p.StorePerMachineKiB = float64(p.StoreAfterBytes-p.StoreBeforeBytes) / 1024 / made
	}
	api := make([]time.Duration, len(p.samples.APIMs))
	for i, v := range p.samples.APIMs {
		api[i] = time.Duration(v * float64(time.Millisecond))
	}
	p.API.Calls = len(api)
	p.API.P50Ms = ms(percentile(api, 0.50))
	p.API.P99Ms = ms(percentile(api, 0.99))
	p.API.MaxMs = ms(percentile(api, 1))
}

// probeAPI gets the operator's Hardware every interval until ctx ends,
// one call at a time, and returns each call's latency (ms) and the
// failed calls.
func probeAPI(ctx context.Context, hwc anvilv1connect.HardwareServiceClient, every time.Duration) (lat []float64, errs int) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		start := time.Now()
		_, err := hwc.Get(ctx, connect.NewRequest(&v1.GetRequest{Namespace: benchfleet.Namespace, Name: probeName}))
		if ctx.Err() != nil {
			return lat, errs
		}
		lat = append(lat, ms(time.Since(start)))
		if err != nil {
			errs++
		}
		select {
		case <-ctx.Done():
			return lat, errs
		case <-t.C:
		}
	}
}

// deltas is family name's growth from m0 to m1 for each result label.
func deltas(m0, m1 benchproc.Metrics, name string, results ...string) map[string]float64 {
	out := map[string]float64{}
	for _, r := range results {
		a, _ := m0.Value(name, "result", r)
		b, _ := m1.Value(name, "result", r)
		if b-a != 0 {
			out[r] = b - a
		}
	}
	return out
}

// value0 is a series' value, 0 when absent.
func value0(m benchproc.Metrics, name string, labels ...string) float64 {
	v, _ := m.Value(name, labels...)
	return v
}

// dirBytes is the size of the files under dir (the server's data
// directory: the store's file and what sits beside it).
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the q-quantile of d (sorted in place).
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}
