// Command bmcpoll is Anvil's BMC power-state polling benchmark. It runs N
// IPMI BMCs in this process — go-ipmi's BMC server, the real RMCP+
// protocol over UDP, each on a loopback address of its own (127.1.x.y),
// so that each is a separate BMC to Anvil's per-host lock — and
// `anvil serve` as a child process (so its CPU and memory are measured
// alone), with N Machines pointing at them.
//
// It measures:
//
//   - the first full sweep: the server is started on a store that already
//     holds the N Machines, so every one is due at once; the time is the
//     server's own (anvil_bmc_poll_sweep_duration_seconds), with the polls
//     bounded by --bmc-poll-concurrency, while -jobs BMC Jobs (power
//     status) run on some of the same BMCs;
//   - a steady round: the power of every other BMC is changed behind
//     Anvil's back, and the run waits until every Machine has been polled
//     again (one interval, spread by the jitter) and checks that every
//     Machine's powerState follows its BMC; the server's CPU per poll;
//   - the server's peak RSS, and this process's CPU (the N BMCs);
//   - that no BMC ever had two sessions open at once: each BMC counts its
//     open sessions whenever it is asked for the power state, and holds
//     none once the server has stopped.
//
// There is no upstream peer to run beside it: Rufio's machine controller
// (in the tinkerbell binary of ../shared/tinkerbell) runs only inside
// Kubernetes.
//
//	go run ./bench/bmcpoll -n 1000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	ipmibmc "github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/hal"
	"github.com/bougou/go-ipmi/pkg/hal/mock"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/transport/udp"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/benchresult"
)

const (
	namespace = "default"
	user      = "admin"
	password  = "bench-bmc-pw"
	bmcPort   = 6230
	chunk     = 500
)

