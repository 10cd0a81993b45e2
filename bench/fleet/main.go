// Command fleet is Anvil's fleet benchmark: it starts `anvil serve` as a
// child process (so the server's memory and CPU are measured alone), gives it
// N machines — N Hardware, one 5-action Template, N Workflows — and then runs
// N simulated agents at once (internal/agentsim, the real AgentService
// protocol over gRPC/h2c) until every workflow has succeeded.
//
// With -backends it runs the same fleet against several backends in turn,
// for a comparison in one run: "bolt" (the embedded store) and
// "kubernetes:N", N replicas of `anvil serve --store kubernetes` on an etcd
// and kube-apiserver it starts itself (internal/kubeproc; `make kube`
// builds kube-apiserver), the agents spread evenly over the replicas. For
// Kubernetes it adds the API server's and etcd's CPU time and the API
// server's requests per action (apiserver_request_total's growth).
//
// It prints the machines, setup time, run time (from the start of the agents
// until every agent's last report returned SUCCESS), actions/s, p50/p99/max
// latency of GetAction and ReportActionStatus, the server's peak RSS and the
// CPU time of the server and of this load generator; then it checks every
// workflow in the store and exits 1 if any did not end SUCCESS with 5
// actions SUCCESS.
//
// There is no peer to run side by side: Tinkerbell's server cannot be built
// here (its modules are refused by the module proxy).
//
//	go run ./bench/fleet -n 10000
//	go run ./bench/fleet -n 1000 -backends bolt,kubernetes:1,kubernetes:3
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/agentsim"
	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/model"
)

const (
	actionsPerWorkflow = benchfleet.ActionsPerWorkflow
	namespace          = benchfleet.Namespace
	chunkLabel         = benchfleet.ChunkLabel

	// Targets of issue 18 (the agent path), judged at N >= targetN.
	targetN          = 10000
	targetRunTime    = 10 * time.Second
	targetRSS        = 512 << 20
	targetReportP99  = 100 * time.Millisecond
	targetCPUPerCall = 100 * time.Microsecond // server CPU during the run per agent call
)

