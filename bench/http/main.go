// Command httpbench is Anvil's HTTP file-serving benchmark: `anvil serve`
// (its /images/ route, through the whole boot-path handler chain — the
// client address, the boot limits, the pacer, the per-request log, metrics
// and machine record) against nginx with sendfile on, serving the same
// file (256 MiB by default) from the same directory.
//
// For each server and each connection count (1, 8 and 64 by default) it
// runs -duration of back-to-back full GETs on persistent HTTP/1.1
// connections, the connections spread over -sources client addresses
// (127.0.1.1, 127.0.1.2, …: Linux routes all of 127.0.0.0/8 to the
// loopback, so no alias or namespace is needed; with 8 addresses and 64
// connections each address has 8 downloads in flight, anvil's default
// --boot-client-concurrency). Servers alternate sample by sample, -runs
// times, and it prints the medians of:
//
//   - GB/s (10^9 bytes of body received per second; no download starts
//     after -duration and the sample ends when the last one has ended, so
//     every download is whole and checked);
//   - server CPU seconds per GB, from /proc/PID/stat: anvil's process, and
//     nginx's master and workers summed;
//   - the client's CPU per GB (this process), which shares the cores;
//
// then the ratios anvil/nginx and the verdict against issue 18's goal:
// throughput ≥ 1.0× nginx and CPU per GB ≤ nginx's at every connection
// count. A failed request (not 200, or a body not of the file's size)
// fails the run. -json prints one JSON line with the peers' exact options
// and every sample. -anvil-args and -anvil-env try anvil serve with other
// flags or environment (the pacer off, GOMAXPROCS).
//
//	go build -o bench/out/httpbench ./bench/http && bench/out/httpbench -anvil bin/anvil -json
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
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/freeport"
)

const (
	mib      = 1 << 20
	gb       = 1e9
	fileName = "image.raw"
)

type config struct {
	anvil    string
	nginx    string
	size     int64
	conns    []int
	sources  int
	duration time.Duration
	runs     int
	work     string
	jsonOut  bool
	keep     bool
	only     []string
	// anvilArgs and anvilEnv are more flags and environment of anvil
	// serve (to try a change: the pacer off, GOMAXPROCS, …).
	anvilArgs []string
	anvilEnv  []string
	results   string // the result file's directory (benchresult)
}

func main() {
	var cfg config
	var conns, only, anvilArgs, anvilEnv string
	flag.StringVar(&cfg.anvil, "anvil", "bin/anvil", "the anvil binary")
	flag.StringVar(&cfg.nginx, "nginx", "nginx", "the nginx binary")
	flag.Int64Var(&cfg.size, "size", 256*mib, "size of the served file, bytes")
	flag.StringVar(&conns, "conns", "1,8,64", "comma-separated concurrent connection counts")
	flag.IntVar(&cfg.sources, "sources", 8, "client source addresses (127.0.1.1 …)")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "length of one sample")
	flag.IntVar(&cfg.runs, "runs", 3, "samples of every server and connection count; medians are printed")
	flag.StringVar(&cfg.work, "work", "", "directory of the served file (default: a new temporary one)")
	flag.BoolVar(&cfg.jsonOut, "json", false, "also print the results and every sample as one JSON line")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the work directory and the servers' logs")
	flag.StringVar(&only, "only", "anvil,nginx", "servers to run")
	flag.StringVar(&anvilArgs, "anvil-args", "", "more flags of anvil serve, space-separated (e.g. \"--boot-stall-timeout 0 --boot-min-send-rate 0\")")
	flag.StringVar(&anvilEnv, "anvil-env", "", "more environment of anvil serve, space-separated NAME=VALUE (e.g. GOMAXPROCS=1)")
	results := benchresult.DirFlag()
	flag.Parse()
	cfg.results = *results
	cfg.anvilArgs, cfg.anvilEnv = strings.Fields(anvilArgs), strings.Fields(anvilEnv)
	var err error
	if cfg.conns, err = parseInts(conns); err != nil {
		fatal(fmt.Errorf("-conns: %w", err))
	}
	cfg.only = strings.Split(only, ",")
	for _, s := range cfg.only {
		if s != "anvil" && s != "nginx" {
			fatal(fmt.Errorf("-only: unknown server %q (have anvil, nginx)", s))
		}
	}
	if cfg.sources < 1 || cfg.sources > 250 {
		fatal(fmt.Errorf("-sources %d: want 1 to 250", cfg.sources))
	}
	if cfg.runs < 1 || cfg.size < 1 || cfg.duration <= 0 {
		fatal(errors.New("-runs, -size and -duration must be positive"))
	}
	ok, err := run(cfg)
	if err != nil {
		fatal(err)
	}
	if !ok {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "httpbench:", err)
	os.Exit(1)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "httpbench: "+format+"\n", args...)
}