type options struct {
	n           int
	anvil       string
	concurrency int
	interval    time.Duration
	jobs        int
	jsonOut     bool
	keep        bool
	timeout     time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 1000, "simulated BMCs (and Machines)")
	flag.StringVar(&o.anvil, "anvil", "bin/anvil", "path to the anvil binary")
	flag.IntVar(&o.concurrency, "concurrency", 32, "the server's --bmc-poll-concurrency")
	flag.DurationVar(&o.interval, "interval", 20*time.Second, "the server's --bmc-poll-interval (the steady round lasts about this long)")
	flag.IntVar(&o.jobs, "jobs", 100, "BMC Jobs (power status) applied at the start of the sweep, on the first BMCs")
	flag.BoolVar(&o.jsonOut, "json", false, "also print the figures as one JSON line")
	flag.BoolVar(&o.keep, "keep", false, "keep the data directory (and the server log)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	results := benchresult.DirFlag()
	flag.Parse()
	if o.n < 1 || o.n > 250*250 || o.jobs > o.n {
		fmt.Fprintln(os.Stderr, "bmcpoll: -n must be 1..62500 and -jobs at most -n")
		os.Exit(2)
	}
	r, err := run(o)
	if r != nil {
		r.print(os.Stdout)
		if o.jsonOut {
			b, _ := json.Marshal(r)
			fmt.Println(string(b))
		}
		if err == nil {
			err = r.record(*results, o)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bmcpoll: FAIL:", err)
		os.Exit(1)
	}
}

type result struct {
	BMCs              int      `json:"bmcs"`
	Concurrency       int      `json:"concurrency"`
	IntervalS         float64  `json:"interval_s"`
	Jobs              int      `json:"jobs"`
	SweepS            float64  `json:"first_sweep_s"`
	SweepPollsOK      int      `json:"first_sweep_polls_ok"`
	SweepBusy         int      `json:"first_sweep_busy"`
	SweepPollsPerS    float64  `json:"first_sweep_polls_per_s"`
	SweepCPUS         float64  `json:"first_sweep_server_cpu_s"`
	AllKnownS         float64  `json:"all_known_s"`
	JobsCompleted     int      `json:"jobs_completed"`
	RoundS            float64  `json:"steady_round_s"`
	RoundPolls        int      `json:"steady_round_polls"`
	CPUPerPollMs      float64  `json:"server_cpu_per_poll_ms"`
	Followed          int      `json:"power_changes_followed"`
	Changed           int      `json:"power_changes"`
	PeakRSSMiB        float64  `json:"server_peak_rss_mib"`
	ServerCPUS        float64  `json:"server_cpu_total_s"`
	BMCsCPUS          float64  `json:"bmcs_cpu_total_s"`
	MaxSessions       int      `json:"max_sessions_on_one_bmc"`
	SessionsLeft      int      `json:"sessions_left_open"`
	PowerReads        int64    `json:"power_reads"`
	Verified          bool     `json:"verified"`
	ServerExit        string   `json:"server_exit"`
	Peer              string   `json:"peer"`
	Date              string   `json:"date"`
	CPUs              int      `json:"cpus"`
	FailedPolls       int      `json:"failed_polls"`
	FirstSweepPending int      `json:"-"`
	serverArgs        []string // the measured anvil serve's command line
	started           *benchresult.Result
}

// record writes the run's result file. There is no peer (see Peer), so
// the goals are the run's own checks: every poll bounded to one session
// per BMC, every power change followed; the sweep's time and the server's
// CPU and memory are reported, with nothing to hold them against.
func (r *result) record(dir string, o options) error {
	br := r.started
	br.Server = benchresult.AnvilServer(benchresult.Version(o.anvil, "version"), r.serverArgs)
	scale := fmt.Sprintf("%d IPMI BMCs on loopback, %d polled at once, %d Jobs beside", r.BMCs, r.Concurrency, r.Jobs)
	br.Goals = []benchresult.Goal{
		{Measure: "sessions open at once on one BMC, " + scale, Target: "≤ 1", Result: fmt.Sprint(r.MaxSessions), Met: r.MaxSessions <= 1},
		{Measure: "power changes made behind Anvil's back, followed in one round", Target: "all",
			Result: fmt.Sprintf("%d of %d", r.Followed, r.Changed), Met: r.Changed > 0 && r.Followed == r.Changed},
		{Measure: "first full sweep, " + scale, Target: "reported (no peer runs outside Kubernetes)",
			Result: fmt.Sprintf("%.2f s, %.2f s server CPU, peak RSS %.0f MiB; %.2f ms server CPU per poll in the steady round",
				r.SweepS, r.SweepCPUS, r.PeakRSSMiB, r.CPUPerPollMs), Met: r.Verified},
	}
	for i := range br.Goals {
		if !br.Goals[i].Met {
			br.Goals[i].Reason = "docs/benchmarks.md#bmc-power-state-polling-benchbmcpoll"
		}
	}
	br.Figures = r
	br.Samples = map[string]any{"first_sweep_s": r.SweepS, "first_sweep_polls_ok": r.SweepPollsOK, "first_sweep_busy": r.SweepBusy,
		"steady_round_s": r.RoundS, "steady_round_polls": r.RoundPolls, "max_sessions_on_one_bmc": r.MaxSessions,
		"power_changes": r.Changed, "power_changes_followed": r.Followed, "failed_polls": r.FailedPolls}
	return br.Save(dir, "")
}

func (r *result) print(w io.Writer) {
	tw := func(k, f string, a ...any) { fmt.Fprintf(w, "  %-34s "+f+"\n", append([]any{k}, a...)...) }
	fmt.Fprintf(w, "\nAnvil BMC power-state polling benchmark — %s, %d CPUs\n", r.Date, r.CPUs)
	tw("BMCs (go-ipmi, RMCP+ suite 17)", "%d   (one loopback address each)", r.BMCs)
	tw("poll concurrency / interval", "%d / %gs", r.Concurrency, r.IntervalS)
	tw("Jobs during the sweep", "%d   (%d completed)", r.Jobs, r.JobsCompleted)
	tw("first full sweep", "%.2f s   (%d polled, %d skipped: a Job held the BMC; %.0f polls/s)", r.SweepS, r.SweepPollsOK, r.SweepBusy, r.SweepPollsPerS)
	tw("first sweep: server CPU", "%.2f s", r.SweepCPUS)
	tw("every Machine's power known", "%.2f s after the server was ready", r.AllKnownS)
	tw("steady round", "%.1f s, %d polls, %.2f ms server CPU per poll", r.RoundS, r.RoundPolls, r.CPUPerPollMs)
	tw("power changed behind Anvil's back", "%d of %d followed", r.Followed, r.Changed)
	tw("failed polls", "%d", r.FailedPolls)
	tw("server peak RSS", "%.1f MiB", r.PeakRSSMiB)
	tw("server CPU (whole life)", "%.2f s", r.ServerCPUS)
	tw("BMCs' CPU (this process)", "%.2f s", r.BMCsCPUS)
	tw("power-state reads at the BMCs", "%d", r.PowerReads)
	tw("max sessions on one BMC at once", "%d   (must be 1)", r.MaxSessions)
	tw("sessions left open at the end", "%d", r.SessionsLeft)
	tw("verified", "%v", r.Verified)
	tw("server exit on SIGTERM", "%s", r.ServerExit)
	tw("peer", "%s", r.Peer)
}

// ---------------------------------------------------------------------------
// The BMCs

// fakeBMC is one go-ipmi BMC with a chassis that counts, whenever it is
// asked for the power state, the sessions its BMC has open.
type fakeBMC struct {
	addr string
	b    *ipmibmc.BMC
	hal  *mock.HAL
	srv  *server.Server
	done chan struct{}
}

type countingHAL struct {
	*mock.HAL
	chassis *countingChassis
}

func (h countingHAL) Chassis() hal.ChassisHAL { return h.chassis }

type countingChassis struct {
	hal.ChassisHAL
	sessions func() int
	fleet    *fleet
}

func (c *countingChassis) PowerState(ctx context.Context) (bool, error) {
	c.fleet.reads.Add(1)
	n := c.sessions()
	for {
		m := c.fleet.maxSessions.Load()
		if int64(n) <= m || c.fleet.maxSessions.CompareAndSwap(m, int64(n)) {
			break
		}
	}
	return c.ChassisHAL.PowerState(ctx)
}

type fleet struct {
	bmcs        []*fakeBMC
	reads       atomic.Int64
	maxSessions atomic.Int64
}

func addr(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1) }

