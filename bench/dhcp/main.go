// Command dhcp is Anvil's DHCP benchmark: perfdhcp (Kea's load generator)
// against anvil, dnsmasq and Kea, one after the other in the same run and
// the same topology, to find the highest rate of 4-way exchanges (DORA)
// each answers with no drops, and what each costs in server CPU.
//
// Topology: two network namespaces joined by a veth pair, the server in one
// (vs, 10.88.0.1/16), perfdhcp in the other (vc, 10.88.0.2/16) acting as a
// relay (-l vc: giaddr 10.88.0.2, port 67). perfdhcp simulates N clients
// with MACs 00:0c:01:00:00:00 + i (byte-wise); every server has the same N
// reservations, client i at 10.88.1.0 + i.
//
// For each server the rate (-r) is doubled from -start until a trial drops
// packets (or halved until one passes), then bisected to -precision. A trial passes when perfdhcp exits
// 0 (no DISCOVER-OFFER or REQUEST-ACK drops, in-flight packets at the
// cut-off excluded by -W). A failing rate is tried -retries more times
// before it counts as failing, because the machine is shared.
//
// Per trial it records the server's CPU time (/proc/PID/stat, user+system)
// divided by the exchanges completed, and the UDP receive-buffer errors
// (/proc/net/snmp RcvbufErrors) in each namespace.
//
// It needs root, iproute2, perfdhcp (kea-admin), kea-dhcp4
// (kea-dhcp4-server) and dnsmasq (dnsmasq-base). Run it from the repository
// root, after `make build`:
//
//	go run ./bench/dhcp -anvil bin/anvil
//	go run ./bench/dhcp -servers anvil -duration 5s   # anvil only, shorter trials
//
// It prints a table, the ratios anvil/dnsmasq and anvil/Kea, and with -json
// one JSON line. It exits 1 if anvil misses -min-rate or -min-ratio.
//
// With -rates, it searches nothing: each server gets one trial at each of
// the given offered rates, the same rates and duration for every server,
// and the table compares them rate by rate (exchanges, drops, server CPU
// per exchange, and anvil's CPU per exchange over Kea's), which is the
// comparison a rate search cannot give: the search stops each server at
// another rate.
//
//	go run ./bench/dhcp -rates 2000,4000,8000 -servers anvil,kea -json
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"

	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/macaddr"
)

// The bench network.
const (
	serverAddr = "10.88.0.1"
	clientAddr = "10.88.0.2"
	prefixLen  = 16
	serverIf   = "vs"
	clientIf   = "vc"
	firstLease = "10.88.1.0"         // client i gets firstLease + i
	macBase    = "00:0c:01:00:00:00" // perfdhcp's -b mac=, and leaseFor's base
	anvilHTTP  = "http://" + serverAddr + ":7080"
)