// server is one server under test, started once for all its samples.
type server struct {
	name string
	url  string
	// cpu returns the server's CPU seconds so far (all its processes).
	cpu  func() float64
	stop func()
	// options describes how it runs, for the JSON record.
	options string
	// program is the server as its result file names it: its command
	// line and, for nginx, its configuration's lines.
	program benchresult.Program
}

// sample is one server at one connection count for one -duration.
type sample struct {
	Server    string  `json:"server"`
	Conns     int     `json:"conns"`
	Run       int     `json:"run"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	Requests  int64   `json:"requests_completed"`
	Failed    int64   `json:"failed"`
	ServerCPU float64 `json:"server_cpu_s"`
	ClientCPU float64 `json:"client_cpu_s"`
	GBps      float64 `json:"gb_per_s"`
	CPUPerGB  float64 `json:"server_cpu_s_per_gb"`
	ClientGB  float64 `json:"client_cpu_s_per_gb"`
	FirstErr  string  `json:"first_error,omitempty"`
}

// row is the medians of a server's samples at one connection count.
type row struct {
	Server   string  `json:"server"`
	Conns    int     `json:"conns"`
	GBps     float64 `json:"gb_per_s"`
	CPUPerGB float64 `json:"server_cpu_s_per_gb"`
	ClientGB float64 `json:"client_cpu_s_per_gb"`
	Failed   int64   `json:"failed"`
}

// verdict is anvil against nginx at one connection count.
type verdict struct {
	Conns           int     `json:"conns"`
	ThroughputRatio float64 `json:"throughput_anvil_over_nginx"`
	CPURatio        float64 `json:"cpu_per_gb_anvil_over_nginx"`
	Met             bool    `json:"met"`
}

func run(cfg config) (bool, error) {
	benchproc.RaiseNoFile()
	res := benchresult.New("http")
	work := cfg.work
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "httpbench-"); err != nil {
			return false, err
		}
		if !cfg.keep {
			defer os.RemoveAll(work)
		}
	}
	// nginx's workers run as an unprivileged user: they must reach the file.
	if err := os.Chmod(work, 0o755); err != nil {
		return false, err
	}
	images := filepath.Join(work, "images")
	if err := makeFile(filepath.Join(images, fileName), cfg.size); err != nil {
		return false, err
	}
	ctx := context.Background()
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for _, name := range cfg.only {
		var s *server
		var err error
		switch name {
		case "anvil":
			s, err = startAnvil(ctx, cfg, images)
		case "nginx":
			s, err = startNginx(ctx, cfg, work)
		}
		if err != nil {
			return false, err
		}
		servers = append(servers, s)
	}

	// One warm-up download each: the file into the page cache, the
	// servers' first-request costs out of the samples.
	for _, s := range servers {
		if r := measure(s, 1, cfg.sources, time.Minute, cfg.size, 1); r.Failed > 0 || r.Requests != 1 {
			return false, fmt.Errorf("%s: warm-up download failed: %s", s.name, r.FirstErr)
		}
	}
	var samples []sample
	for _, c := range cfg.conns {
		for i := range cfg.runs {
			for _, s := range servers {
				r := measure(s, c, cfg.sources, cfg.duration, cfg.size, 0)
				r.Run = i + 1
				progress("%s, %d conns, run %d: %.3f GB/s, %.3f s server CPU per GB, %d requests, %d failed",
					s.name, c, r.Run, r.GBps, r.CPUPerGB, r.Requests, r.Failed)
				samples = append(samples, r)
			}
		}
	}
	rows := medians(samples, servers, cfg.conns)
	verdicts := compare(rows, cfg.conns)
	printTable(os.Stdout, cfg, rows, verdicts)
	ok := true
	for _, r := range rows {
		if r.Failed > 0 {
			ok = false
		}
	}
	if cfg.jsonOut {
		peers := map[string]string{}
		for _, s := range servers {
			peers[s.name] = s.options
		}
		rec := map[string]any{
			"bench": "http", "date": time.Now().UTC().Format(time.RFC3339), "cores": benchproc.CPUs(),
			"commit": res.Commit, "file_bytes": cfg.size, "duration_s": cfg.duration.Seconds(), "runs": cfg.runs,
			"sources": sourceAddrs(cfg.sources), "servers": peers, "rows": rows, "verdicts": verdicts,
			"samples": samples,
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return false, err
		}
		fmt.Println(string(b))
	}
	if !ok {
		return false, nil // a failed download: no figure to keep
	}
	return true, record(res, cfg, servers, rows, verdicts, samples)
}

// record writes the run's result file: per connection count, anvil's
// throughput and CPU per GB against nginx's (issue 18's goals).
func record(res *benchresult.Result, cfg config, servers []*server, rows []row, verdicts []verdict, samples []sample) error {
	for _, s := range servers {
		if s.name == "anvil" {
			res.Server = s.program
		} else {
			res.Peers = append(res.Peers, s.program)
		}
	}
	get := func(name string, c int) row {
		for _, r := range rows {
			if r.Server == name && r.Conns == c {
				return r
			}
		}
		return row{}
	}
	const why = "docs/benchmarks.md#http-file-serving-benchhttp"
	for _, v := range verdicts {
		a, n := get("anvil", v.Conns), get("nginx", v.Conns)
		scale := fmt.Sprintf("%d MiB file, %d connection(s) from %d addresses", cfg.size/mib, v.Conns, cfg.sources)
		g := benchresult.Goal{Measure: "throughput, " + scale, Target: "≥ 1.0× nginx",
			Result: fmt.Sprintf("%.2f GB/s (%.2f×)", a.GBps, v.ThroughputRatio), Peer: fmt.Sprintf("%.2f GB/s", n.GBps),
			Met: v.ThroughputRatio >= 1}
		c := benchresult.Goal{Measure: "server CPU per GB, " + scale, Target: "≤ nginx's",
			Result: fmt.Sprintf("%.3f s/GB (%.2f×)", a.CPUPerGB, v.CPURatio), Peer: fmt.Sprintf("%.3f s/GB", n.CPUPerGB),
			Met: v.CPURatio <= 1}
		for _, g := range []*benchresult.Goal{&g, &c} {
			if !g.Met {
				g.Reason = why
			}
		}
		res.Goals = append(res.Goals, g, c)
	}
	res.Figures = map[string]any{"file_bytes": cfg.size, "duration_s": cfg.duration.Seconds(), "runs": cfg.runs,
		"sources": sourceAddrs(cfg.sources), "medians": rows, "verdicts": verdicts}
	res.Samples = samples
	return res.Save(cfg.results, "")
}

// makeFile writes size random-looking bytes to path unless a file of that
// size is there already.
func makeFile(path string, size int64) error {
	if st, err := os.Stat(path); err == nil && st.Size() == size {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	// A cheap generator: the content does not matter to sendfile, only
	// that nothing along the way could compress it.
	buf := make([]byte, mib)
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i+8 <= len(buf); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for j := range 8 {
			buf[i+j] = byte(x >> (8 * j))
		}
	}
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		buf[0]++ // no two MiB alike
		left -= n
	}
	return f.Close()
}

func startAnvil(ctx context.Context, cfg config, images string) (*server, error) {
	// Anvil's defaults: the boot limits, the pacer and the info log are
	// part of what is measured.
	args := append([]string{"--images-dir", images}, cfg.anvilArgs...)
	srv, err := benchproc.Start(ctx, benchproc.Options{Binary: cfg.anvil, LogLevel: "info", Args: args,
		Env: cfg.anvilEnv, Progress: progress})
	if err != nil {
		return nil, err
	}
	s := &server{
		name: "anvil", url: "http://" + srv.HTTPAddr + "/images/" + fileName, cpu: srv.CPU,
		stop: func() {
			if err := srv.Stop(10 * time.Second); err != nil {
				progress("anvil: %v", err)
			}
			if !cfg.keep {
				os.RemoveAll(srv.Dir)
			}
		},
		options: strings.TrimSpace(strings.Join(cfg.anvilEnv, " ") + " anvil serve --images-dir DIR --log-level info " +
			"--no-dhcp --no-tftp --no-syslog --no-metadata --no-console --no-tls " + strings.Join(cfg.anvilArgs, " ")),
		program: benchresult.AnvilServer(benchresult.Version(cfg.anvil, "version"), srv.Args()),
	}
	for _, e := range cfg.anvilEnv { // the environment tried, after the command line
		s.program.Options = append(s.program.Options, "environment: "+e)
	}
	return s, nil
}

// nginxConf is the peer's configuration: sendfile on, as a distribution's
// default site has it, two workers (one per core here), an access log as
// anvil has its request log.
const nginxConf = `daemon off;
master_process on;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/body;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:%[2]d;
        root %[3]s;
    }
}
`

// nginxOptions is what the JSON record says of the peer.
const nginxOptions = "worker_processes auto; sendfile on; tcp_nopush on; keepalive_requests 100000; access_log on; sendfile_max_chunk default (2m)"

func startNginx(ctx context.Context, cfg config, work string) (*server, error) {
	bin, err := exec.LookPath(cfg.nginx)
	if err != nil {
		return nil, fmt.Errorf("nginx: %w (scripts/install-deps.sh installs nginx-light)", err)
	}
	port, err := freeport.Loopback()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(work, "nginx")
	if err := os.MkdirAll(filepath.Join(dir, "body"), 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, port, work), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-e", filepath.Join(dir, "error.log"), "-p", dir, "-c", conf)
	out, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(exited) }()
	master := cmd.Process.Pid
	url := fmt.Sprintf("http://127.0.0.1:%d/images/%s", port, fileName)
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful: the workers go too
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(10 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodHead, url, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("nginx exited before serving:\n%s", b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("nginx not serving after 10s")
		}
	}
	progress("started %s (master pid %d) on 127.0.0.1:%d", bin, master, port)
	return &server{name: "nginx", url: url, stop: stop, options: nginxVersion(bin) + ": " + nginxOptions,
		program: benchresult.Program{Name: "nginx", Version: nginxVersion(bin),
			Options: append(slices.Clone(cmd.Args), strings.Split(strings.TrimSpace(fmt.Sprintf(nginxConf, dir, port, work)), "\n")...)},
		cpu: func() float64 { return treeCPU(master) }}, nil
}

func nginxVersion(bin string) string {
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	v := strings.TrimSpace(string(out))
	if _, after, ok := strings.Cut(v, "version: "); ok {
		return after
	}
	return "nginx"
}

// treeCPU is the CPU seconds of pid and its children (nginx's workers).
func treeCPU(pid int) float64 {
	total := benchproc.ProcCPU(pid)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if parentOf(child) == pid {
			total += benchproc.ProcCPU(child)
		}
	}
	return total
}

// parentOf is pid's parent from /proc/PID/stat (0 if unknown).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func sourceAddrs(n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("127.0.1.%d", i+1)
	}
	return out
}

// measure runs conns connections, each downloading s's file back to back
// until d has passed (or, with limit > 0, until limit downloads have
// started in all), and returns the sample. No download starts after d and
// every started one is waited for, so each is whole and checked.
func measure(s *server, conns, sources int, d time.Duration, size int64, limit int64) sample {
	// Only a bound on a server that stops sending: 64 downloads of 256
	// MiB take about 10 s here.
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Minute)
	defer cancel()
	var (
		bytes, started, done, failed atomic.Int64
		errOnce                      sync.Once
		firstErr                     string
		wg                           sync.WaitGroup
	)
	addrs := sourceAddrs(sources)
	cpu0, self0, t0 := s.cpu(), benchproc.SelfCPU(), time.Now()
	for i := range conns {
		// One transport per connection: one persistent connection, from
		// its own source address.
		local := &net.TCPAddr{IP: net.ParseIP(addrs[i%len(addrs)])}
		tr := &http.Transport{
			DialContext:         (&net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}).DialContext,
			DisableCompression:  true,
			MaxIdleConnsPerHost: 1,
		}
		wg.Go(func() {
			defer tr.CloseIdleConnections()
			buf := make([]byte, mib)
			for time.Since(t0) < d && (limit == 0 || started.Add(1) <= limit) {
				n, err := fetch(ctx, tr, s.url, size, buf)
				bytes.Add(n)
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err.Error() })
					continue
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	r := sample{Server: s.name, Conns: conns, Bytes: bytes.Load(), Seconds: el, Requests: done.Load(),
		Failed: failed.Load(), ServerCPU: s.cpu() - cpu0, ClientCPU: benchproc.SelfCPU() - self0, FirstErr: firstErr}
	g := float64(r.Bytes) / gb
	r.GBps = g / el
	if g > 0 {
		r.CPUPerGB, r.ClientGB = r.ServerCPU/g, r.ClientCPU/g
	}
	return r
}

// fetch GETs url, reads the body into buf, and returns the body bytes read;
// an error when it is not a 200 of size bytes.
func fetch(ctx context.Context, tr *http.Transport, url string, size int64, buf []byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return 0, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var n int64
	for {
		m, err := resp.Body.Read(buf)
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	if n != size {
		return n, fmt.Errorf("body of %d bytes, want %d", n, size)
	}
	return n, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medians(samples []sample, servers []*server, conns []int) []row {
	var rows []row
	for _, c := range conns {
		for _, s := range servers {
			var gbps, cpu, client []float64
			var failed int64
			for _, x := range samples {
				if x.Server == s.name && x.Conns == c {
					gbps, cpu, client = append(gbps, x.GBps), append(cpu, x.CPUPerGB), append(client, x.ClientGB)
					failed += x.Failed
				}
			}
			rows = append(rows, row{Server: s.name, Conns: c, GBps: median(gbps), CPUPerGB: median(cpu),
				ClientGB: median(client), Failed: failed})
		}
	}
	return rows
}

func compare(rows []row, conns []int) []verdict {
	find := func(name string, c int) (row, bool) {
		for _, r := range rows {
			if r.Server == name && r.Conns == c {
				return r, true
			}
		}
		return row{}, false
	}
	var out []verdict
	for _, c := range conns {
		a, okA := find("anvil", c)
		n, okN := find("nginx", c)
		if !okA || !okN || n.GBps == 0 || n.CPUPerGB == 0 {
			continue
		}
		v := verdict{Conns: c, ThroughputRatio: a.GBps / n.GBps, CPURatio: a.CPUPerGB / n.CPUPerGB}
		v.Met = v.ThroughputRatio >= 1 && v.CPURatio <= 1
		out = append(out, v)
	}
	return out
}

func printTable(w io.Writer, cfg config, rows []row, verdicts []verdict) {
	fmt.Fprintf(w, "HTTP: a %d MiB file, full GETs on persistent connections from %d addresses, %s samples, medians of %d\n",
		cfg.size/mib, cfg.sources, cfg.duration, cfg.runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tconns\tGB/s\tserver CPU s/GB\tclient CPU s/GB\tfailed\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%d\t\n", r.Server, r.Conns, r.GBps, r.CPUPerGB, r.ClientGB, r.Failed)
	}
	tw.Flush()
	for _, v := range verdicts {
		state := "met"
		if !v.Met {
			state = "NOT met"
		}
		fmt.Fprintf(w, "%d conns: anvil/nginx throughput %.2fx (goal >= 1.0), CPU per GB %.2fx (goal <= 1.0): %s\n",
			v.Conns, v.ThroughputRatio, v.CPURatio, state)
	}
}
