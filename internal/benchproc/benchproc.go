// Package benchproc runs `anvil serve` as a child process, so that the
// server's CPU and memory are measured alone and it can be killed like a
// real one, measures processes (CPU time, peak and sampled RSS) and reads
// a server's /metrics. The fleet, storm, discovery and BMC polling
// benchmarks and the replica test (test/replicas) share it. It owns those child processes, not what they store.
package benchproc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	anvilserver "github.com/anvilproj/anvil/internal/server"
)

// Server is `anvil serve` run as a child process.
type Server struct {
	cmd  *exec.Cmd
	args []string // the server's own command line (Args)
	// PID is the child's process ID.
	PID int
	// Dir holds the server's data directory (Dir/data) and its log.
	Dir      string
	LogPath  string
	HTTPAddr string
	GRPCAddr string
	// DHCPAddr and TFTPAddr are where the server answers DHCP and TFTP
	// (127.0.0.1 and a free port each), when Options.Boot asked for them.
	DHCPAddr string
	TFTPAddr string
	exited   chan struct{}
	waitErr  error
	stopped  bool
}

// Options says how to start a Server.
type Options struct {
	// Binary is the anvil binary (a path, or a name on $PATH).
	Binary string
	// LogLevel is the server's --log-level.
	LogLevel string
	// CPUProfile, if set, has the server write a CPU profile there.
	CPUProfile string
	// MemProfile, if set, has the server write a heap profile there at exit.
	MemProfile string
	// Dir, if set, is the directory of an earlier Server to start again
	// on the same data; else a new temporary one is made.
	Dir string
	// Args are more flags of `anvil serve`.
	Args []string
	// Env is added to this process's environment for the server's
	// (e.g. POD_NAME, which names a replica in the leader Lease).
	Env []string
	// Progress receives one line when the server has started.
	Progress func(format string, args ...any)
	// Boot, if set, also serves the network boot path's UDP services on
	// 127.0.0.1 (a boot storm measures them with the control plane).
	Boot *BootOptions
}

// BootOptions switches DHCP and TFTP on, on ports of the caller's choosing
// (unprivileged ones, so that no real DHCP or TFTP server on the machine
// is in the way).
type BootOptions struct {
	// DHCPPort and TFTPPort are the servers' ports; 0 picks a free one.
	DHCPPort, TFTPPort int
	// BootEnvDir, if set, is the server's --bootenv-dir.
	BootEnvDir string
}

// Start starts `anvil serve` on 127.0.0.1 (free ports, no syslog,
// metadata listener or TLS, and no DHCP or TFTP unless o.Boot asks for
// them: the control plane is what is measured) and waits until it is
// ready.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := exec.LookPath(o.Binary)
	if err != nil {
		if _, serr := os.Stat(o.Binary); serr != nil {
			return nil, fmt.Errorf("anvil binary %q: %w (run `make build` first)", o.Binary, err)
		}
		bin = o.Binary
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "anvil-bench-"); err != nil {
			return nil, err
		}
	}
	// The server's ports are bound here and passed to it (socket
	// activation), so nothing can take them between their choice and its
	// start.
	lns, err := listenLoopback(2)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, ln := range lns {
			ln.Close() // the child has its own copies
		}
	}()
	s := &Server{Dir: dir, LogPath: filepath.Join(dir, "server.log"), exited: make(chan struct{}),
		HTTPAddr: lns[0].Addr().String(), GRPCAddr: lns[1].Addr().String()}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "serve", "--insecure-no-auth", "--data-dir", filepath.Join(dir, "data"), "--bind", "127.0.0.1",
		"--log-level", o.LogLevel,
		// The ports the inherited listeners have: what boot scripts and
		// the agents' grpc_authority name.
		"--http-port", port(s.HTTPAddr), "--grpc-port", port(s.GRPCAddr),
		"--no-syslog", "--no-metadata", "--no-console",
		"--no-tls") // agents speak h2c to the gRPC port; and no fixed HTTPS port to collide on
	if o.Boot == nil {
		s.cmd.Args = append(s.cmd.Args, "--no-dhcp", "--no-tftp") // the control plane is under test
	} else {
		if s.DHCPAddr, s.TFTPAddr, err = udpAddrs(o.Boot.DHCPPort, o.Boot.TFTPPort); err != nil {
			logf.Close()
			return nil, err
		}
		s.cmd.Args = append(s.cmd.Args, "--dhcp-port", port(s.DHCPAddr), "--tftp-port", port(s.TFTPAddr))
		if o.Boot.BootEnvDir != "" {
			s.cmd.Args = append(s.cmd.Args, "--bootenv-dir", o.Boot.BootEnvDir)
		}
	}
	s.cmd.Args = append(s.cmd.Args, o.Args...)
	for _, p := range []struct{ flag, path string }{{"--cpu-profile", o.CPUProfile}, {"--mem-profile", o.MemProfile}} {
		if p.path == "" {
			continue
		}
		abs, err := filepath.Abs(p.path)
		if err != nil {
			return nil, err
		}
		s.cmd.Args = append(s.cmd.Args, p.flag, abs)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if len(o.Env) > 0 {
		s.cmd.Env = append(os.Environ(), o.Env...)
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Recorded before PassListeners puts /bin/sh in front: the shell
	// execs the server with exactly these arguments.
	s.args = append([]string(nil), s.cmd.Args...)
	if err := anvilserver.PassListeners(s.cmd, anvilserver.Listeners{HTTP: lns[0], GRPC: lns[1]}); err != nil {
		logf.Close()
		return nil, err
	}
	err = s.cmd.Start()
	for _, f := range s.cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s.PID = s.cmd.Process.Pid
	go func() { s.waitErr = s.cmd.Wait(); logf.Close(); close(s.exited) }()
	if o.Progress != nil {
		o.Progress("started %s serve (pid %d), data dir %s", bin, s.PID, dir)
	}

	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get("http://" + s.HTTPAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("anvil serve exited (%v) before ready:\n%s", s.waitErr, s.LogTail())
		case <-ctx.Done():
			s.Kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Errorf("anvil serve not ready after 30s:\n%s", s.LogTail())
		}
	}
}