type options struct {
	anvil      string
	servers    []string
	clients    int
	duration   time.Duration
	start      int
	max        int
	precision  float64
	retries    int
	work       string
	jsonOut    bool
	minRate    float64
	minRatio   float64
	keep       bool
	cpuProfile string
	// rates, if set, are the fixed offered rates of -rates mode.
	rates []int
	// warmup is the length of a trial at the first of rates that each
	// server gets first and that is reported apart (warmup in -json).
	warmup time.Duration
	// anvilBase is a second anvil binary, measured as server "anvil-base".
	anvilBase string
	// harnessWorkers is dhcp.Config.Workers for the harness.
	harnessWorkers int
	// results is the result file's directory (benchresult).
	results string
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("bench/dhcp: ")
	if len(os.Args) > 1 && os.Args[1] == "harness" {
		harness(os.Args[2:])
		return
	}
	var o options
	var servers, rates string
	flag.StringVar(&o.anvil, "anvil", "bin/anvil", "anvil binary under test")
	flag.StringVar(&servers, "servers", "anvil,dnsmasq,kea", "servers to measure, in order: anvil, dnsmasq, kea, harness (internal/dhcp alone over a map), anvil-base (-anvil-base)")
	flag.IntVar(&o.clients, "clients", 10000, "simulated clients and reservations (perfdhcp -R)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each trial (perfdhcp -p)")
	flag.IntVar(&o.start, "start", 1000, "first rate tried, exchanges/s")
	flag.IntVar(&o.max, "max", 64000, "highest rate tried, exchanges/s")
	flag.Float64Var(&o.precision, "precision", 0.05, "stop bisecting when the pass/fail rates are within this fraction")
	flag.IntVar(&o.retries, "retries", 1, "extra tries of a failing rate before it counts as failing")
	flag.StringVar(&o.work, "work", "", "directory for configs, data and logs (default: a new temporary directory)")
	flag.BoolVar(&o.jsonOut, "json", false, "also print the results as one JSON line")
	flag.Float64Var(&o.minRate, "min-rate", 10000, "anvil must sustain at least this many exchanges/s with 0 drops")
	flag.Float64Var(&o.minRatio, "min-ratio", 3, "anvil's rate must be at least this multiple of dnsmasq's")
	flag.BoolVar(&o.keep, "keep", false, "keep the namespaces and work directory afterwards")
	flag.IntVar(&o.harnessWorkers, "harness-workers", 0, "dhcp.Config.Workers of the harness (0: the default)")
	flag.StringVar(&o.cpuProfile, "cpu-profile", "", "write the CPU profile of anvil serve (or the harness) to FILE")
	flag.StringVar(&rates, "rates", "", "comma-separated offered rates (exchanges/s): one trial per server at each, instead of the rate search")
	flag.DurationVar(&o.warmup, "warmup", 0, "with -rates: a trial of this length at the first rate before the measured ones, reported apart (first contact of every client: machine records created, templates built)")
	flag.StringVar(&o.anvilBase, "anvil-base", "", "a second anvil binary (e.g. main's), measured as server anvil-base with the same options")
	results := benchresult.DirFlag()
	flag.Parse()
	o.results = *results
	o.servers = strings.Split(servers, ",")
	var err error
	if o.rates, err = parseRates(rates); err != nil {
		log.Fatal(err)
	}
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

// result is one server's outcome.
type result struct {
	Server string `json:"server"`
	// Rate is the highest offered rate (perfdhcp -r) with no drops, and
	// Achieved what perfdhcp measured at that rate, in 4-way exchanges/s.
	Rate     int     `json:"rate"`
	Achieved float64 `json:"achieved"`
	// CPUPerExchange is the server's CPU time per completed exchange in
	// the best passing trial, in microseconds.
	CPUPerExchange float64 `json:"cpu_us_per_exchange"`
	// ServerRcvbufErrors and ClientRcvbufErrors are UDP receive-buffer
	// overflows during that trial in each namespace.
	ServerRcvbufErrors int64   `json:"server_rcvbuf_errors"`
	ClientRcvbufErrors int64   `json:"client_rcvbuf_errors"`
	Trials             []trial `json:"trials"`
	// Warmup is -rates mode's warm-up trial, if any.
	Warmup *trial `json:"warmup,omitempty"`
	Err    string `json:"error,omitempty"`
	// program is the server as the result file names it.
	program benchresult.Program
}

type trial struct {
	Rate           int     `json:"rate"`
	Pass           bool    `json:"pass"`
	Achieved       float64 `json:"achieved"`
	Sent           int64   `json:"discovers_sent"`
	Acks           int64   `json:"acks"`
	DODrops        int64   `json:"do_drops"`
	RADrops        int64   `json:"ra_drops"`
	CPUPerExchange float64 `json:"cpu_us_per_exchange"`
	ServerRcvbuf   int64   `json:"server_rcvbuf_errors"`
	ClientRcvbuf   int64   `json:"client_rcvbuf_errors"`
	// CPUSeconds is the server's CPU time over the trial; Load1 the
	// machine's 1-minute load average at its end (the machine is shared:
	// a busy one moves every figure).
	CPUSeconds float64 `json:"server_cpu_s"`
	Load1      float64 `json:"load1"`
}

func run(o options) error {
	res := benchresult.New("dhcp")
	if len(o.rates) > 0 {
		res.Bench = "dhcprates" // scripts/bench.sh's section: a comparison at the same rates
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, port 67)")
	}
	for _, tool := range []string{"ip", "perfdhcp"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (scripts/install-deps.sh installs it)", tool)
		}
	}
	if o.work != "" {
		if err := os.MkdirAll(o.work, 0o755); err != nil {
			return err
		}
	} else {
		d, err := os.MkdirTemp("", "anvil-bench-dhcp-")
		if err != nil {
			return err
		}
		o.work = d
		if !o.keep {
			defer os.RemoveAll(d)
		}
	}
	n, err := newNet(o.keep)
	if err != nil {
		return err
	}
	defer n.close()
	// SIGINT/SIGTERM: stop the current server and clean up.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var results []*result
	for _, name := range o.servers {
		if ctx.Err() != nil {
			break
		}
		log.Printf("%s: starting", name)
		r := &result{Server: name}
		results = append(results, r)
		if err := measure(ctx, o, n, r); err != nil {
			r.Err = err.Error()
			log.Printf("%s: %v", name, err)
		}
	}
	return report(o, res, results)
}