func startFleet(ctx context.Context, n int) (*fleet, error) {
	f := &fleet{}
	for i := range n {
		h := mock.New()
		fb := &fakeBMC{addr: addr(i), hal: h, done: make(chan struct{})}
		ch := &countingChassis{ChassisHAL: h.Chassis(), fleet: f}
		b := ipmibmc.New(ipmibmc.DeviceInfo{DeviceID: 32, IPMIVersion: 0x20}, [16]byte{byte(i >> 8), byte(i)},
			countingHAL{HAL: h, chassis: ch})
		ch.sessions = b.Sessions.Count
		u, err := b.Users.Add(2, user)
		if err != nil {
			return f, err
		}
		u.SetPassword([]byte(password))
		u.Enabled = true
		u.ChannelAccess[1] = ipmibmc.UserChannelAccess{MaxPrivilege: ipmibmc.PrivilegeLevelAdministrator, Enabled: true}
		conn, err := udp.Listen(net.JoinHostPort(fb.addr, strconv.Itoa(bmcPort)))
		if err != nil {
			return f, fmt.Errorf("BMC %d at %s: %w", i, fb.addr, err)
		}
		fb.b, fb.srv = b, server.NewServer(b, conn)
		go func() { defer close(fb.done); _ = fb.srv.Serve(ctx) }()
		f.bmcs = append(f.bmcs, fb)
		if i%2 == 1 { // half start powered on
			_ = h.Chassis().SetPower(ctx, true)
		}
	}
	return f, nil
}

