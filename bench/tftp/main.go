// Command tftpbench is Anvil's TFTP benchmark: it runs anvil's TFTP server
// and its peers — dnsmasq, tftpd-hpa and, when its binary is at hand,
// atftpd (the one peer with RFC 7440 windowsize) — side by side, and
// fetches from each with real clients:
//
//   - a 64 MiB file by one client: curl and atftp at blksize 1468, and
//     atftp with windowsize 16 and 64 from the servers that grant it;
//   - a 1 MiB file by 100 clients at once (atftp, blksize 1468; and
//     windowsize 16 where granted).
//
// Every server listens on 127.0.0.1 inside a private network namespace
// (unshare --net), so dnsmasq can have port 69 and nothing else on the
// machine shares the loopback. Clients and servers share the machine's
// cores, as PXE boot servers do not: compare ratios, not absolutes.
//
// For each row it prints the median over -runs of MiB/s and wall time,
// the failed transfers (client exit status or content differing), the
// server's CPU seconds (/proc/PID/stat, children included for the forking
// tftpd-hpa) and the clients' CPU seconds, and the ratio to the fastest
// peer without windowsize. Then the verdict against the target: anvil's
// 64 MiB with windowsize 16 and 64 at ≥ 5× the fastest peer without
// windowsize, and no failed transfer.
//
// Anvil runs as the real binary (`anvil serve --tftp-port … --tftp-dir …
// --no-dhcp --no-syslog`) when it answers TFTP, else as this command's
// harness (`tftpbench serve`), which runs internal/tftp directly;
// -anvil-mode both runs the two.
//
//	go build -o bench/out/tftpbench ./bench/tftp && bench/out/tftpbench -anvil bin/anvil
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/anvilproj/anvil/internal/benchresult"
)

const (
	mib = 1 << 20
	// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times.
	clockTicks = 100
	// target: anvil with windowsize at least this many times the fastest
	// peer without it.
	targetRatio = 5.0
)

// Ports inside the namespace. dnsmasq cannot move off 69.
const (
	portAnvil        = 1069
	portHarness      = 1169
	portHPA          = 2069
	portAtftpd       = 3069
	portDnsmasq      = 69
	portAnvilHTTP    = 17080
	portAnvilGRPC    = 17113
	probeFile        = "tftpbench-probe-no-such-file"
	smallName        = "f1m"
	bigName          = "f64m"
	defaultBigSize   = 64 * mib
	defaultSmallSize = 1 * mib
)

type config struct {
	anvil     string
	anvilMode string
	atftpd    string
	hpa       string
	dnsmasq   string
	runs      int
	clients   int
	bigSize   int64
	smallSize int64
	work      string
	jsonOut   bool
	netns     bool
	only      string
	results   string // the result file's directory (benchresult)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := serveHarness(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "tftpbench:", err)
			os.Exit(1)
		}
		return
	}
	var cfg config
	flag.StringVar(&cfg.anvil, "anvil", "bin/anvil", "the anvil binary")
	flag.StringVar(&cfg.anvilMode, "anvil-mode", "auto", "auto (the binary if it serves TFTP, else the harness), binary, harness or both")
	flag.StringVar(&cfg.atftpd, "atftpd", "", "atftpd binary (unpacked from Debian's atftpd .deb); empty: leave atftpd out")
	flag.StringVar(&cfg.hpa, "tftpd-hpa", "/usr/sbin/in.tftpd", "tftpd-hpa's in.tftpd")
	flag.StringVar(&cfg.dnsmasq, "dnsmasq", "dnsmasq", "dnsmasq binary")
	flag.IntVar(&cfg.runs, "runs", 3, "runs of every row; medians are printed")
	flag.IntVar(&cfg.clients, "clients", 100, "concurrent clients of the small file")
	flag.Int64Var(&cfg.bigSize, "big", defaultBigSize, "size of the big file, bytes")
	flag.Int64Var(&cfg.smallSize, "small", defaultSmallSize, "size of the small file, bytes")
	flag.StringVar(&cfg.work, "work", "", "directory for served and fetched files (default: a new one in /dev/shm, else the temp dir)")
	flag.BoolVar(&cfg.jsonOut, "json", false, "also print the results as one JSON line")
	flag.BoolVar(&cfg.netns, "netns", true, "run in a private network namespace (needs root and unshare)")
	flag.StringVar(&cfg.only, "only", "", "comma-separated servers to run (anvil, anvil-harness, dnsmasq, tftpd-hpa, atftpd); default all")
	results := benchresult.DirFlag()
	flag.Parse()
	cfg.results = *results
	if cfg.netns && os.Getenv("TFTPBENCH_IN_NETNS") == "" {
		os.Exit(reexecInNetns())
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "tftpbench:", err)
		os.Exit(1)
	}
}