// Args is the command line the server was started with (the binary as
// run, then "serve" and its flags): what a benchmark's result records as
// the server under test (internal/benchresult), so the figure names the
// exact program and options measured.
// Its listeners are passed by socket activation, not named on it.
func (s *Server) Args() []string { return append([]string(nil), s.args...) }

// LogTail returns the end of the server's log.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(s.LogPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Stop sends SIGTERM and expects exit status 0 within timeout.
func (s *Server) Stop(timeout time.Duration) error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-s.exited:
	case <-time.After(timeout):
		s.Kill()
		return fmt.Errorf("anvil serve did not exit within %s of SIGTERM", timeout)
	}
	s.stopped = true
	if s.waitErr != nil {
		return fmt.Errorf("anvil serve exited after SIGTERM: %v\n%s", s.waitErr, s.LogTail())
	}
	return nil
}

// Kill ends the server at once; it is a no-op once it has exited.
func (s *Server) Kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Cleanup removes the server's directory unless keep.
func (s *Server) Cleanup(keep bool) {
	if keep {
		fmt.Fprintf(os.Stderr, "kept %s (server log: %s)\n", s.Dir, s.LogPath)
		return
	}
	os.RemoveAll(s.Dir)
}

// CPU is the server's CPU time so far (user + system), in seconds.
func (s *Server) CPU() float64 { return ProcCPU(s.PID) }

// ProcCPU is process pid's CPU time so far (user + system), in seconds;
// 0 once it has exited.
func ProcCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// After the command: state(0) ppid … utime is field 14 overall, i.e. index 11 here.
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// listenLoopback opens n listeners on free 127.0.0.1 ports.
func listenLoopback(n int) ([]net.Listener, error) {
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// udpAddrs returns 127.0.0.1 addresses for DHCP and TFTP: the ports asked
// for, or free ones. A free port is found by binding it and letting it go,
// so another program could take it before the server binds it; the server
// then fails to start, saying which port was taken.
func udpAddrs(ports ...int) (dhcp, tftp string, err error) {
	var addrs []string
	for _, p := range ports {
		if p == 0 {
			c, err := net.ListenPacket("udp4", "127.0.0.1:0")
			if err != nil {
				return "", "", err
			}
			p = c.LocalAddr().(*net.UDPAddr).Port
			c.Close()
		}
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	return addrs[0], addrs[1], nil
}

// port is the port of host:port.
func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// ---------------------------------------------------------------------------
// Memory and CPU measurement

// ProcStatusKB reads a "Name:   123 kB" line of /proc/PID/status, in bytes.
func ProcStatusKB(pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// VmHWM is the process's peak RSS, in bytes.
func VmHWM(pid int) int64 { return ProcStatusKB(pid, "VmHWM") }

// RSSSampler samples a process's RSS.
type RSSSampler struct {
	pid     int
	done    chan struct{}
	stopped chan struct{}
	maxRSS  atomic.Int64
	lastRSS atomic.Int64
	once    sync.Once
}

// NewRSSSampler reads the server's VmRSS every 100 ms.
func NewRSSSampler(pid int) *RSSSampler {
	s := &RSSSampler{pid: pid, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if v := ProcStatusKB(pid, "VmRSS"); v > 0 {
				s.lastRSS.Store(v)
				if v > s.maxRSS.Load() {
					s.maxRSS.Store(v)
				}
			}
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Last is the latest sample.
func (s *RSSSampler) Last() int64 { return s.lastRSS.Load() }

// Stop ends sampling and returns the largest sample.
func (s *RSSSampler) Stop() int64 {
	s.once.Do(func() { close(s.done) })
	<-s.stopped
	return s.maxRSS.Load()
}

// SelfCPU is this process's CPU time so far, in seconds.
func SelfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// MiB converts bytes to MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// CPUs is the number of CPUs.
func CPUs() int { return runtime.NumCPU() }

// RaiseNoFile lifts RLIMIT_NOFILE to its hard limit: every agent connection
// and the server's are file descriptors.
func RaiseNoFile() {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}

// ---------------------------------------------------------------------------
// Clients

// NewH2CClient returns a client that speaks HTTP/2 without TLS (h2c) on one
// connection pool of its own, as gRPC clients do.
func NewH2CClient() *http.Client { return NewH2CClientFrom(nil) }

// NewH2CClientFrom is NewH2CClient with connections from local address
// laddr (nil: any), so that a simulated machine has its own address.
func NewH2CClientFrom(laddr net.Addr) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:       &p,
		DialContext:     (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: laddr}).DialContext,
		TLSClientConfig: &tls.Config{},
		HTTP2: &http.HTTP2Config{
			// Stream windows large enough that a List of a chunk is not
			// throttled; the agents' messages are tiny.
			MaxReceiveBufferPerConnection: 4 << 20,
			MaxReceiveBufferPerStream:     4 << 20,
		},
	}}
}