func (f *fleet) close() {
	for _, b := range f.bmcs {
		b.srv.Close()
		<-b.done
	}
}

func (f *fleet) power(ctx context.Context, i int) string {
	on, _ := f.bmcs[i].hal.Chassis().PowerState(ctx)
	if on {
		return "on"
	}
	return "off"
}

// ---------------------------------------------------------------------------
// The run

func run(o options) (*result, error) {
	benchproc.RaiseNoFile()
	started := benchresult.New("bmcpoll")
	res := &result{started: started, BMCs: o.n, Concurrency: o.concurrency, IntervalS: o.interval.Seconds(), Jobs: o.jobs,
		CPUs: benchproc.CPUs(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Peer: "none: Rufio's machine controller (inside the tinkerbell binary of ../shared/tinkerbell) needs Kubernetes"}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	bctx, stopBMCs := context.WithCancel(ctx)
	f, err := startFleet(bctx, o.n)
	defer func() { stopBMCs(); f.close() }()
	if err != nil {
		return nil, err
	}
	progress("%d BMCs listening on %s..%s port %d", o.n, addr(0), addr(o.n-1), bmcPort)

	// The Machines go into the store with polling off; the server is then
	// started again with it on, so that the first sweep finds all N due.
	srv, err := benchproc.Start(ctx, benchproc.Options{Binary: o.anvil, LogLevel: "warn", Progress: progress,
		Args: []string{"--bmc-poll-interval", "0"}})
	if err != nil {
		return nil, err
	}
	defer srv.Cleanup(o.keep)
	if err := applyMachines(ctx, srv, o.n); err != nil {
		srv.Kill()
		return nil, err
	}
	if err := srv.Stop(30 * time.Second); err != nil {
		return nil, err
	}
	progress("applied a Secret and %d Machines", o.n)

	srv, err = benchproc.Start(ctx, benchproc.Options{Binary: o.anvil, LogLevel: "warn", Progress: progress, Dir: srv.Dir,
		Args: []string{"--bmc-poll-interval", o.interval.String(), "--bmc-poll-concurrency", strconv.Itoa(o.concurrency)}})
	if err != nil {
		return nil, err
	}
	defer srv.Kill()
	res.serverArgs = srv.Args()
	ready := time.Now()
	cpu0 := srv.CPU()
	sampler := benchproc.NewRSSSampler(srv.PID)
	defer sampler.Stop()
	client := benchproc.NewH2CClient()
	base := "http://" + srv.GRPCAddr
	manifests := anvilv1connect.NewManifestServiceClient(client, base, connect.WithGRPC())
	machines := anvilv1connect.NewMachineServiceClient(client, base, connect.WithGRPC())
	jobs := anvilv1connect.NewBmcJobServiceClient(client, base, connect.WithGRPC())

	if o.jobs > 0 {
		var b strings.Builder
		for i := range o.jobs {
			fmt.Fprintf(&b, "---\napiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Job\nmetadata:\n  name: status-%05d\n  namespace: %s\nspec:\n  machineRef:\n    name: %s\n  tasks:\n    - powerAction: status\n", i, namespace, machineName(i))
		}
		if _, err := manifests.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{Source: "jobs.yaml", Content: b.String()})); err != nil {
			return res, fmt.Errorf("apply jobs: %w", err)
		}
	}

	// The first sweep.
	metrics := "http://" + srv.HTTPAddr + "/metrics"
	var m map[string]float64
	for {
		if m, err = scrape(ctx, metrics); err != nil {
			return res, err
		}
		if m["anvil_bmc_poll_sweep_duration_seconds_count"] >= 1 {
			break
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return res, fmt.Errorf("waiting for the first sweep: %w", err)
		}
	}
	res.SweepCPUS = srv.CPU() - cpu0
	res.SweepS = m["anvil_bmc_poll_sweep_duration_seconds_sum"]
	res.SweepPollsOK = int(m[`anvil_bmc_polls_total{result="ok"}`])
	res.SweepBusy = int(m[`anvil_bmc_polls_total{result="busy"}`])
	res.SweepPollsPerS = float64(res.SweepPollsOK) / res.SweepS
	progress("first sweep: %.2fs, %d polled, %d busy", res.SweepS, res.SweepPollsOK, res.SweepBusy)

	// Every Machine's power known (those a Job held are polled again
	// after the busy retry, or written by the Job).
	for {
		known, _, err := compare(ctx, machines, f)
		if err != nil {
			return res, err
		}
		if known == o.n {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return res, fmt.Errorf("waiting for every machine's power state (%d of %d known): %w", known, o.n, err)
		}
	}
	res.AllKnownS = time.Since(ready).Seconds()
	if res.JobsCompleted, err = completedJobs(ctx, jobs); err != nil {
		return res, err
	}

	// The steady round: change every other BMC's power behind Anvil's
	// back, then wait for every Machine to be polled once more.
	m, err = scrape(ctx, metrics)
	if err != nil {
		return res, err
	}
	ok0 := m[`anvil_bmc_polls_total{result="ok"}`]
	for i := 0; i < o.n; i += 2 {
		on, _ := f.bmcs[i].hal.Chassis().PowerState(ctx)
		_ = f.bmcs[i].hal.Chassis().SetPower(ctx, !on)
		res.Changed++
	}
	cpu1, t1 := srv.CPU(), time.Now()
	for {
		if m, err = scrape(ctx, metrics); err != nil {
			return res, err
		}
		if m[`anvil_bmc_polls_total{result="ok"}`]-ok0 >= float64(o.n) {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return res, fmt.Errorf("waiting for the steady round: %w", err)
		}
	}
	res.RoundS = time.Since(t1).Seconds()
	res.RoundPolls = int(m[`anvil_bmc_polls_total{result="ok"}`] - ok0)
	res.CPUPerPollMs = (srv.CPU() - cpu1) * 1000 / float64(res.RoundPolls)
	res.FailedPolls = int(m[`anvil_bmc_polls_total{result="failed"}`])
	_, matching, err := compare(ctx, machines, f)
	if err != nil {
		return res, err
	}
	res.Followed = matching - (o.n - res.Changed) // the unchanged ones match too
	res.Followed = max(0, res.Followed)

	res.PeakRSSMiB = benchproc.MiB(benchproc.VmHWM(srv.PID))
	res.ServerCPUS = srv.CPU()
	res.ServerExit = "0"
	if err := srv.Stop(30 * time.Second); err != nil {
		res.ServerExit = err.Error()
	}
	res.BMCsCPUS = benchproc.SelfCPU()
	res.PowerReads = f.reads.Load()
	res.MaxSessions = int(f.maxSessions.Load())
	for _, b := range f.bmcs {
		res.SessionsLeft += b.b.Sessions.Count()
	}
	var problems []string
	if res.MaxSessions > 1 {
		problems = append(problems, fmt.Sprintf("a BMC had %d sessions open at once", res.MaxSessions))
	}
	if res.SessionsLeft > 0 {
		problems = append(problems, fmt.Sprintf("%d sessions left open", res.SessionsLeft))
	}
	if matching != o.n {
		problems = append(problems, fmt.Sprintf("%d of %d Machines' powerState differ from their BMC", o.n-matching, o.n))
	}
	if res.JobsCompleted != o.jobs {
		problems = append(problems, fmt.Sprintf("%d of %d Jobs completed", res.JobsCompleted, o.jobs))
	}
	if res.ServerExit != "0" {
		problems = append(problems, res.ServerExit)
	}
	res.Verified = len(problems) == 0
	if !res.Verified {
		return res, errors.New(strings.Join(problems, "; "))
	}
	return res, nil
}