// reexecInNetns runs this command again in a new network namespace with
// its loopback up, and returns its exit status. The namespace goes away
// with the last process in it.
func reexecInNetns() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tftpbench:", err)
		return 1
	}
	// The veth pair only gives the namespace a non-loopback IPv4 address:
	// tftpd-hpa resolves -a with AI_ADDRCONFIG, which ignores loopback,
	// and exits (status 66) in a namespace that has nothing else.
	script := `ip link set lo up &&
		ip link add tbench0 type veth peer name tbench1 &&
		ip addr add 192.0.2.1/24 dev tbench0 &&
		ip link set tbench0 up && ip link set tbench1 up &&
		exec "$0" "$@"`
	cmd := exec.Command("unshare", append([]string{"--net", "--", "sh", "-c", script, self}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), "TFTPBENCH_IN_NETNS=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "tftpbench: unshare --net (root needed; -netns=false runs on the host's loopback):", err)
		return 1
	}
	return 0
}

// server is one TFTP server under test.
type server struct {
	name   string
	port   int
	window bool   // grants RFC 7440 windowsize
	note   string // how it runs
	argv   []string
	cmd    *exec.Cmd
	log    string
	cpu    *cpuMeter
}

// cgroupRoot is the cgroup v2 hierarchy a server is started in, so the
// CPU time of everything it forks counts (tftpd-hpa forks a child per
// transfer and lets the kernel reap it: its /proc/PID/stat never sees
// the children's time).
const cgroupRoot = "/sys/fs/cgroup/unified"

// cpuMeter reads the CPU seconds of a server: of its cgroup when it could
// be given one, else of its process and reaped children.
type cpuMeter struct {
	dir string   // the server's cgroup, or ""
	fd  *os.File // dir, open for CLONE_INTO_CGROUP
	pid int
}

// newCPUMeter makes a cgroup for a server called name; without one the
// meter falls back to /proc/PID/stat once the pid is known.
func newCPUMeter(name string) *cpuMeter {
	m := &cpuMeter{}
	dir := filepath.Join(cgroupRoot, fmt.Sprintf("tftpbench-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return m
	}
	fd, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return m
	}
	m.dir, m.fd = dir, fd
	return m
}

func (m *cpuMeter) read() (float64, error) {
	if m.dir == "" {
		return procCPU(m.pid)
	}
	b, err := os.ReadFile(filepath.Join(m.dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return float64(n) / 1e6, err
		}
	}
	return 0, fmt.Errorf("%s/cpu.stat: no usage_usec", m.dir)
}