type options struct {
	backends   []backend
	n          int
	anvil      string
	keep       bool
	actionTime time.Duration
	conns      int
	jsonOut    bool
	chunk      int
	wait       time.Duration
	timeout    time.Duration
	logLevel   string
	cpuProfile string
	memProfile string
	netboot    bool
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 1000, "machines (agents, Hardware, Workflows)")
	flag.StringVar(&o.anvil, "anvil", "bin/anvil", "path to the anvil binary")
	flag.BoolVar(&o.keep, "keep", false, "keep the data directory (and the server log)")
	flag.DurationVar(&o.actionTime, "action-time", 0, "how long each simulated action runs")
	flag.IntVar(&o.conns, "conns", 0, "HTTP/2 connections the agents share (0: max(1, n/100))")
	flag.BoolVar(&o.jsonOut, "json", false, "also print the figures as one JSON line")
	flag.IntVar(&o.chunk, "chunk", 500, "documents per ManifestService.Apply call (one atomic, durable write)")
	flag.DurationVar(&o.wait, "wait", 10*time.Second, "GetAction long-poll wait each agent asks for")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up after this long")
	flag.StringVar(&o.logLevel, "log-level", "warn", "the server's --log-level")
	flag.BoolVar(&o.netboot, "toggle-netboot", true, "workflows set bootOptions.toggleAllowNetboot, as in examples/workflow.yaml")
	flag.StringVar(&o.cpuProfile, "cpu-profile", "", "have the server write a CPU profile of the run to this file")
	flag.StringVar(&o.memProfile, "mem-profile", "", "have the server write a heap profile (the run's allocations) to this file at exit")
	results := benchresult.DirFlag()
	backends := flag.String("backends", "bolt", "what to run against, in turn: bolt, kubernetes (one replica), kubernetes:N (N replicas), comma-separated")
	flag.Parse()
	var err error
	if o.backends, err = parseBackends(*backends); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(2)
	}
	if o.n < 1 || o.chunk < 2 {
		fmt.Fprintln(os.Stderr, "fleet: -n must be >= 1 and -chunk >= 2")
		os.Exit(2)
	}
	if o.conns <= 0 {
		o.conns = max(1, o.n/100)
	}
	failed := false
	for _, b := range o.backends {
		started := benchresult.New("fleet") // the date and load of the run's start
		r, err := run(o, b)
		if r != nil {
			r.print(os.Stdout)
			if o.jsonOut {
				b, _ := json.Marshal(r)
				fmt.Println(string(b))
			}
			if err == nil {
				err = record(*results, o, r, started)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "fleet: %s: FAIL: %v\n", b, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// ---------------------------------------------------------------------------
// Results

type opStats struct {
	Calls  int     `json:"calls"`
	Errors int     `json:"errors"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

type result struct {
	Backend         string  `json:"backend"`
	Replicas        int     `json:"replicas"`
	Machines        int     `json:"machines"`
	Actions         int     `json:"actions"`
	Conns           int     `json:"conns"`
	ActionTimeS     float64 `json:"action_time_s"`
	ApplyS          float64 `json:"setup_apply_s"`
	RenderS         float64 `json:"setup_render_s"`
	SetupS          float64 `json:"setup_s"`
	RunS            float64 `json:"run_s"`
	ActionsPerS     float64 `json:"actions_per_s"`
	ReportsPerS     float64 `json:"reports_per_s"`
	GetAction       opStats `json:"get_action"`
	Report          opStats `json:"report_action_status"`
	PeakRSSRunMiB   float64 `json:"server_peak_rss_run_mib"` // VmHWM after the run (setup + run)
	PeakRSSMiB      float64 `json:"server_peak_rss_mib"`     // VmHWM at the end (incl. verification)
	MaxSampledMiB   float64 `json:"server_max_sampled_rss_mib"`
	ServerCPUSetupS float64 `json:"server_cpu_setup_s"`
	ServerCPURunS   float64 `json:"server_cpu_run_s"`
	ServerCPUS      float64 `json:"server_cpu_total_s"`
	LoadgenCPURunS  float64 `json:"loadgen_cpu_run_s"`
	LoadgenCPUS     float64 `json:"loadgen_cpu_total_s"`
	// Kubernetes only: the API server's and etcd's share, and the API
	// server's requests (all replicas') during the run, per action.
	APIServerCPURunS     float64 `json:"apiserver_cpu_run_s,omitempty"`
	EtcdCPURunS          float64 `json:"etcd_cpu_run_s,omitempty"`
	APIRequestsRun       float64 `json:"apiserver_requests_run,omitempty"`
	APIRequestsPerAction float64 `json:"apiserver_requests_per_action,omitempty"`
	Verified             bool    `json:"verified"`
	ServerExit           string  `json:"server_exit"`
	RunTargetMet         *bool   `json:"run_target_met,omitempty"`
	RSSTargetMet         bool    `json:"rss_target_met"`
	ReportP99TargetMet   *bool   `json:"report_p99_target_met,omitempty"`
	CPUPerCallUs         float64 `json:"server_cpu_per_call_us"` // server CPU during the run / (GetAction + ReportActionStatus calls)
	CPUPerCallTargetMet  *bool   `json:"cpu_per_call_target_met,omitempty"`
	Peer                 string  `json:"peer"`
	Date                 string  `json:"date"`
	CPUs                 int     `json:"cpus"`

	// serverArgs is the command line of the anvil serve measured, for
	// the result file.
	serverArgs []string
}

func (r *result) print(w io.Writer) {
	tw := func(k, f string, a ...any) { fmt.Fprintf(w, "  %-30s "+f+"\n", append([]any{k}, a...)...) }
	ms := func(s opStats) string {
		return fmt.Sprintf("p50 %7.2f ms   p99 %7.2f ms   max %8.2f ms   (%d calls, %d errors)",
			s.P50ms, s.P99ms, s.MaxMs, s.Calls, s.Errors)
	}
	fmt.Fprintf(w, "\nAnvil fleet benchmark — %s, %d CPUs — %s\n", r.Date, r.CPUs, r.Backend)
	tw("machines", "%d", r.Machines)
	tw("actions (5 per machine)", "%d   (2 reports each: RUNNING, SUCCESS)", r.Actions)
	tw("agent connections (HTTP/2)", "%d", r.Conns)
	tw("action time", "%gs", r.ActionTimeS)
	tw("setup: apply", "%.2f s   (Hardware + Workflows, %s)", r.ApplyS, "chunked ManifestService.Apply")
	tw("setup: render", "%.2f s   (until every workflow has status.tasks)", r.RenderS)
	tw("run time", "%.2f s   (agents start -> last SUCCESS report returned)", r.RunS)
	tw("actions/s", "%.0f   (%.0f reports/s)", r.ActionsPerS, r.ReportsPerS)
	tw("GetAction", "%s", ms(r.GetAction))
	tw("ReportActionStatus", "%s", ms(r.Report))
	if r.Replicas > 1 {
		tw("replicas", "%d   (RSS: the largest replica's; CPU: all replicas')", r.Replicas)
	}
	tw("server peak RSS (setup+run)", "%.1f MiB", r.PeakRSSRunMiB)
	tw("server peak RSS (whole life)", "%.1f MiB   (VmHWM, incl. final verification lists)", r.PeakRSSMiB)
	tw("server CPU", "%.2f s setup, %.2f s run, %.2f s total", r.ServerCPUSetupS, r.ServerCPURunS, r.ServerCPUS)
	tw("loadgen CPU", "%.2f s run, %.2f s total", r.LoadgenCPURunS, r.LoadgenCPUS)
	tw("server CPU per agent call", "%.0f µs   (run CPU / GetAction + ReportActionStatus calls)", r.CPUPerCallUs)
	if r.APIRequestsRun > 0 {
		tw("kube-apiserver + etcd CPU", "%.2f s + %.2f s run", r.APIServerCPURunS, r.EtcdCPURunS)
		tw("API server requests", "%.0f during the run, %.2f per action", r.APIRequestsRun, r.APIRequestsPerAction)
	}
	tw("verified in store", "%v", r.Verified)
	tw("server exit on SIGTERM", "%s", r.ServerExit)
	judged := func(name string, met *bool, f string, a ...any) {
		switch {
		case met == nil:
			tw("target: "+name, "n/a (judged at N >= %d)", targetN)
		case *met:
			tw("target: "+name, "MET ("+f+")", a...)
		default:
			tw("target: "+name, "MISSED ("+f+")", a...)
		}
	}
	judged(fmt.Sprintf("run <= %s", targetRunTime), r.RunTargetMet, "%.1f s", r.RunS)
	judged(fmt.Sprintf("report p99 <= %s", targetReportP99), r.ReportP99TargetMet, "%.0f ms", r.Report.P99ms)
	judged(fmt.Sprintf("CPU/call <= %s", targetCPUPerCall), r.CPUPerCallTargetMet, "%.0f µs", r.CPUPerCallUs)
	judged(fmt.Sprintf("server RSS <= %d MiB", targetRSS>>20), &r.RSSTargetMet, "%.0f MiB", r.PeakRSSMiB)
	tw("peer", "%s", r.Peer)
}

// ---------------------------------------------------------------------------
// The run

func run(o options, b backend) (*result, error) {
	benchproc.RaiseNoFile()
	res := &result{Backend: b.String(), Replicas: max(1, b.replicas), Machines: o.n, Conns: o.conns, ActionTimeS: o.actionTime.Seconds(), CPUs: benchproc.CPUs(),
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Peer: "none: Tinkerbell's server cannot be built here (its modules are refused by the module proxy)"}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	dep, err := startDeployment(ctx, o, b)
	if err != nil {
		return nil, err
	}
	defer dep.cleanup(o.keep)
	defer dep.kill() // the servers' a no-op once stopped cleanly
	srv := dep.servers[0]
	res.serverArgs = srv.Args()

	sampler := benchproc.NewRSSSampler(srv.PID)
	defer sampler.Stop()

	admin := benchproc.NewH2CClient()
	base := "http://" + srv.GRPCAddr
	manifests := anvilv1connect.NewManifestServiceClient(admin, base, connect.WithGRPC())
	workflows := anvilv1connect.NewWorkflowServiceClient(admin, base, connect.WithGRPC())

	// Setup: template, then Hardware + Workflows in chunks, rendered.
	cpu0 := dep.cpu()
	t0 := time.Now()
	setup, err := benchfleet.Apply(ctx, manifests, workflows,
		benchfleet.Spec{N: o.n, Chunk: o.chunk, Netboot: o.netboot}, progress)
	if err != nil {
		return nil, err
	}
	chunks := setup.Chunks
	res.ApplyS = setup.Apply.Seconds()
	res.RenderS = setup.Render.Seconds()
	res.SetupS = time.Since(t0).Seconds()

	// Run: N agents at once.
	o.conns = max(o.conns, len(dep.servers)) // a connection to each replica at least
	res.Conns = o.conns
	clients := make([]anvilv1connect.AgentServiceClient, o.conns)
	for i := range clients {
		// Connection i goes to replica i mod replicas: agents spread evenly.
		replica := "http://" + dep.servers[i%len(dep.servers)].GRPCAddr
		clients[i] = anvilv1connect.NewAgentServiceClient(benchproc.NewH2CClient(), replica, connect.WithGRPC())
	}
	outs := make([]agentOut, o.n)
	var wg sync.WaitGroup
	var finished, actionsDone atomic.Int64
	start := make(chan struct{})
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	for i := range o.n {
		out := &outs[i]
		out.lat = map[string][]time.Duration{
			"GetAction":          make([]time.Duration, 0, actionsPerWorkflow+1),
			"ReportActionStatus": make([]time.Duration, 0, 2*actionsPerWorkflow),
		}
		out.errs = map[string]int{}
		cfg := agentsim.Config{
			Client:     clients[i%o.conns],
			AgentID:    benchfleet.MAC(i),
			ActionTime: o.actionTime,
			Wait:       o.wait,
			Observe: func(op string, d time.Duration, err error) { // this agent's goroutine only
				out.lat[op] = append(out.lat[op], d)
				if err != nil {
					out.errs[op]++
				} else if op == "ReportActionStatus" && len(out.lat[op])%2 == 0 {
					actionsDone.Add(1)
				}
			},
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out.res, out.err = agentsim.Run(runCtx, cfg)
			out.doneAt = time.Now()
			finished.Add(1)
		}()
	}
	cpu1 := dep.cpu()
	api1, etcd1 := dep.clusterCPU()
	req1, err := dep.apiRequests(ctx)
	if err != nil {
		return nil, err
	}
	lg1 := benchproc.SelfCPU()
	runStart := time.Now()
	close(start)
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	tick := time.NewTicker(5 * time.Second)
waitLoop:
	for {
		select {
		case <-allDone:
			break waitLoop
		case <-tick.C:
			progress("%5.1fs: %d/%d agents done, ~%d actions, server RSS %.0f MiB",
				time.Since(runStart).Seconds(), finished.Load(), o.n, actionsDone.Load(), benchproc.MiB(sampler.Last()))
		case <-ctx.Done():
			stopRun()
			<-allDone
			break waitLoop
		}
	}
	tick.Stop()
	var last time.Time
	for i := range outs {
		if outs[i].doneAt.After(last) {
			last = outs[i].doneAt
		}
	}
	res.RunS = last.Sub(runStart).Seconds()
	cpu2 := dep.cpu()
	lg2 := benchproc.SelfCPU()
	api2, etcd2 := dep.clusterCPU()
	req2, err := dep.apiRequests(ctx)
	if err != nil {
		return nil, err
	}
	res.PeakRSSRunMiB = benchproc.MiB(dep.peakRSS())

	// Agent outcomes and latencies.
	var gets, reps []time.Duration
	var bad []string
	for i := range outs {
		out := &outs[i]
		gets = append(gets, out.lat["GetAction"]...)
		reps = append(reps, out.lat["ReportActionStatus"]...)
		res.GetAction.Errors += out.errs["GetAction"]
		res.Report.Errors += out.errs["ReportActionStatus"]
		res.Actions += out.res.Actions
		if out.failed() {
			if len(bad) < 5 {
				bad = append(bad, fmt.Sprintf("agent %s: state %q after %d actions, err %v", benchfleet.MAC(i), out.res.WorkflowState, out.res.Actions, out.err))
			} else if len(bad) == 5 {
				bad = append(bad, "…")
			}
		}
	}
	res.GetAction = stats(gets, res.GetAction.Errors)
	res.Report = stats(reps, res.Report.Errors)
	if res.RunS > 0 {
		res.ActionsPerS = float64(res.Actions) / res.RunS
		res.ReportsPerS = float64(2*res.Actions) / res.RunS
	}
	res.ServerCPUSetupS = cpu1 - cpu0
	res.ServerCPURunS = cpu2 - cpu1
	res.LoadgenCPURunS = lg2 - lg1
	res.APIServerCPURunS, res.EtcdCPURunS = api2-api1, etcd2-etcd1
	res.APIRequestsRun = req2 - req1
	if res.Actions > 0 {
		res.APIRequestsPerAction = res.APIRequestsRun / float64(res.Actions)
	}
	progress("run finished in %.2fs", res.RunS)

	// Verify in the store, a chunk at a time (small responses).
	var verr error
	if len(bad) > 0 {
		verr = fmt.Errorf("%d agents did not finish: %s", countBad(outs), strings.Join(bad, "; "))
	} else {
		verr = verify(ctx, workflows, o.n, chunks)
	}
	res.Verified = verr == nil

	res.PeakRSSMiB = benchproc.MiB(dep.peakRSS())
	res.MaxSampledMiB = benchproc.MiB(sampler.Stop())
	res.ServerCPUS = dep.cpu()
	res.LoadgenCPUS = benchproc.SelfCPU()
	res.RSSTargetMet = res.PeakRSSMiB*(1<<20) <= targetRSS
	if calls := res.GetAction.Calls + res.Report.Calls; calls > 0 {
		res.CPUPerCallUs = res.ServerCPURunS / float64(calls) * 1e6
	}
	if o.n >= targetN {
		run := res.RunS <= targetRunTime.Seconds()
		p99 := res.Report.P99ms <= float64(targetReportP99.Milliseconds())
		cpu := res.CPUPerCallUs <= float64(targetCPUPerCall.Microseconds())
		res.RunTargetMet, res.ReportP99TargetMet, res.CPUPerCallTargetMet = &run, &p99, &cpu
	}

	// Stop the server: SIGTERM, and it must exit 0.
	serr := dep.stop(30 * time.Second)
	if serr != nil {
		res.ServerExit = serr.Error()
	} else {
		res.ServerExit = "exit 0"
	}
	return res, errors.Join(verr, serr)
}

// agentOut is what one agent's goroutine records; only it writes there.
type agentOut struct {
	lat    map[string][]time.Duration
	errs   map[string]int
	res    agentsim.Result
	err    error
	doneAt time.Time
}

func (o *agentOut) failed() bool {
	return o.err != nil || model.ParseState(o.res.WorkflowState) != model.StateSuccess || o.res.Actions != actionsPerWorkflow
}

func countBad(outs []agentOut) int {
	n := 0
	for i := range outs {
		if outs[i].failed() {
			n++
		}
	}
	return n
}

// verify lists every workflow (by chunk label) and checks it is SUCCESS with
// all 5 actions SUCCESS.
func verify(ctx context.Context, wfs anvilv1connect.WorkflowServiceClient, n, chunks int) error {
	seen := 0
	var problems []string
	for c := range chunks {
		l, err := wfs.List(ctx, connect.NewRequest(&v1.ListRequest{Namespace: namespace,
			LabelSelector: fmt.Sprintf("%s=%d", chunkLabel, c)}))
		if err != nil {
			return fmt.Errorf("verify: list chunk %d: %w", c, err)
		}
		for _, w := range l.Msg.Items {
			seen++
			b, err := protojson.Marshal(w.GetStatus())
			if err != nil {
				return fmt.Errorf("verify: %w", err)
			}
			var st model.WorkflowStatus
			if err := json.Unmarshal(b, &st); err != nil {
				return fmt.Errorf("verify: workflow %s status: %w", w.GetMetadata().GetName(), err)
			}
			ok := st.State == model.StateSuccess && len(st.Tasks) == 1 && len(st.Tasks[0].Actions) == actionsPerWorkflow
			if ok {
				for _, a := range st.Tasks[0].Actions {
					ok = ok && a.State == model.StateSuccess
				}
			}
			if !ok && len(problems) < 5 {
				problems = append(problems, fmt.Sprintf("%s: state %q", w.GetMetadata().GetName(), st.State))
			}
		}
	}
	if seen != n {
		problems = append(problems, fmt.Sprintf("found %d workflows, want %d", seen, n))
	}
	if len(problems) > 0 {
		return fmt.Errorf("verify: %s", strings.Join(problems, "; "))
	}
	return nil
}

func stats(d []time.Duration, errs int) opStats {
	s := opStats{Calls: len(d), Errors: errs}
	if len(d) == 0 {
		return s
	}
	slices.Sort(d)
	q := func(p float64) float64 {
		i := int(p*float64(len(d))+0.5) - 1
		i = max(0, min(len(d)-1, i))
		return float64(d[i]) / 1e6
	}
	s.P50ms, s.P99ms, s.MaxMs = q(0.50), q(0.99), float64(d[len(d)-1])/1e6
	return s
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fleet: "+format+"\n", args...)
}