func machineName(i int) string { return fmt.Sprintf("bmc-%05d", i) }

// applyMachines applies the Secret and the N Machines, chunk at a time.
func applyMachines(ctx context.Context, srv *benchproc.Server, n int) error {
	manifests := anvilv1connect.NewManifestServiceClient(benchproc.NewH2CClient(), "http://"+srv.GRPCAddr, connect.WithGRPC())
	secret := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: bmc-auth\n  namespace: %s\ntype: kubernetes.io/basic-auth\nstringData:\n  username: %s\n  password: %s\n", namespace, user, password)
	if _, err := manifests.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{Source: "secret.yaml", Content: secret})); err != nil {
		return fmt.Errorf("apply the secret: %w", err)
	}
	for lo := 0; lo < n; lo += chunk {
		var b strings.Builder
		for i := lo; i < min(lo+chunk, n); i++ {
			fmt.Fprintf(&b, `---
apiVersion: bmc.tinkerbell.org/v1alpha1
kind: Machine
metadata:
  name: %s
  namespace: %s
spec:
  connection:
    host: %s
    port: %d
    authSecretRef:
      name: bmc-auth
    insecureTLS: false
    providerOptions:
      ipmitool:
        cipherSuite: "17"
`, machineName(i), namespace, addr(i), bmcPort)
		}
		if _, err := manifests.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{Source: fmt.Sprintf("machines-%05d.yaml", lo), Content: b.String()})); err != nil {
			return fmt.Errorf("apply machines from %d: %w", lo, err)
		}
	}
	return nil
}