// close removes the cgroup; the server must have exited.
func (m *cpuMeter) close() {
	if m.fd != nil {
		m.fd.Close()
	}
	if m.dir != "" {
		for i := 0; i < 50 && os.Remove(m.dir) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// clientSpec is one way of fetching a file.
type clientSpec struct {
	name   string
	window int // windowsize asked for; 0 for none
	args   func(port int, file, out string) []string
}

type testSpec struct {
	name    string
	file    string
	size    int64
	clients int
	specs   []clientSpec
}

// sample is one run of one row.
type sample struct {
	mibps, wall, serverCPU, clientCPU float64
	failed                            int
}

// row is every run of one test × client × server.
type row struct {
	Test      string  `json:"test"`
	Client    string  `json:"client"`
	Server    string  `json:"server"`
	Window    int     `json:"windowsize"`
	MiBps     float64 `json:"mib_per_s"`
	Wall      float64 `json:"wall_s"`
	Failed    int     `json:"failed"`
	Transfers int     `json:"transfers"`
	ServerCPU float64 `json:"server_cpu_s"`
	ClientCPU float64 `json:"client_cpu_s"`
	Ratio     float64 `json:"ratio_to_best_peer"`
	samples   []sample
}

func run(cfg config) error {
	res := benchresult.New("tftp")
	if cfg.work == "" {
		base := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm"
		}
		d, err := os.MkdirTemp(base, "tftpbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		cfg.work = d
	}
	root := filepath.Join(cfg.work, "root")
	outDir := filepath.Join(cfg.work, "out")
	for _, d := range []string{root, outDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(cfg.work, 0o755); err != nil {
		return err
	}
	sums := map[string][32]byte{}
	for name, size := range map[string]int64{smallName: cfg.smallSize, bigName: cfg.bigSize} {
		sum, err := writeRandom(filepath.Join(root, name), size)
		if err != nil {
			return err
		}
		sums[name] = sum
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	servers, notes, err := startServers(ctx, cfg, root)
	defer func() {
		for _, s := range servers {
			stopServer(s)
		}
	}()
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(os.Stderr, "tftpbench:", n)
	}

	atftp := mustLook("atftp")
	curl := mustLook("curl")
	atftpArgs := func(opts ...string) func(int, string, string) []string {
		return func(port int, file, out string) []string {
			args := []string{atftp}
			for _, o := range opts {
				args = append(args, "--option", o)
			}
			return append(args, "-g", "-r", file, "-l", out, "127.0.0.1", strconv.Itoa(port))
		}
	}
	curlArgs := func(port int, file, out string) []string {
		return []string{curl, "-sS", fmt.Sprintf("tftp://127.0.0.1:%d/%s", port, file), "--tftp-blksize", "1468", "-o", out}
	}
	tests := []testSpec{
		{
			name: sizeName(cfg.bigSize) + " × 1", file: bigName, size: cfg.bigSize, clients: 1,
			specs: []clientSpec{
				{name: "curl blksize 1468", args: curlArgs},
				{name: "atftp blksize 1468", args: atftpArgs("blksize 1468")},
				{name: "atftp blksize 1468 windowsize 16", window: 16, args: atftpArgs("blksize 1468", "windowsize 16")},
				{name: "atftp blksize 1468 windowsize 64", window: 64, args: atftpArgs("blksize 1468", "windowsize 64")},
			},
		},
		{
			name: sizeName(cfg.smallSize) + " × " + strconv.Itoa(cfg.clients), file: smallName, size: cfg.smallSize, clients: cfg.clients,
			specs: []clientSpec{
				{name: "atftp blksize 1468", args: atftpArgs("blksize 1468")},
				{name: "atftp blksize 1468 windowsize 16", window: 16, args: atftpArgs("blksize 1468", "windowsize 16")},
			},
		},
	}

	var rows []*row
	byKey := map[string]*row{}
	for r := 0; r < cfg.runs; r++ {
		fmt.Fprintf(os.Stderr, "tftpbench: run %d of %d\n", r+1, cfg.runs)
		for _, tc := range tests {
			for _, spec := range tc.specs {
				for _, s := range servers {
					if spec.window > 0 && !s.window {
						continue
					}
					key := tc.name + "|" + spec.name + "|" + s.name
					rw := byKey[key]
					if rw == nil {
						rw = &row{Test: tc.name, Client: spec.name, Server: s.name, Window: spec.window}
						byKey[key] = rw
						rows = append(rows, rw)
					}
					smp, err := measure(s, tc, spec, outDir, sums[tc.file])
					if err != nil {
						return err
					}
					rw.samples = append(rw.samples, smp)
					fmt.Fprintf(os.Stderr, "tftpbench:   %-12s %-34s %-14s %8.1f MiB/s %6.2f s  failed %d\n",
						tc.name, spec.name, s.name, smp.mibps, smp.wall, smp.failed)
				}
			}
		}
	}
	for _, rw := range rows {
		rw.summarize(tests)
	}
	err = report(cfg, servers, tests, rows)
	if rerr := record(res, cfg, servers, rows); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// startServers starts every server and waits until each answers TFTP.
func startServers(ctx context.Context, cfg config, root string) ([]*server, []string, error) {
	var servers []*server
	var notes []string
	want := func(name string) bool {
		if cfg.only == "" {
			return true
		}
		return slices.Contains(strings.Split(cfg.only, ","), name)
	}
	logDir := filepath.Join(filepath.Dir(root), "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, nil, err
	}
	start := func(s *server, args ...string) error {
		s.log = filepath.Join(logDir, s.name+".log")
		f, err := os.Create(s.log)
		if err != nil {
			return err
		}
		defer f.Close()
		s.cpu = newCPUMeter(s.name)
		s.argv = args
		s.cmd = exec.CommandContext(ctx, args[0], args[1:]...)
		s.cmd.Stdout, s.cmd.Stderr = f, f
		if s.cpu.fd != nil {
			s.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(s.cpu.fd.Fd())}
		}
		if err := s.cmd.Start(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		s.cpu.pid = s.cmd.Process.Pid
		if err := probe(s.port, 15*time.Second); err != nil {
			stopServer(s)
			tail, _ := os.ReadFile(s.log)
			return fmt.Errorf("%s does not answer TFTP on 127.0.0.1:%d: %v\n%s", s.name, s.port, err, lastLines(tail, 15))
		}
		return nil
	}

	// anvil: the real binary if it serves TFTP, the harness otherwise.
	mode := cfg.anvilMode
	binaryOK := false
	if mode == "auto" || mode == "binary" || mode == "both" {
		why := anvilSupportsTFTP(cfg.anvil)
		if why == "" && want("anvil") {
			s := &server{name: "anvil", port: portAnvil, window: true, note: cfg.anvil + " serve"}
			dataDir := filepath.Join(filepath.Dir(root), "anvil-data")
			err := start(s, cfg.anvil, "serve", "--insecure-no-auth", "--data-dir", dataDir, "--bind", "127.0.0.1",
				"--tftp-port", strconv.Itoa(portAnvil), "--tftp-dir", root, "--no-dhcp", "--no-syslog", "--no-console",
				"--http-port", strconv.Itoa(portAnvilHTTP), "--grpc-port", strconv.Itoa(portAnvilGRPC))
			if err == nil {
				servers = append(servers, s)
				binaryOK = true
			} else {
				why = err.Error()
			}
		}
		if !binaryOK {
			if mode == "binary" {
				return servers, notes, fmt.Errorf("anvil binary: %s", why)
			}
			notes = append(notes, "anvil binary not used: "+why+"; running the harness (internal/tftp directly)")
		}
	}
	if (mode == "harness" || mode == "both" || !binaryOK) && (want("anvil") || want("anvil-harness")) {
		self, err := os.Executable()
		if err != nil {
			return servers, notes, err
		}
		name := "anvil"
		if binaryOK {
			name = "anvil-harness"
		}
		s := &server{name: name, port: portHarness, window: true, note: "tftpbench serve (internal/tftp, no anvil around it)"}
		if err := start(s, self, "serve", "-root", root, "-addr", "127.0.0.1:"+strconv.Itoa(portHarness)); err != nil {
			return servers, notes, err
		}
		servers = append(servers, s)
	}

	if want("dnsmasq") {
		s := &server{name: "dnsmasq", port: portDnsmasq, note: "dnsmasq --enable-tftp"}
		if err := start(s, cfg.dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null", "--port=0",
			"--enable-tftp", "--tftp-root="+root, "--tftp-max=1000", "--listen-address=127.0.0.1",
			"--bind-interfaces", "--user=root", "--group=root", "--pid-file=", "--log-facility=-", "--quiet-tftp"); err != nil {
			return servers, notes, err
		}
		servers = append(servers, s)
	}
	if want("tftpd-hpa") {
		if target, err := filepath.EvalSymlinks(cfg.hpa); err == nil && strings.Contains(filepath.Base(target), "atftpd") {
			return servers, notes, fmt.Errorf("%s is atftpd (installing atftpd replaces tftpd-hpa's): pass -tftpd-hpa with in.tftpd unpacked from tftpd-hpa's .deb", cfg.hpa)
		}
		s := &server{name: "tftpd-hpa", port: portHPA, note: "in.tftpd -L (forks per transfer)"}
		if err := start(s, cfg.hpa, "-L", "-u", "root", "-s", root, "-a", "127.0.0.1:"+strconv.Itoa(portHPA)); err != nil {
			return servers, notes, err
		}
		servers = append(servers, s)
	}
	if cfg.atftpd != "" && want("atftpd") {
		s := &server{name: "atftpd", port: portAtftpd, window: true, note: "atftpd --daemon --no-fork (threads)"}
		if err := start(s, cfg.atftpd, "--daemon", "--no-fork", "--port", strconv.Itoa(portAtftpd),
			"--bind-address", "127.0.0.1", "--user", "root", "--group", "root", "--maxthread", "1000",
			"--logfile", "/dev/null", root); err != nil {
			return servers, notes, err
		}
		servers = append(servers, s)
	}
	if len(servers) == 0 {
		return nil, notes, errors.New("no server to run")
	}
	return servers, notes, nil
}

// anvilSupportsTFTP returns "" if bin's serve command has the TFTP flags
// the bench needs, else why not.
func anvilSupportsTFTP(bin string) string {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Sprintf("%s: %v (run make build)", bin, err)
	}
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s serve --help: %v", bin, err)
	}
	for _, f := range []string{"--tftp-port", "--tftp-dir", "--no-dhcp", "--no-syslog", "--no-console"} {
		if !bytes.Contains(out, []byte(f)) {
			return fmt.Sprintf("%s serve has no %s flag", bin, f)
		}
	}
	return ""
}

func stopServer(s *server) {
	if s.cpu != nil {
		defer s.cpu.close()
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// probe asks 127.0.0.1:port for a file that does not exist until any
// TFTP answer comes.
func probe(port int, within time.Duration) error {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer conn.Close()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	req := binary.BigEndian.AppendUint16(nil, 1) // RRQ
	req = append(req, probeFile+"\x00octet\x00"...)
	deadline := time.Now().Add(within)
	buf := make([]byte, 1024)
	for time.Now().Before(deadline) {
		if _, err := conn.WriteTo(req, to); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _, err := conn.ReadFrom(buf); err == nil && n >= 4 {
			return nil
		}
	}
	return fmt.Errorf("no answer within %v", within)
}

// measure runs tc.clients clients of spec against s at once.
func measure(s *server, tc testSpec, spec clientSpec, outDir string, want [32]byte) (sample, error) {
	var smp sample
	cpu0, err := s.cpu.read()
	if err != nil {
		return smp, err
	}
	cmds := make([]*exec.Cmd, tc.clients)
	outs := make([]string, tc.clients)
	for i := range cmds {
		outs[i] = filepath.Join(outDir, fmt.Sprintf("%s-%d", s.name, i))
		args := spec.args(s.port, tc.file, outs[i])
		cmds[i] = exec.Command(args[0], args[1:]...)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, tc.clients)
	for i, c := range cmds {
		if err := c.Start(); err != nil {
			errs[i] = err
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.Wait() }()
	}
	wg.Wait()
	smp.wall = time.Since(start).Seconds()
	// Let a forking server's children finish before its CPU is read.
	time.Sleep(200 * time.Millisecond)
	cpu1, err := s.cpu.read()
	if err != nil {
		return smp, err
	}
	smp.serverCPU = cpu1 - cpu0
	for i, c := range cmds {
		if c.ProcessState != nil {
			smp.clientCPU += (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
		}
		if errs[i] != nil || !sameFile(outs[i], tc.size, want) {
			smp.failed++
		}
		os.Remove(outs[i])
	}
	smp.mibps = float64(int64(tc.clients-smp.failed)*tc.size) / mib / smp.wall
	return smp, nil
}

func sameFile(path string, size int64, want [32]byte) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != size {
		return false
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	return [32]byte(h.Sum(nil)) == want
}

// procCPU returns the user and system CPU seconds of pid and its reaped
// children (/proc/PID/stat fields 14 to 17).
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:15] { // utime stime cutime cstime
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return float64(ticks) / clockTicks, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func (r *row) summarize(tests []testSpec) {
	var mibps, wall, scpu, ccpu []float64
	for _, s := range r.samples {
		mibps = append(mibps, s.mibps)
		wall = append(wall, s.wall)
		scpu = append(scpu, s.serverCPU)
		ccpu = append(ccpu, s.clientCPU)
		r.Failed += s.failed
	}
	for _, tc := range tests {
		if tc.name == r.Test {
			r.Transfers = tc.clients * len(r.samples)
		}
	}
	r.MiBps, r.Wall, r.ServerCPU, r.ClientCPU = median(mibps), median(wall), median(scpu), median(ccpu)
}

func isAnvil(name string) bool { return strings.HasPrefix(name, "anvil") }

// report prints the table and the verdict; it returns an error if the
// target is missed.
func report(cfg config, servers []*server, tests []testSpec, rows []*row) error {
	// The fastest peer without windowsize, per test.
	best := map[string]*row{}
	for _, r := range rows {
		if isAnvil(r.Server) || r.Window > 0 {
			continue
		}
		if b := best[r.Test]; b == nil || r.MiBps > b.MiBps {
			best[r.Test] = r
		}
	}
	for _, r := range rows {
		if b := best[r.Test]; b != nil && b.MiBps > 0 {
			r.Ratio = r.MiBps / b.MiBps
		}
	}

	where := "127.0.0.1 in a private network namespace"
	if !cfg.netns {
		where = "127.0.0.1 of the host"
	}
	fmt.Printf("TFTP benchmark: %s, median of %d runs; clients and servers share %d cores\n", where, cfg.runs, numCPU())
	for _, s := range servers {
		fmt.Printf("  %-14s %s\n", s.name, s.note)
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "test\tclient\tserver\tMiB/s\twall s\tfailed\tserver CPU s\tclient CPU s\tvs best peer w/o windowsize\t")
	for _, tc := range tests {
		for _, r := range rows {
			if r.Test != tc.name {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.3f\t%d/%d\t%.3f\t%.3f\t%.2f×\t\n",
				r.Test, r.Client, r.Server, r.MiBps, r.Wall, r.Failed, r.Transfers, r.ServerCPU, r.ClientCPU, r.Ratio)
		}
	}
	tw.Flush()
	fmt.Println()

	// Verdict.
	ok := true
	big := tests[0].name
	b := best[big]
	if b == nil {
		fmt.Println("verdict: no peer row without windowsize to compare with")
		ok = false
	} else {
		fmt.Printf("fastest peer without windowsize, %s: %s with %s, %.1f MiB/s\n", big, b.Server, b.Client, b.MiBps)
		for _, w := range []int{16, 64} {
			for _, r := range rows {
				if r.Test != big || !isAnvil(r.Server) || r.Window != w {
					continue
				}
				pass := r.Ratio >= targetRatio
				ok = ok && pass
				fmt.Printf("verdict: %s, windowsize %d: %s %.1f MiB/s = %.1f× the fastest peer without windowsize; target ≥ %.0f×: %s\n",
					big, w, r.Server, r.MiBps, r.Ratio, targetRatio, passFail(pass))
				for _, a := range rows {
					if a.Test == big && a.Server == "atftpd" && a.Window == w && a.MiBps > 0 {
						fmt.Printf("         vs atftpd with windowsize %d (%.1f MiB/s): %.2f×\n", w, a.MiBps, r.MiBps/a.MiBps)
					}
				}
			}
		}
	}
	failed, transfers := 0, 0
	for _, r := range rows {
		if isAnvil(r.Server) {
			failed += r.Failed
			transfers += r.Transfers
		}
	}
	fmt.Printf("verdict: failed transfers from anvil: %d of %d; target 0: %s\n", failed, transfers, passFail(failed == 0))
	ok = ok && failed == 0
	for _, tc := range tests[1:] {
		for _, r := range rows {
			if r.Test == tc.name && isAnvil(r.Server) && r.Window == 0 {
				if pb := best[tc.name]; pb != nil {
					fmt.Printf("%s, %s: %s %.3f s wall; fastest peer %s %.3f s\n", tc.name, r.Client, r.Server, r.Wall, pb.Server, pb.Wall)
				}
			}
		}
	}
	if cfg.jsonOut {
		line, _ := json.Marshal(map[string]any{"bench": "tftp", "runs": cfg.runs, "rows": rows, "pass": ok})
		fmt.Println(string(line))
	}
	if !ok {
		return errors.New("target missed")
	}
	return nil
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func numCPU() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "processor") {
			n++
		}
	}
	return n
}

func sizeName(n int64) string {
	if n%mib == 0 {
		return fmt.Sprintf("%d MiB", n/mib)
	}
	return fmt.Sprintf("%d B", n)
}

func mustLook(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tftpbench: %s not found (scripts/install-deps.sh installs it)\n", name)
		os.Exit(1)
	}
	return p
}

// writeRandom writes size pseudo-random bytes to path and returns their
// SHA-256.
func writeRandom(path string, size int64) ([32]byte, error) {
	f, err := os.Create(path)
	if err != nil {
		return [32]byte{}, err
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(uint64(size), 0x7f7f))
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	buf := make([]byte, 64<<10)
	for left := size; left > 0; {
		for i := 0; i < len(buf); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
		}
		n := min(left, int64(len(buf)))
		if _, err := w.Write(buf[:n]); err != nil {
			return [32]byte{}, err
		}
		left -= n
	}
	if err := w.Flush(); err != nil {
		return [32]byte{}, err
	}
	if err := f.Chmod(0o644); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), f.Close()
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
