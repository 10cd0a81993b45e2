// Package kubetest starts a real Kubernetes API server for tests: Debian's
// etcd and a kube-apiserver built from the Go module proxy by
// scripts/fetch-kube.sh (`make kube`), both in the test's temporary
// directory on loopback ports, stopped when the test ends. It owns those
// two processes and the credentials to reach them (a bearer token in
// system:masters, a CA of its own for the server's certificate); what the
// tests store in the cluster is theirs.
//
// It speaks plain HTTP and JSON (Cluster.Do, Cluster.JSON) for tests that
// check the wire, and hands tests that use client-go a rest.Config
// (Cluster.RESTConfig); deploy/crds/crdstest installs Anvil's CRDs.
// Without etcd or kube-apiserver a test skips, and fails under CI=true
// (testtool.Need).
//
// It is for tests only; no command imports it.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// Bounds that keep a broken start or stop from hanging a test; they
// measure nothing.
const (
	readyBound   = 90 * time.Second // a cold kube-apiserver on a busy 2-core machine
	stopBound    = 15 * time.Second // after SIGTERM, before SIGKILL
	requestBound = 30 * time.Second
	// startAttempts: ports are chosen free and then handed to the
	// program, which binds them itself; in the rare case another process
	// took one in between, the start is tried again on new ports.
	startAttempts = 3
)

// Cluster is a running kube-apiserver and its etcd.
type Cluster struct {
	// URL is the API server's base URL, https://127.0.0.1:PORT.
	URL string
	// Token is a bearer token of a user in system:masters.
	Token string
	// CACert is the PEM certificate of the CA that signed the server's.
	CACert []byte
	// Client trusts CACert and sends Token with every request.
	Client *http.Client
	// Dir holds both programs' data, certificates and logs
	// (etcd.log, kube-apiserver.log).
	Dir string

	// The running kube-apiserver, and how to start one on a given port
	// against the same etcd (faults.go stops and restarts it).
	apiProc  *proc
	apiPort  int
	apiStart func(port int) started
}

// APIServerBinary returns the kube-apiserver to run: $KUBE_APISERVER, or
// .cache/kube/bin/kube-apiserver at the module's root, where `make kube`
// builds it. It stops t with testtool.Need when there is none.
func APIServerBinary(t testing.TB) string {
	t.Helper()
	p := os.Getenv("KUBE_APISERVER")
	if p == "" {
		p = filepath.Join(testtool.ModuleRoot(t), ".cache", "kube", "bin", "kube-apiserver")
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		testtool.Need(t, "kube-apiserver at %s (run `make kube`, i.e. scripts/fetch-kube.sh, or set KUBE_APISERVER)", p)
	}
	return p
}

// EtcdBinary returns the etcd to run: $ETCD, or etcd on PATH (Debian's
// etcd-server). It stops t with testtool.Need when there is none.
func EtcdBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ETCD"); p != "" {
		return p
	}
	return testtool.RequireBinary(t, "etcd", "etcd-server")
}

// Start starts etcd and kube-apiserver, waits until the API server's
// /readyz answers ok, and stops both when t ends. It fails t if either
// cannot start, with the end of its log.
func Start(t testing.TB) *Cluster {
	t.Helper()
	apiserver, etcd := APIServerBinary(t), EtcdBinary(t)
	c := &Cluster{Dir: t.TempDir()}
	creds := writeCredentials(t, c.Dir)
	c.Token, c.CACert = creds.token, creds.caPEM
	c.Client = newClient(c.Token, c.CACert)
	t.Cleanup(c.Client.CloseIdleConnections)

	etcdURL := startWithRetry(t, "etcd", func(p []int) started {
		client, peer := "http://127.0.0.1:"+strconv.Itoa(p[0]), "http://127.0.0.1:"+strconv.Itoa(p[1])
		pr := startProc(t, c.Dir, "etcd", etcd,
			"--name", "kubetest",
			// A data directory per attempt: one that a failed attempt
			// initialised remembers that attempt's peer URL.
			"--data-dir", filepath.Join(c.Dir, "etcd-"+strconv.Itoa(p[0])),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "kubetest="+peer)
		hc := &http.Client{Timeout: time.Second}
		return started{pr, client, func() bool { return etcdHealthy(hc, client) }}
	})

	begin := time.Now()
	c.apiStart = func(port int) started {
		url := "https://127.0.0.1:" + strconv.Itoa(port)
		pr := startProc(t, c.Dir, "kube-apiserver", apiserver,
			"--etcd-servers", etcdURL,
			"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
			// In a network namespace without a default route the server
			// cannot choose an address to advertise, and fails to start.
			"--advertise-address", "127.0.0.1",
			"--tls-cert-file", creds.serverCert, "--tls-private-key-file", creds.serverKey,
			"--cert-dir", filepath.Join(c.Dir, "certs"), // unused with the files above; keeps it out of /var/run
			"--token-auth-file", creds.tokenFile,
			// RBAC, as a real cluster has: the token's user is in
			// system:masters; a test may add users with less.
			"--authorization-mode", "RBAC",
			"--service-account-issuer", "https://kubernetes.default.svc",
			"--service-account-key-file", creds.saKey,
			"--service-account-signing-key-file", creds.saKey,
			"--service-cluster-ip-range", "10.96.0.0/24",
			// No Service endpoints for itself: there is one server, on
			// loopback, and nothing in the cluster to reach it.
			"--endpoint-reconciler-type", "none",
			// Stop at once on SIGTERM instead of waiting for load
			// balancers that do not exist.
			"--shutdown-delay-duration", "0s")
		c.apiProc, c.apiPort = pr, port
		return started{pr, url, func() bool { return c.ready(url) }}
	}
	c.URL = startWithRetry(t, "kube-apiserver", func(p []int) started { return c.apiStart(p[0]) })
	t.Logf("kubetest: kube-apiserver ready at %s in %v (dir %s)", c.URL, time.Since(begin).Round(time.Millisecond), c.Dir)
	return c
}