// parseRates reads -rates: "" (none) or positive integers separated by
// commas.
func parseRates(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var rates []int
	for _, f := range strings.Split(s, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-rates %q: %q is not a positive number of exchanges per second", s, f)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// measure starts the server, waits until it answers, and searches the
// rate, or with -rates runs one trial at each.
func measure(ctx context.Context, o options, n *netns, r *result) error {
	var srv *server
	var err error
	switch r.Server {
	case "anvil":
		srv, err = startAnvil(ctx, o, n)
	case "anvil-base":
		if o.anvilBase == "" {
			return errors.New("anvil-base needs -anvil-base")
		}
		ob := o
		ob.anvil = o.anvilBase
		srv, err = startAnvil(ctx, ob, n)
	case "dnsmasq":
		srv, err = startDnsmasq(o, n)
	case "kea":
		srv, err = startKea(o, n)
	case "harness":
		srv, err = startHarness(o, n)
	default:
		return fmt.Errorf("unknown server %q", r.Server)
	}
	if err != nil {
		return err
	}
	defer srv.stop()
	r.program = srv.program
	if err := n.waitDHCP(ctx, o.clients, 120*time.Second, srv); err != nil {
		return err
	}
	log.Printf("%s: answering (pid %d)", r.Server, srv.pid())
	if len(o.rates) > 0 {
		if o.warmup > 0 {
			ow := o
			ow.duration = o.warmup
			t, err := runTrial(ctx, ow, n, srv, o.rates[0])
			if err != nil {
				return err
			}
			r.Warmup = &t
			log.Printf("%s: warm-up at %d/s: %d exchanges, drops %d+%d, %.1f µs CPU/exchange", r.Server, t.Rate, t.Acks,
				t.DODrops, t.RADrops, t.CPUPerExchange)
		}
		for _, rate := range o.rates {
			t, err := runTrial(ctx, o, n, srv, rate)
			if err != nil {
				return err
			}
			r.Trials = append(r.Trials, t)
			log.Printf("%s: rate %d: achieved %.0f/s, %d exchanges, drops %d+%d, %.1f µs CPU/exchange, load %.2f",
				r.Server, rate, t.Achieved, t.Acks, t.DODrops, t.RADrops, t.CPUPerExchange, t.Load1)
		}
		return nil
	}

	try := func(rate int) (trial, error) {
		var t trial
		for i := 0; i <= o.retries; i++ {
			var err error
			t, err = runTrial(ctx, o, n, srv, rate)
			if err != nil {
				return t, err
			}
			r.Trials = append(r.Trials, t)
			log.Printf("%s: rate %d: pass=%v achieved %.0f/s, drops %d+%d, %.1f µs CPU/exchange, rcvbuf errors server %d client %d",
				r.Server, rate, t.Pass, t.Achieved, t.DODrops, t.RADrops, t.CPUPerExchange, t.ServerRcvbuf, t.ClientRcvbuf)
			if t.Pass {
				break
			}
		}
		return t, nil
	}
	best := func(t trial) {
		if t.Pass && t.Rate > r.Rate {
			r.Rate, r.Achieved, r.CPUPerExchange = t.Rate, t.Achieved, t.CPUPerExchange
			r.ServerRcvbufErrors, r.ClientRcvbufErrors = t.ServerRcvbuf, t.ClientRcvbuf
		}
	}
	lo, hi := 0, 0 // highest passing, lowest failing
	for rate := o.start; ; rate *= 2 {
		if rate > o.max {
			rate = o.max
		}
		t, err := try(rate)
		if err != nil {
			return err
		}
		best(t)
		if !t.Pass {
			hi = rate
			break
		}
		lo = rate
		if rate == o.max {
			return nil
		}
	}
	// Failed at the start: halve until a rate passes.
	for rate := hi / 2; lo == 0 && rate >= minRate; rate /= 2 {
		t, err := try(rate)
		if err != nil {
			return err
		}
		best(t)
		if t.Pass {
			lo = rate
		} else {
			hi = rate
		}
	}
	for lo > 0 && float64(hi-lo)/float64(lo) > o.precision {
		mid := (lo + hi) / 2
		t, err := try(mid)
		if err != nil {
			return err
		}
		best(t)
		if t.Pass {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return fmt.Errorf("dropped packets even at %d exchanges/s", hi)
	}
	return nil
}

// minRate is the lowest rate the search goes down to.
const minRate = 50

// runTrial runs perfdhcp once at rate and measures the server around it.
func runTrial(ctx context.Context, o options, n *netns, srv *server, rate int) (trial, error) {
	t := trial{Rate: rate}
	if err := srv.alive(); err != nil {
		return t, err
	}
	cpu0, err := cpuTicks(srv.pid())
	if err != nil {
		return t, err
	}
	s0, c0 := n.rcvbufErrors(n.server), n.rcvbufErrors(n.client)
	secs := int(math.Ceil(o.duration.Seconds()))
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.client}, perfdhcpArgs(o.clients, rate, secs)...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return t, fmt.Errorf("perfdhcp: %w", err)
		}
		code = ee.ExitCode()
	}
	cpu1, err := cpuTicks(srv.pid())
	if err != nil {
		return t, fmt.Errorf("server died during the trial: %w", err)
	}
	s1, c1 := n.rcvbufErrors(n.server), n.rcvbufErrors(n.client)
	st := parsePerfdhcp(string(out))
	if code != 0 && code != 3 {
		return t, fmt.Errorf("perfdhcp exit %d:\n%s", code, out)
	}
	t.Pass = code == 0 && st.acks > 0
	t.Achieved, t.Sent, t.Acks, t.DODrops, t.RADrops = st.rate, st.sent, st.acks, st.doDrops, st.raDrops
	t.CPUSeconds = float64(cpu1-cpu0) / float64(clockTicks)
	if st.acks > 0 {
		t.CPUPerExchange = t.CPUSeconds * 1e6 / float64(st.acks)
	}
	t.Load1 = benchresult.LoadAverage()
	t.ServerRcvbuf, t.ClientRcvbuf = s1-s0, c1-c0
	return t, nil
}

