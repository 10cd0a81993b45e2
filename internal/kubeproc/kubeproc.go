// Package kubeproc starts a real Kubernetes API server as child
// processes: Debian's etcd and a kube-apiserver built from the Go module
// proxy by scripts/fetch-kube.sh (`make kube`), in a directory of the
// caller's on loopback ports (the API server on another address if the
// caller gives one), with a CA of its own and a bearer token in
// system:masters. It owns those two processes and the credentials to
// reach them; what is stored in the cluster is the caller's.
//
// Tests use it through internal/kubetest (which finds the binaries, skips
// or fails without them, and stops the cluster when the test ends); the
// fleet benchmark (bench/fleet -store kubernetes) uses it directly. No
// command of anvil imports it.
package kubeproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	"time"

	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/internal/freeport"
)

// Bounds that keep a broken start or stop from hanging; they measure
// nothing.
const (
	readyBound   = 90 * time.Second // a cold kube-apiserver on a busy 2-core machine
	stopBound    = 15 * time.Second // after SIGTERM, before SIGKILL
	requestBound = 30 * time.Second
	// startAttempts: ports are chosen free and then handed to the
	// program, which binds them itself; in the rare case another process
	// took one in between, the start is tried again on new ports.
	startAttempts = 3
)

// Options says what to start where.
type Options struct {
	// APIServer and Etcd are the programs' paths.
	APIServer, Etcd string
	// Dir holds both programs' data, certificates and logs; it must
	// exist. The caller removes it.
	Dir string
	// Address is the IPv4 address the API server listens on, advertises
	// and has in its certificate; empty means 127.0.0.1. A client in
	// another network namespace cannot reach the host's loopback: the
	// e2e lab gives the host's end of a veth into its namespace, which
	// both the test and the Anvil inside reach. etcd stays on loopback
	// (only the API server talks to it).
	Address string
	// Logf, if set, is told when each program is ready.
	Logf func(format string, args ...any)
}

// Cluster is a running kube-apiserver and its etcd.
type Cluster struct {
	// URL is the API server's base URL, https://ADDRESS:PORT
	// (Options.Address, 127.0.0.1 by default).
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

	// APIServer and Etcd are the two processes (for their PIDs, logs).
	APIServer, Etcd *Proc

	// apiStart starts a kube-apiserver on a port against the same etcd
	// (RestartAPIServer uses it), apiPort is the running one's port.
	apiStart func(port int) (started, error)
	apiPort  int
}

