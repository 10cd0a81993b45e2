// Package tinkpeer runs upstream Tinkerbell's all-in-one `tinkerbell`
// binary as a benchmark's peer, on the stack it needs: an etcd and a
// kube-apiserver (internal/kubeproc) in a directory of its own, the
// binary pointed at them with --backend kube. The discovery benchmark
// (bench/discovery) runs Tinkerbell's auto-discovery on it, the UI
// benchmark (bench/ui) its web UI. It also creates and counts the peer's
// objects through the API server.
//
// It owns those child processes and their directory; which of
// Tinkerbell's services run, and what is measured, is the caller's.
package tinkpeer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/kubeproc"
)

// Options says how to start the peer.
type Options struct {
	// Binary is the tinkerbell program (xz -dc
	// /work/shared/tinkerbell/tinkerbell.xz).
	Binary string
	// Root is the module's root, where kubeproc.FindBinaries looks for
	// kube-apiserver (.cache/kube/bin, `make kube`).
	Root string
	// Args are the binary's flags, given the kubeconfig file it is to use.
	Args func(kubeconfig string) []string
	// Keep keeps the directory (the programs' data and logs) at Stop.
	Keep bool
	// Logf, if set, is told what started.
	Logf func(format string, args ...any)
}

// Peer is a running tinkerbell and its cluster.
type Peer struct {
	// Cluster is its etcd and kube-apiserver.
	Cluster *kubeproc.Cluster
	// Program is the peer as a result records it: the binary, its
	// version and its exact command line.
	Program benchresult.Program
	// Dir holds the cluster's data, the kubeconfig and tinkerbell.log.
	Dir string

	cmd  *exec.Cmd
	logf *os.File
	keep bool
}

// Start starts etcd, kube-apiserver and the binary. The caller Stops it.
func Start(o Options) (_ *Peer, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	apiserver, etcd, err := kubeproc.FindBinaries(o.Root)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "anvil-tinkpeer-")
	if err != nil {
		return nil, err
	}
	p := &Peer{Dir: dir, keep: o.Keep}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	if p.Cluster, err = kubeproc.Start(kubeproc.Options{APIServer: apiserver, Etcd: etcd, Dir: dir, Logf: o.Logf}); err != nil {
		return nil, err
	}
	kc, err := p.Cluster.WriteKubeconfig(dir)
	if err != nil {
		return nil, err
	}
	args := o.Args(kc)
	p.cmd = exec.Command(o.Binary, args...)
	if p.logf, err = os.Create(filepath.Join(dir, "tinkerbell.log")); err != nil {
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logf, p.logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.cmd = nil
		return nil, fmt.Errorf("start %s: %w", o.Binary, err)
	}
	o.Logf("peer: started %s (pid %d)", o.Binary, p.cmd.Process.Pid)
	p.Program = benchresult.Program{Name: "tinkerbell", Version: benchresult.Version(o.Binary, "--version"),
		Options: append([]string{o.Binary}, args...)}
	return p, nil
}

// Stop ends the binary, then the cluster, and removes the directory
// unless Options.Keep.
func (p *Peer) Stop() {
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
	if p.logf != nil {
		p.logf.Close()
		p.logf = nil
	}
	if p.Cluster != nil {
		p.Cluster.Stop()
		p.Cluster = nil
	}
	if p.keep {
		fmt.Fprintf(os.Stderr, "kept the peer's directory %s (tinkerbell.log)\n", p.Dir)
		return
	}
	os.RemoveAll(p.Dir)
}

// PIDs are the peer's processes: tinkerbell, kube-apiserver, etcd.
func (p *Peer) PIDs() []int {
	return []int{p.cmd.Process.Pid, p.Cluster.APIServer.PID(), p.Cluster.Etcd.PID()}
}

// LogTail is the end of tinkerbell's log.
func (p *Peer) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "tinkerbell.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Create POSTs an object (YAML or JSON) to path of the API server.
func (p *Peer) Create(ctx context.Context, path string, doc []byte) error {
	return p.send(ctx, http.MethodPost, path, "application/json", doc)
}

// MergePatch sends a JSON merge patch to path (e.g. an object's /status).
func (p *Peer) MergePatch(ctx context.Context, path string, patch []byte) error {
	return p.send(ctx, http.MethodPatch, path, "application/merge-patch+json", patch)
}

func (p *Peer) send(ctx context.Context, method, path, contentType string, doc []byte) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, p.Cluster.URL+path, bytes.NewReader(j))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := p.Cluster.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// CreateRetrying creates the object, asking again until deadline while
// the API server refuses it: the peer installs its CRDs at its start, and
// until they are established their kinds are unknown.
func (p *Peer) CreateRetrying(ctx context.Context, path string, doc []byte, deadline time.Time) error {
	for {
		err := p.Create(ctx, path, doc)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Count is the number of items at path (a list), -1 when it cannot be
// read.
func (p *Peer) Count(ctx context.Context, path string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.Cluster.URL+path, nil)
	if err != nil {
		return -1
	}
	resp, err := p.Cluster.Client.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&l) != nil {
		return -1
	}
	return len(l.Items)
}