// perfdhcpArgs is the load generator's command line for one trial.
func perfdhcpArgs(clients, rate, secs int) []string {
	return []string{"perfdhcp", "-4", "-l", clientIf, "-g", "single", "-W", "500000", "-R", strconv.Itoa(clients), "-b", "mac=" + macBase,
		"-r", strconv.Itoa(rate), "-p", strconv.Itoa(secs), serverAddr}
}

type perfStats struct {
	rate               float64
	sent, acks         int64
	doDrops, raDrops   int64
	doReceived, raSent int64
}

// parsePerfdhcp reads perfdhcp's summary: "Rate: X 4-way exchanges/second"
// and, per exchange section, "sent packets", "received packets", "drops".
func parsePerfdhcp(out string) perfStats {
	var st perfStats
	section := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "Rate:"):
			f := strings.Fields(line)
			if len(f) > 1 {
				st.rate, _ = strconv.ParseFloat(f[1], 64)
			}
		case strings.Contains(line, "Statistics for: DISCOVER-OFFER"):
			section = "DO"
		case strings.Contains(line, "Statistics for: REQUEST-ACK"):
			section = "RA"
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		num, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch section + "/" + k {
		case "DO/sent packets":
			st.sent = num
		case "DO/received packets":
			st.doReceived = num
		case "DO/drops":
			st.doDrops = num
		case "RA/sent packets":
			st.raSent = num
		case "RA/received packets":
			st.acks = num
		case "RA/drops":
			st.raDrops = num
		}
	}
	return st
}

// clockTicks is USER_HZ: /proc/PID/stat counts CPU time in these.
const clockTicks = 100

// cpuTicks returns utime+stime of pid.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	// Fields after ")": state(3) ppid(4) ... utime(14) stime(15).
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return u + st, nil
}