// ready reports whether the API server at url answers ok on /readyz.
func (c *Cluster) ready(url string) bool {
	resp, err := c.Client.Get(url + "/readyz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "ok"
}

// etcdHealthy reports whether etcd at url answers its health check.
func etcdHealthy(hc *http.Client, url string) bool {
	resp, err := hc.Get(url + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true"
}

// newClient returns a client that trusts the CA caPEM and sends token
// with every request.
func newClient(token string, caPEM []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{
		Timeout: requestBound,
		Transport: bearer{token: token, next: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}},
	}
}

// Do sends a request to the API server: in, unless nil, is sent as JSON
// ([]byte as it is, anything else marshalled); accept, unless empty, is
// the Accept header. It returns the status and body, and fails t only if
// the request could not be made: the status is the caller's to judge.
func (c *Cluster) Do(t testing.TB, method, path string, in any, accept string) (int, []byte) {
	t.Helper()
	return c.send(t, method, path, "application/json", in, accept)
}

// send is Do with the request's Content-Type given.
func (c *Cluster) send(t testing.TB, method, path, contentType string, in any, accept string) (int, []byte) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, ok := in.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(in); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.URL+path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// JSON sends a request as Do does, fails t unless the answer has status
// want, and returns the answer decoded.
func (c *Cluster) JSON(t testing.TB, method, path string, in any, want int) map[string]any {
	t.Helper()
	status, b := c.Do(t, method, path, in, "application/json")
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %v in %.200q", method, path, err, b)
	}
	return out
}

// bearer adds the token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// proc is a child program whose output goes to DIR/NAME.log.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	exited    chan struct{}
	err       error // once exited is closed
}

// startProc starts bin with args and registers its stop with t.
func startProc(t testing.TB, dir, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// The programs die with the test binary, even when it is killed.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.exited) }()
	// Cleanups run last-registered first: the API server stops before
	// its etcd, and both before t.TempDir is removed.
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("kubetest: the end of %s:\n%s", p.log, p.tail())
		}
	})
	return p
}

// stop sends SIGTERM and, if the program has not exited within
// stopBound, SIGKILL; it waits until it has exited.
func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	// A program a test paused (Cluster.PauseAPIServer) only acts on
	// the SIGTERM once it runs again.
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.exited:
	case <-time.After(stopBound):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail returns the end of the program's log.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// started is a program just started: the URL it will serve, and how to
// tell that it does.
type started struct {
	proc  *proc
	url   string
	ready func() bool
}

// startWithRetry starts a program with start, on two loopback ports that
// were free (the program uses what it needs), waits until it is ready, and
// returns the URL it serves.
func startWithRetry(t testing.TB, name string, start func(ports []int) started) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s := start(freePorts(t, 2))
		err := waitReady(s.proc, s.ready)
		if err == nil {
			return s.url
		}
		s.proc.stop()
		if attempt < startAttempts && strings.Contains(s.proc.tail(), "address already in use") {
			t.Logf("kubetest: %s: a port was taken before it bound it; trying new ports", name)
			continue
		}
		t.Fatalf("kubetest: %s: %v; the end of %s:\n%s", name, err, s.proc.log, s.proc.tail())
	}
}

// waitReady polls ready until it reports true, the program exits, or
// readyBound passes.
func waitReady(p *proc, ready func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyBound)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-p.exited:
			return fmt.Errorf("exited before it was ready (%v)", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v", readyBound)
		case <-tick.C:
		}
	}
	return nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago (the kernel chose them).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// randomToken returns 32 random bytes in hex.
func randomToken(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