// Start starts etcd and kube-apiserver and waits until the API server's
// /readyz answers ok. On error, whatever was started is stopped again and
// the error carries the end of the failing program's log.
func Start(o Options) (_ *Cluster, err error) {
	c := &Cluster{Dir: o.Dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	addr := loopback
	if o.Address != "" {
		if addr = net.ParseIP(o.Address).To4(); addr == nil {
			return nil, fmt.Errorf("kubeproc: address %q is not an IPv4 address", o.Address)
		}
	}
	creds, err := writeCredentials(c.Dir, addr)
	if err != nil {
		return nil, fmt.Errorf("kubeproc: credentials: %w", err)
	}
	c.Token, c.CACert = creds.token, creds.caPEM
	c.Client = NewClient(c.Token, c.CACert)

	etcdURL, etcd, err := startWithRetry("etcd", loopback, func(p []int) (started, error) {
		client, peer := "http://127.0.0.1:"+strconv.Itoa(p[0]), "http://127.0.0.1:"+strconv.Itoa(p[1])
		pr, err := startProc(c.Dir, "etcd", o.Etcd,
			"--name", "kubetest",
			// A data directory per attempt: one that a failed attempt
			// initialised remembers that attempt's peer URL.
			"--data-dir", filepath.Join(c.Dir, "etcd-"+strconv.Itoa(p[0])),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "kubetest="+peer)
		hc := &http.Client{Timeout: time.Second}
		return started{pr, client, func() bool { return etcdHealthy(hc, client) }}, err
	})
	if err != nil {
		return nil, err
	}
	c.Etcd = etcd

	begin := time.Now()
	c.apiStart = func(port int) (started, error) {
		url := "https://" + net.JoinHostPort(addr.String(), strconv.Itoa(port))
		pr, err := startProc(c.Dir, "kube-apiserver", o.APIServer,
			"--etcd-servers", etcdURL,
			"--bind-address", addr.String(), "--secure-port", strconv.Itoa(port),
			// In a network namespace without a default route the server
			// cannot choose an address to advertise, and fails to start.
			"--advertise-address", addr.String(),
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
		c.apiPort = port
		return started{pr, url, func() bool { return c.ready(url) }}, err
	}
	c.URL, c.APIServer, err = startWithRetry("kube-apiserver", addr, func(p []int) (started, error) { return c.apiStart(p[0]) })
	if err != nil {
		return nil, err
	}
	if o.Logf != nil {
		o.Logf("kubeproc: kube-apiserver ready at %s in %v (dir %s)", c.URL, time.Since(begin).Round(time.Millisecond), c.Dir)
	}
	return c, nil
}

// Stop stops the API server, then etcd (each SIGTERM, then SIGKILL after
// a bound), and waits for both.
func (c *Cluster) Stop() {
	if c.Client != nil {
		c.Client.CloseIdleConnections()
	}
	for _, p := range []*Proc{c.APIServer, c.Etcd} {
		if p != nil {
			p.Stop()
		}
	}
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

// NewClient returns a client that trusts the CA caPEM and sends token
// with every request.
func NewClient(token string, caPEM []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{
		Timeout: requestBound,
		Transport: bearer{token: token, next: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}},
	}
}

// Request sends a request to the API server with body (nil for none) of
// contentType, and returns the status and the answer; the status is the
// caller's to judge.
func (c *Cluster) Request(ctx context.Context, method, path, contentType string, body []byte, accept string) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// crdPath is where the API server takes CustomResourceDefinitions.
const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

// InstallCRDs creates every definition of defs and returns once each is
// Established (until then the API server answers 404 for its kind), or
// when ctx ends.
func (c *Cluster) InstallCRDs(ctx context.Context, defs []crds.Definition) error {
	for _, d := range defs {
		code, b, err := c.Request(ctx, http.MethodPost, crdPath, "application/json", d.JSON, "application/json")
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("create CRD %s.%s: status %d: %s", d.Plural, d.Group, code, b)
		}
	}
	for _, d := range defs {
		for {
			ok, err := c.established(ctx, d.Plural+"."+d.Group)
			if err != nil || ok {
				if err != nil {
					return err
				}
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s.%s not established: %w", d.Plural, d.Group, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// established reports whether the CRD name has condition Established.
func (c *Cluster) established(ctx context.Context, name string) (bool, error) {
	code, b, err := c.Request(ctx, http.MethodGet, crdPath+"/"+name, "", nil, "application/json")
	if err != nil {
		return false, err
	}
	if code != http.StatusOK {
		return false, fmt.Errorf("get CRD %s: status %d: %s", name, code, b)
	}
	var crd struct {
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &crd); err != nil {
		return false, fmt.Errorf("CRD %s: %w", name, err)
	}
	for _, cond := range crd.Status.Conditions {
		if cond.Type == "Established" && cond.Status == "True" {
			return true, nil
		}
	}
	return false, nil
}

// RESTConfig returns a client-go configuration for the cluster's admin
// user. Its client-side rate limit is lifted: client-go's default of 5
// requests a second would make the client, not the server, the
// bottleneck.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert},
		QPS:             1000,
		Burst:           2000,
	}
}

// WriteKubeconfig writes a kubeconfig file for the cluster's admin user
// into dir and returns its path: what `anvil serve --kubeconfig` and
// kubectl take.
func (c *Cluster) WriteKubeconfig(dir string) (string, error) {
	kc := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "kubetest",
		"clusters": []any{map[string]any{"name": "kubetest", "cluster": map[string]any{
			"server": c.URL, "certificate-authority-data": base64.StdEncoding.EncodeToString(c.CACert)}}},
		"users": []any{map[string]any{"name": "admin", "user": map[string]any{"token": c.Token}}},
		"contexts": []any{map[string]any{"name": "kubetest", "context": map[string]any{
			"cluster": "kubetest", "user": "admin"}}},
	}
	b, err := json.Marshal(kc) // JSON is YAML
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return path, nil
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

// Proc is a child program whose output goes to DIR/NAME.log.
type Proc struct {
	// Log is the program's log file.
	Log    string
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // once exited is closed
}

// PID is the program's process ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// startProc starts bin with args.
func startProc(dir, name, bin string, args ...string) (*Proc, error) {
	p := &Proc{name: name, Log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// The programs die with their parent, even when it is killed.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.exited) }()
	return p, nil
}

// Stop sends SIGTERM and, if the program has not exited within
// stopBound, SIGKILL; it waits until it has exited.
func (p *Proc) Stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopBound):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Tail returns the end of the program's log.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// started is a program just started: the URL it will serve, and how to
// tell that it does.
type started struct {
	proc  *Proc
	url   string
	ready func() bool
}

// loopback is where etcd listens.
var loopback = net.IPv4(127, 0, 0, 1)

// startWithRetry starts a program with start, on two ports of addr that
// were free (the program uses what it needs), waits until it is ready, and
// returns the URL it serves.
func startWithRetry(name string, addr net.IP, start func(ports []int) (started, error)) (string, *Proc, error) {
	for attempt := 1; ; attempt++ {
		ports, err := freeport.Ports(addr, 2)
		if err != nil {
			return "", nil, err
		}
		s, err := start(ports)
		if err != nil {
			return "", nil, fmt.Errorf("kubeproc: %s: %w", name, err)
		}
		err = waitReady(s.proc, s.ready)
		if err == nil {
			return s.url, s.proc, nil
		}
		s.proc.Stop()
		if attempt < startAttempts && strings.Contains(s.proc.Tail(), "address already in use") {
			continue // a port was taken before the program bound it
		}
		return "", nil, fmt.Errorf("kubeproc: %s: %w; the end of %s:\n%s", name, err, s.proc.Log, s.proc.Tail())
	}
}

// waitReady polls ready until it reports true, the program exits, or
// readyBound passes.
func waitReady(p *Proc, ready func() bool) error {
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

// randomToken returns 32 random bytes in hex.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// ErrNoBinary: a program the cluster needs is not where it was looked for.
var ErrNoBinary = errors.New("kubeproc: program not found")

// FindBinaries returns the programs to run: kube-apiserver from
// $KUBE_APISERVER, else root/.cache/kube/bin/kube-apiserver (where `make
// kube` builds it, root being the module's root), and etcd from $ETCD,
// else etcd on PATH (Debian's etcd-server). The error (ErrNoBinary) says
// which is missing and how to get it.
func FindBinaries(root string) (apiserver, etcd string, err error) {
	apiserver = os.Getenv("KUBE_APISERVER")
	if apiserver == "" {
		apiserver = filepath.Join(root, ".cache", "kube", "bin", "kube-apiserver")
	}
	// Absolute: the programs run in the cluster's directory.
	if apiserver, err = filepath.Abs(apiserver); err != nil {
		return "", "", err
	}
	if fi, serr := os.Stat(apiserver); serr != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", "", fmt.Errorf("%w: kube-apiserver at %s (run `make kube`, i.e. scripts/fetch-kube.sh, or set KUBE_APISERVER)", ErrNoBinary, apiserver)
	}
	if etcd = os.Getenv("ETCD"); etcd == "" {
		if etcd, err = exec.LookPath("etcd"); err != nil {
			return "", "", fmt.Errorf("%w: etcd (Debian package etcd-server; scripts/install-deps.sh installs it)", ErrNoBinary)
		}
	}
	return apiserver, etcd, nil
}