// reportRates prints -rates mode's table: per server and offered rate, and
// anvil's CPU per exchange over Kea's (and dnsmasq's) at each rate.
func reportRates(o options, res *benchresult.Result, results []*result) error {
	fmt.Printf("DHCP at fixed offered rates: perfdhcp -4 -l %s -g single -W 500000 -R %d -b mac=%s -r RATE -p %d, relay mode, veth between two namespaces, %d CPUs\n\n",
		clientIf, o.clients, macBase, int(math.Ceil(o.duration.Seconds())), runtime.NumCPU())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\toffered (/s)\tachieved (DORA/s)\texchanges (ACKs)\tdrops (DO+RA)\tserver CPU (s)\tCPU/exchange (µs)\tserver rcvbuf errors\tclient rcvbuf errors\tload\t")
	byName := map[string]*result{}
	for _, r := range results {
		byName[r.Server] = r
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\tfailed: %s\t\t\t\t\t\t\t\t\t\n", r.Server, firstLine(r.Err))
		}
		for _, t := range r.Trials {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%d\t%.2f\t%.1f\t%d\t%d\t%.2f\t\n", r.Server, t.Rate, t.Achieved, t.Acks,
				t.DODrops+t.RADrops, t.CPUSeconds, t.CPUPerExchange, t.ServerRcvbuf, t.ClientRcvbuf, t.Load1)
		}
	}
	tw.Flush()
	fmt.Println()
	if o.warmup > 0 {
		fmt.Printf("Each server first had a %s warm-up trial at %d/s (in -json as warmup).\n\n", o.warmup, o.rates[0])
	}
	summary := map[string]any{"bench": "dhcp", "mode": "rates", "rates": o.rates, "clients": o.clients,
		"warmup_s": o.warmup.Seconds(), "duration_s": o.duration.Seconds(), "cpus": runtime.NumCPU(), "date": time.Now().UTC().Format(time.RFC3339),
		"commit": res.Commit, "results": results}
	ratios := map[string][]float64{}
	if a := byName["anvil"]; a != nil {
		for _, peer := range []string{"kea", "dnsmasq", "anvil-base"} {
			p := byName[peer]
			if p == nil {
				continue
			}
			for _, rate := range o.rates {
				at, pt := trialAt(a, rate), trialAt(p, rate)
				if at == nil || pt == nil || at.CPUPerExchange == 0 || pt.CPUPerExchange == 0 {
					continue
				}
				q := at.CPUPerExchange / pt.CPUPerExchange
				ratios[peer] = append(ratios[peer], q)
				fmt.Printf("at %d/s: anvil/%s CPU per exchange %.2f (%.1f / %.1f µs); drops %d / %d\n", rate, peer, q,
					at.CPUPerExchange, pt.CPUPerExchange, at.DODrops+at.RADrops, pt.DODrops+pt.RADrops)
			}
		}
	}
	for peer, q := range ratios {
		summary["cpu_per_exchange_ratio_anvil_"+peer] = q
	}
	if o.jsonOut {
		b, err := json.Marshal(summary)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	return recordRates(o, res, results, summary)
}

// trialAt is r's trial at offered rate rate, or nil.
func trialAt(r *result, rate int) *trial {
	for i := range r.Trials {
		if r.Trials[i].Rate == rate {
			return &r.Trials[i]
		}
	}
	return nil
}

