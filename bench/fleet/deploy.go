package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/kubeproc"
)

// backend is what the fleet runs against: "bolt" (one `anvil serve` with
// its embedded store) or "kubernetes:N" (N replicas of `anvil serve
// --store kubernetes` on an etcd and kube-apiserver started here).
type backend struct {
	kube     bool
	replicas int
}

func (b backend) String() string {
	if !b.kube {
		return "bolt"
	}
	return fmt.Sprintf("kubernetes:%d", b.replicas)
}

// parseBackends parses -backends: a comma-separated list of "bolt",
// "kubernetes" (one replica) and "kubernetes:N".
func parseBackends(s string) ([]backend, error) {
	var out []backend
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		name, n, hasN := strings.Cut(f, ":")
		switch {
		case name == "bolt" && !hasN:
			out = append(out, backend{})
		case name == "kubernetes":
			b := backend{kube: true, replicas: 1}
			if hasN {
				r, err := strconv.Atoi(n)
				if err != nil || r < 1 {
					return nil, fmt.Errorf("-backends: %q: the replicas after kubernetes: must be a number >= 1", f)
				}
				b.replicas = r
			}
			out = append(out, b)
		default:
			return nil, fmt.Errorf("-backends: %q: want bolt, kubernetes or kubernetes:N", f)
		}
	}
	return out, nil
}

// deployment is the running servers of one backend.
type deployment struct {
	servers []*benchproc.Server
	cluster *kubeproc.Cluster // nil for bolt
	dir     string            // the cluster's; "" for bolt
}

// startDeployment starts the servers of b (and, for Kubernetes, the API
// server with Anvil's CRDs first).
func startDeployment(ctx context.Context, o options, b backend) (_ *deployment, err error) {
	d := &deployment{}
	defer func() {
		if err != nil {
			d.kill()
			d.cleanup(o.keep)
		}
	}()
	opts := benchproc.Options{Binary: o.anvil, LogLevel: o.logLevel, CPUProfile: o.cpuProfile, MemProfile: o.memProfile, Progress: progress}
	if !b.kube {
		s, err := benchproc.Start(ctx, opts)
		if err != nil {
			return nil, err
		}
		d.servers = []*benchproc.Server{s}
		return d, nil
	}
	apiserver, etcd, err := kubeproc.FindBinaries(".")
	if err != nil {
		return nil, err
	}
	if d.dir, err = os.MkdirTemp("", "anvil-bench-kube-"); err != nil {
		return nil, err
	}
	if d.cluster, err = kubeproc.Start(kubeproc.Options{APIServer: apiserver, Etcd: etcd, Dir: d.dir, Logf: progress}); err != nil {
		return nil, err
	}
	defs, err := crds.All()
	if err != nil {
		return nil, err
	}
	if err := d.cluster.InstallCRDs(ctx, defs); err != nil {
		return nil, err
	}
	kubeconfig, err := d.cluster.WriteKubeconfig(d.dir)
	if err != nil {
		return nil, err
	}
	for i := range b.replicas {
		ro := opts
		ro.Args = []string{"--store", "kubernetes", "--kubeconfig", kubeconfig}
		ro.Env = []string{fmt.Sprintf("POD_NAME=fleet-%d", i)}
		if i > 0 {
			ro.CPUProfile, ro.MemProfile = "", "" // the first replica's, which leads (it starts first)
		}
		s, err := benchproc.Start(ctx, ro)
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		d.servers = append(d.servers, s)
	}
	return d, nil
}

// cpu is the servers' CPU time, in seconds.
func (d *deployment) cpu() float64 {
	var t float64
	for _, s := range d.servers {
		t += s.CPU()
	}
	return t
}

// peakRSS is the largest peak RSS of the servers.
func (d *deployment) peakRSS() int64 {
	var m int64
	for _, s := range d.servers {
		m = max(m, benchproc.VmHWM(s.PID))
	}
	return m
}

// clusterCPU is the API server's and etcd's CPU time, in seconds (0
// without a cluster).
func (d *deployment) clusterCPU() (apiserver, etcd float64) {
	if d.cluster == nil {
		return 0, 0
	}
	return benchproc.ProcCPU(d.cluster.APIServer.PID()), benchproc.ProcCPU(d.cluster.Etcd.PID())
}

// apiRequests is the API server's apiserver_request_total, every label
// set summed: the requests it has served so far (0 without a cluster).
func (d *deployment) apiRequests(ctx context.Context) (float64, error) {
	if d.cluster == nil {
		return 0, nil
	}
	code, b, err := d.cluster.Request(ctx, http.MethodGet, "/metrics", "", nil, "text/plain")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("kube-apiserver /metrics: status %d", code)
	}
	var total float64
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("kube-apiserver /metrics: %q: %w", line, err)
		}
		total += v
	}
	return total, sc.Err()
}

// stop sends every server SIGTERM; each must exit 0.
func (d *deployment) stop(timeout time.Duration) error {
	var errs []error
	for i, s := range d.servers {
		if err := s.Stop(timeout); err != nil {
			errs = append(errs, fmt.Errorf("replica %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// kill ends the servers and the cluster at once.
func (d *deployment) kill() {
	for _, s := range d.servers {
		s.Kill()
	}
	if d.cluster != nil {
		d.cluster.Stop()
	}
}

func (d *deployment) cleanup(keep bool) {
	for _, s := range d.servers {
		s.Cleanup(keep)
	}
	if d.dir == "" {
		return
	}
	if keep {
		fmt.Fprintf(os.Stderr, "kept %s (etcd.log, kube-apiserver.log)\n", d.dir)
		return
	}
	os.RemoveAll(d.dir)
}