// compare lists the Machines and returns how many have a known power
// state and how many match their BMC's.
func compare(ctx context.Context, machines anvilv1connect.MachineServiceClient, f *fleet) (known, matching int, err error) {
	l, err := machines.List(ctx, connect.NewRequest(&v1.ListRequest{Namespace: namespace}))
	if err != nil {
		return 0, 0, fmt.Errorf("list machines: %w", err)
	}
	for _, m := range l.Msg.Items {
		var i int
		if _, err := fmt.Sscanf(m.GetMetadata().GetName(), "bmc-%05d", &i); err != nil || i >= len(f.bmcs) {
			continue
		}
		st := m.GetStatus().GetFields()["powerState"].GetStringValue()
		if st == "on" || st == "off" {
			known++
		}
		if st == f.power(ctx, i) {
			matching++
		}
	}
	return known, matching, nil
}

// completedJobs waits until every Job has finished and returns how many
// completed.
func completedJobs(ctx context.Context, jobs anvilv1connect.BmcJobServiceClient) (int, error) {
	for {
		l, err := jobs.List(ctx, connect.NewRequest(&v1.ListRequest{Namespace: namespace}))
		if err != nil {
			return 0, fmt.Errorf("list jobs: %w", err)
		}
		done, completed := 0, 0
		for _, j := range l.Msg.Items {
			for _, c := range j.GetStatus().GetFields()["conditions"].GetListValue().GetValues() {
				fs := c.GetStructValue().GetFields()
				if fs["status"].GetStringValue() != "True" {
					continue
				}
				switch fs["type"].GetStringValue() {
				case "Completed":
					done++
					completed++
				case "Failed":
					done++
				}
			}
		}
		if done == len(l.Msg.Items) {
			return completed, nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return completed, fmt.Errorf("waiting for the jobs (%d of %d done): %w", done, len(l.Msg.Items), err)
		}
	}
}

// scrape reads the server's /metrics into "name{labels}" -> value.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "anvil_bmc_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

var progressMu sync.Mutex

func progress(format string, args ...any) {
	progressMu.Lock()
	defer progressMu.Unlock()
	fmt.Fprintf(os.Stderr, "bmcpoll: "+format+"\n", args...)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