func report(o options, res *benchresult.Result, results []*result) error {
	if len(o.rates) > 0 {
		return reportRates(o, res, results)
	}
	byName := map[string]*result{}
	for _, r := range results {
		byName[r.Server] = r
	}
	fmt.Printf("DHCP: perfdhcp -4 -l %s -g single -W 500000 -R %d -b mac=%s -p %d, relay mode, veth between two namespaces, %d CPUs\n\n",
		clientIf, o.clients, macBase, int(math.Ceil(o.duration.Seconds())), runtime.NumCPU())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tmax rate, 0 drops (/s)\tachieved (DORA/s)\tserver CPU/exchange (µs)\tserver rcvbuf errors\tclient rcvbuf errors\ttrials\t")
	for _, r := range results {
		if r.Err != "" && r.Rate == 0 {
			fmt.Fprintf(tw, "%s\tfailed: %s\t\t\t\t\t%d\t\n", r.Server, firstLine(r.Err), len(r.Trials))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%d\t%d\t%d\t\n", r.Server, r.Rate, r.Achieved, r.CPUPerExchange,
			r.ServerRcvbufErrors, r.ClientRcvbufErrors, len(r.Trials))
	}
	tw.Flush()
	fmt.Println()

	summary := map[string]any{"bench": "dhcp", "clients": o.clients, "duration_s": o.duration.Seconds(), "cpus": runtime.NumCPU(), "results": results}
	failed := false
	a := byName["anvil"]
	ratio := func(peer string) {
		p := byName[peer]
		if a == nil || p == nil || a.Achieved == 0 || p.Achieved == 0 {
			return
		}
		r := a.Achieved / p.Achieved
		c := p.CPUPerExchange / a.CPUPerExchange
		fmt.Printf("anvil/%s: %.2fx the rate, %.2fx less CPU per exchange\n", peer, r, c)
		summary["ratio_"+peer] = r
		summary["cpu_ratio_"+peer] = c
		if peer == "dnsmasq" && r < o.minRatio {
			fmt.Printf("FAIL: anvil/dnsmasq %.2f < %.2f\n", r, o.minRatio)
			failed = true
		}
	}
	ratio("dnsmasq")
	ratio("kea")
	if a != nil {
		if a.Achieved < o.minRate {
			fmt.Printf("FAIL: anvil sustained %.0f/s < %.0f/s\n", a.Achieved, o.minRate)
			failed = true
		} else {
			fmt.Printf("anvil: %.0f/s >= %.0f/s with 0 drops\n", a.Achieved, o.minRate)
		}
	}
	if o.jsonOut {
		b, err := json.Marshal(summary)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	if err := recordSearch(o, res, results, summary); err != nil {
		return err
	}
	if failed {
		return errors.New("anvil missed its targets")
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// leaseFor returns client i's MAC (macBase + i, byte-wise, as perfdhcp
// counts) and reserved address.
func leaseFor(i int) (macaddr.MAC, netip.Addr) {
	mac := macaddr.MustParse(macBase).Bytes()
	carry := i
	for j := len(mac) - 1; j >= 0 && carry > 0; j-- {
		s := int(mac[j]) + carry&0xff
		mac[j] = byte(s)
		carry = carry>>8 + s>>8
	}
	base := netip.MustParseAddr(firstLease).As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i)
	return macaddr.From(mac), netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// netns is the bench topology.
type netns struct {
	server, client string
	keep           bool
}

func newNet(keep bool) (*netns, error) {
	suffix := strconv.Itoa(os.Getpid())
	n := &netns{server: "anvb-srv-" + suffix, client: "anvb-cli-" + suffix, keep: keep}
	steps := [][]string{
		{"netns", "add", n.server},
		{"netns", "add", n.client},
		{"-n", n.server, "link", "set", "lo", "up"},
		{"-n", n.client, "link", "set", "lo", "up"},
		{"-n", n.server, "link", "add", serverIf, "type", "veth", "peer", "name", clientIf},
		{"-n", n.server, "link", "set", clientIf, "netns", n.client},
		{"-n", n.server, "addr", "add", serverAddr + "/" + strconv.Itoa(prefixLen), "dev", serverIf},
		{"-n", n.client, "addr", "add", clientAddr + "/" + strconv.Itoa(prefixLen), "dev", clientIf},
		{"-n", n.server, "link", "set", serverIf, "up"},
		{"-n", n.client, "link", "set", clientIf, "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			n.close()
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return n, nil
}

func (n *netns) close() {
	if n.keep {
		log.Printf("kept namespaces %s and %s", n.server, n.client)
		return
	}
	for _, ns := range []string{n.server, n.client} {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
}

// rcvbufErrors reads Udp RcvbufErrors of /proc/net/snmp in namespace ns.
func (n *netns) rcvbufErrors(ns string) int64 {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").Output()
	if err != nil {
		return 0
	}
	var header []string
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "Udp: ") {
			continue
		}
		f := strings.Fields(line)
		if header == nil {
			header = f
			continue
		}
		for i, h := range header {
			if h == "RcvbufErrors" && i < len(f) {
				v, _ := strconv.ParseInt(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}

// inNS runs fn on a thread inside namespace ns (for opening sockets there).
func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// waitDHCP waits until the server offers the last client its address, as
// perfdhcp will ask: a relayed DISCOVER from clientAddr:67.
func (n *netns) waitDHCP(ctx context.Context, clients int, timeout time.Duration, srv *server) error {
	mac, want := leaseFor(clients - 1)
	var conn net.PacketConn
	if err := inNS(n.client, func() (err error) {
		conn, err = net.ListenPacket("udp4", clientAddr+":67")
		return err
	}); err != nil {
		return fmt.Errorf("probe socket: %w", err)
	}
	defer conn.Close()
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := srv.alive(); err != nil {
			return err
		}
		disc, err := dhcpv4.NewDiscovery(mac.HardwareAddr(), dhcpv4.WithRelay(net.ParseIP(clientAddr)))
		if err != nil {
			return err
		}
		if _, err := conn.WriteTo(disc.ToBytes(), &net.UDPAddr{IP: net.ParseIP(serverAddr), Port: 67}); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		for {
			k, _, err := conn.ReadFrom(buf)
			if err != nil {
				break
			}
			offer, err := dhcpv4.FromBytes(buf[:k])
			if err == nil && offer.TransactionID == disc.TransactionID && offer.MessageType() == dhcpv4.MessageTypeOffer {
				if got := offer.YourIPAddr.String(); got != want.String() {
					return fmt.Errorf("probe: %s offered %s; want %s", mac, got, want)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("no OFFER for %s within %s (see the server's log in the work directory)", mac, timeout)
}

// server is a running server process.
type server struct {
	program benchresult.Program
	name    string
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
	err     error
}

func (n *netns) start(name, logPath string, env []string, argv ...string) (*server, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// `ip netns exec` execs the command, so the PID is the server's.
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.server}, argv...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		lf.Close()
		close(s.done)
	}()
	return s, nil
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// alive returns an error, with the end of its log, if the server exited.
func (s *server) alive() error {
	select {
	case <-s.done:
		return fmt.Errorf("%s exited (%v); end of %s:\n%s", s.name, s.err, s.log, tail(s.log, 20))
	default:
		return nil
	}
}

// stop ends the server: SIGTERM, then SIGKILL after 10 s.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// startAnvil runs `anvil serve` in the server namespace and applies one
// Hardware per client.
func startAnvil(ctx context.Context, o options, n *netns) (*server, error) {
	bin, err := filepath.Abs(o.anvil)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("anvil binary: %w (run make build, or pass -anvil)", err)
	}
	data := filepath.Join(o.work, "anvil-data")
	if err := os.RemoveAll(data); err != nil {
		return nil, err
	}
	hw := filepath.Join(o.work, "hardware.yaml")
	if err := writeHardware(hw, o.clients); err != nil {
		return nil, err
	}
	argv := []string{bin, "serve", "--insecure-no-auth", "--data-dir", data, "--bind", serverAddr, "--no-tftp", "--no-syslog",
		"--dhcp-mode", "reservation", "--log-level", "warn"}
	if o.cpuProfile != "" {
		argv = append(argv, "--cpu-profile", o.cpuProfile)
	}
	srv, err := n.start("anvil", filepath.Join(o.work, "anvil.log"), nil, argv...)
	if err != nil {
		return nil, err
	}
	srv.program = benchresult.AnvilServer(benchresult.Version(bin, "version"),
		append(argv, fmt.Sprintf("(%d Hardware applied, one reservation per client)", o.clients)))
	// Apply once the API answers.
	t0 := time.Now()
	deadline := t0.Add(60 * time.Second)
	for {
		if err := srv.alive(); err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.server, bin, "--server", anvilHTTP, "--log-level", "warn", "apply", "-f", hw)
		out, err := cmd.CombinedOutput()
		if err == nil {
			log.Printf("%s: applied %d Hardware in %s", filepath.Base(bin), o.clients, time.Since(t0).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			srv.stop()
			return nil, fmt.Errorf("anvil apply: %v: %s", err, lastLines(out, 10))
		}
		time.Sleep(500 * time.Millisecond)
	}
	return srv, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writeHardware writes one Hardware per client, as a multi-document YAML.
func writeHardware(path string, clients int) error {
	var b bytes.Buffer
	for i := range clients {
		mac, ip := leaseFor(i)
		fmt.Fprintf(&b, `---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: bench-%05d
  namespace: default
spec:
  interfaces:
    - dhcp:
        mac: %s
        hostname: bench-%05d
        lease_time: 3600
        ip: {address: %s, netmask: 255.255.0.0, gateway: %s}
      netboot:
        allowPXE: true
`, i, mac, i, ip, serverAddr)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// startDnsmasq runs dnsmasq with one dhcp-host per client and the flags
// that make it fast (LAB-NOTES): no-ping, quiet-dhcp, leasefile-ro,
// dhcp-authoritative.
func startDnsmasq(o options, n *netns) (*server, error) {
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		return nil, errors.New("dnsmasq not found (apt-get install dnsmasq-base)")
	}
	conf := filepath.Join(o.work, "dnsmasq.conf")
	var b bytes.Buffer
	fmt.Fprintf(&b, `port=0
interface=%s
bind-interfaces
dhcp-range=10.88.0.0,static,255.255.0.0,1h
dhcp-lease-max=%d
no-ping
quiet-dhcp
leasefile-ro
dhcp-authoritative
log-facility=-
pid-file=
`, serverIf, 10*o.clients)
	settings := strings.Split(strings.TrimSpace(b.String()), "\n")
	for i := range o.clients {
		mac, ip := leaseFor(i)
		fmt.Fprintf(&b, "dhcp-host=%s,%s\n", mac, ip)
	}
	if err := os.WriteFile(conf, b.Bytes(), 0o644); err != nil {
		return nil, err
	}
	argv := []string{"dnsmasq", "--keep-in-foreground", "--conf-file=" + conf}
	srv, err := n.start("dnsmasq", filepath.Join(o.work, "dnsmasq.log"), nil, argv...)
	if err != nil {
		return nil, err
	}
	srv.program = benchresult.Program{Name: "dnsmasq", Version: benchresult.Version("dnsmasq", "--version"),
		Options: append(append(argv, settings...), fmt.Sprintf("dhcp-host=MAC,IP: %d lines, one per client", o.clients))}
	return srv, nil
}

// startKea runs kea-dhcp4 single-threaded with an in-memory lease file and
// one reservation per client.
func startKea(o options, n *netns) (*server, error) {
	if _, err := exec.LookPath("kea-dhcp4"); err != nil {
		return nil, errors.New("kea-dhcp4 not found (apt-get install kea-dhcp4-server)")
	}
	type reservation struct {
		HWAddress string `json:"hw-address"`
		IPAddress string `json:"ip-address"`
	}
	res := make([]reservation, o.clients)
	for i := range res {
		mac, ip := leaseFor(i)
		res[i] = reservation{mac.String(), ip.String()}
	}
	cfg := map[string]any{"Dhcp4": map[string]any{
		"interfaces-config":            map[string]any{"interfaces": []string{serverIf}, "dhcp-socket-type": "udp"},
		"lease-database":               map[string]any{"type": "memfile", "persist": false, "lfc-interval": 0},
		"multi-threading":              map[string]any{"enable-multi-threading": false},
		"valid-lifetime":               3600,
		"host-reservation-identifiers": []string{"hw-address"},
		"subnet4": []any{map[string]any{
			"id": 1, "subnet": fmt.Sprintf("10.88.0.0/%d", prefixLen), "reservations": res,
			"option-data": []any{map[string]any{"name": "routers", "data": serverAddr}},
		}},
		"loggers": []any{map[string]any{"name": "kea-dhcp4", "severity": "WARN",
			"output_options": []any{map[string]any{"output": "stdout"}}}},
	}}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(o.work, "kea-dhcp4.json")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return nil, err
	}
	run := filepath.Join(o.work, "kea-run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		return nil, err
	}
	argv := []string{"kea-dhcp4", "-c", conf}
	srv, err := n.start("kea", filepath.Join(o.work, "kea.log"), []string{"KEA_LOCKFILE_DIR=" + run, "KEA_PIDFILE_DIR=" + run}, argv...)
	if err != nil {
		return nil, err
	}
	// The configuration as run, its reservations counted rather than listed.
	subnet := cfg["Dhcp4"].(map[string]any)["subnet4"].([]any)[0].(map[string]any)
	subnet["reservations"] = fmt.Sprintf("%d, one per client (hw-address, ip-address)", len(res))
	shown, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	srv.program = benchresult.Program{Name: "kea-dhcp4", Version: benchresult.Version("kea-dhcp4", "-V"),
		Options: append(argv, string(shown))}
	return srv, nil
}

// startHarness runs this binary's `harness` subcommand: internal/dhcp's
// server alone, over a map, without the rest of anvil. It separates the
// DHCP server's cost from the boot policy's.
func startHarness(o options, n *netns) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argv := []string{self, "harness", "-clients", strconv.Itoa(o.clients), "-workers", strconv.Itoa(o.harnessWorkers)}
	if o.cpuProfile != "" {
		argv = append(argv, "-cpu-profile", o.cpuProfile)
	}
	srv, err := n.start("harness", filepath.Join(o.work, "harness.log"), nil, argv...)
	if err != nil {
		return nil, err
	}
	srv.program = benchresult.Program{Name: "internal/dhcp harness (not anvil serve: a diagnostic)", Options: argv}
	return srv, nil
}
