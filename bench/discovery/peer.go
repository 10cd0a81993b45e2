package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"
	"sigs.k8s.io/yaml"

	tinkproto "github.com/anvilproj/anvil/api/proto"
	"github.com/anvilproj/anvil/api/proto/tinkprotoconnect"
	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/tinkpeer"
)

// The peer (-peer): Tinkerbell's own auto-discovery and auto-enrolment, the
// `tinkerbell` binary with only its Tink server and controller, on an
// etcd and kube-apiserver (internal/tinkpeer) — the stack it needs. Its
// machines are the same: the same inventories (as Tinkerbell's
// AgentAttributes), the same Template and rule set, and a tink-agent's
// call, GetAction with the attributes (Tinkerbell holds the call until the
// machine's Workflow is rendered), asked again after a failure with the
// same back-off as Anvil's agent (250 ms doubling to 5 s, each wait spread
// over its upper half) until an action comes.

// peerPort is the Tink server's gRPC port in the peer run.
const peerPort = "42999"

// tinkerbellArgs are the peer's options, recorded in the result.
func tinkerbellArgs(kubeconfig string) []string {
	return []string{"--backend", "kube", "--backend-kube-config", kubeconfig,
		"--bind-address", "127.0.0.1", "--tink-server-bind-addr", "127.0.0.1", "--tink-server-bind-port", peerPort,
		"--enable-smee=false", "--enable-tootles=false", "--enable-rufio-controller=false", "--enable-secondstar=false", "--enable-ui=false",
		"--tink-server-auto-discovery-enabled", "--tink-server-auto-enrollment-enabled", "--tink-server-auto-discovery-auto-enrollment-enabled"}
}

// peerRun is the peer's run: its figures, and the program as measured.
type peerRun struct {
	phase   *phase
	program benchresult.Program
}

func runPeer(ctx context.Context, o options, base *model.Attributes, n int) (*peerRun, error) {
	peer, err := tinkpeer.Start(tinkpeer.Options{Binary: o.peer, Root: ".", Args: tinkerbellArgs, Keep: o.keep, Logf: progress})
	if err != nil {
		return nil, err
	}
	defer peer.Stop()
	run := &peerRun{program: peer.Program}

	// Its CRDs are installed at its start: create the objects once they are.
	ns := benchfleet.Namespace
	deadline := time.Now().Add(60 * time.Second)
	for _, obj := range peerObjects() {
		if err := peer.CreateRetrying(ctx, "/apis/tinkerbell.org/v1alpha1/namespaces/"+ns+"/"+obj.resource, []byte(obj.yaml), deadline); err != nil {
			return nil, fmt.Errorf("peer: create %s: %w", obj.resource, err)
		}
	}
	for { // the Tink server's port
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+peerPort, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("peer: the Tink server does not listen on %s", peerPort)
		}
		time.Sleep(100 * time.Millisecond)
	}

	pids := peer.PIDs()
	cpu := func() (s float64) {
		for _, p := range pids {
			s += benchproc.ProcCPU(p)
		}
		return s
	}
	rss := func(key string) (b int64) {
		for _, p := range pids {
			b += benchproc.ProcStatusKB(p, key)
		}
		return b
	}
	p := &phase{Name: "peer tinkerbell", Machines: n, DiscoveryMax: n}
	p.RSSBeforeMiB = benchproc.MiB(rss("VmRSS"))
	cpu0 := cpu()
	progress("peer: %d machines at once", n)
	outs := make([]machineOut, n)
	ccs := make([]*countingClient, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		ccs[i] = &countingClient{}
		wg.Go(func() { outs[i] = peerMachine(ctx, i, base, ccs[i]) })
	}
	wg.Wait()
	p.ServerCPUS = cpu() - cpu0
	p.PeakRSSMiB = benchproc.MiB(rss("VmHWM")) // each one's peak, summed
	p.RSSAfterMiB = benchproc.MiB(rss("VmRSS"))
	lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // ctx may have ended
	defer cancel()
	p.HardwareMade = peer.Count(lctx, "/apis/tinkerbell.org/v1alpha1/namespaces/"+ns+"/hardware")
	workflows := peer.Count(lctx, "/apis/tinkerbell.org/v1alpha1/namespaces/"+ns+"/workflows")
	progress("peer: %d Hardware, %d Workflows in the cluster", p.HardwareMade, workflows)
	p.summarize(outs, t0)
	progress("peer: %d enrolled in %.2f s (%.0f/s), %d failed", p.Enrolled, p.WallS, p.PerSecond, p.Failures)
	run.phase = p
	return run, nil
}

// peerMachine is machine i as a tink-agent: GetAction with its
// attributes until an action comes.
func peerMachine(ctx context.Context, i int, base *model.Attributes, cc *countingClient) (out machineOut) {
	out.cc = cc
	raw, mac, err := inventory(base, i)
	if err != nil {
		out.err = err
		return out
	}
	var a model.Attributes
	if err := json.Unmarshal(raw, &a); err != nil {
		out.err = err
		return out
	}
	hc := benchproc.NewH2CClient()
	defer hc.CloseIdleConnections()
	c := tinkprotoconnect.NewWorkflowServiceClient(hc, "http://127.0.0.1:"+peerPort, connect.WithGRPC())
	req := &tinkproto.ActionRequest{AgentId: mac, AgentAttributes: tinkAttributes(&a)}
	start := time.Now()
	wait := 250 * time.Millisecond
	var last error // the last call's failure
	for ctx.Err() == nil {
		resp, err := c.GetAction(ctx, connect.NewRequest(req))
		if err == nil && resp.Msg.GetActionId() != "" {
			out.tokenAt = time.Now()
			out.total = out.tokenAt.Sub(start)
			out.workflow = resp.Msg.GetWorkflowId()
			out.action = resp.Msg.GetName()
			if out.action != actionName {
				out.err = fmt.Errorf("peer machine %d: first action %q, want %q", i, out.action, actionName)
			}
			return out
		}
		if err != nil {
			cc.refused.Add(1) // no work yet, or refused: asked again
			last = err
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
	out.err = fmt.Errorf("peer machine %d: %w (last answer: %v)", i, ctx.Err(), last)
	return out
}

// tinkAttributes is a as Tinkerbell's AgentAttributes message.
func tinkAttributes(a *model.Attributes) *tinkproto.AgentAttributes {
	t := &tinkproto.AgentAttributes{}
	if a.CPU != nil {
		t.Cpu = &tinkproto.CPU{TotalCores: a.CPU.TotalCores, TotalThreads: a.CPU.TotalThreads}
		for _, p := range a.CPU.Processors {
			t.Cpu.Processors = append(t.Cpu.Processors, &tinkproto.Processor{Id: p.ID, Cores: p.Cores, Threads: p.Threads,
				Vendor: p.Vendor, Model: p.Model, Capabilities: p.Capabilities})
		}
	}
	if a.Memory != nil {
		t.Memory = &tinkproto.Memory{Total: a.Memory.Total, Usable: a.Memory.Usable}
	}
	for _, b := range a.BlockDevices {
		t.Block = append(t.Block, &tinkproto.Block{Name: b.Name, ControllerType: b.ControllerType, DriveType: b.DriveType, Size: b.Size,
			PhysicalBlockSize: b.PhysicalBlockSize, Vendor: b.Vendor, Model: b.Model, Wwn: b.WWN, SerialNumber: b.SerialNumber})
	}
	for _, n := range a.NetworkInterfaces {
		t.Network = append(t.Network, &tinkproto.Network{Name: n.Name, Mac: n.MAC, Speed: n.Speed, EnabledCapabilities: n.EnabledCapabilities})
	}
	for _, p := range a.PCIDevices {
		t.Pci = append(t.Pci, &tinkproto.PCI{Vendor: p.Vendor, Product: p.Product, Class: p.Class, Driver: p.Driver})
	}
	for _, p := range a.GPUDevices {
		t.Gpu = append(t.Gpu, &tinkproto.GPU{Vendor: p.Vendor, Product: p.Product, Class: p.Class, Driver: p.Driver})
	}
	if a.Chassis != nil {
		t.Chassis = &tinkproto.Chassis{Serial: a.Chassis.Serial, Vendor: a.Chassis.Vendor}
	}
	if a.BIOS != nil {
		t.Bios = &tinkproto.BIOS{Vendor: a.BIOS.Vendor, Version: a.BIOS.Version, ReleaseDate: a.BIOS.ReleaseDate}
	}
	if a.Baseboard != nil {
		t.Baseboard = &tinkproto.Baseboard{Vendor: a.Baseboard.Vendor, Product: a.Baseboard.Product, Version: a.Baseboard.Version, SerialNumber: a.Baseboard.SerialNumber}
	}
	if a.Product != nil {
		t.Product = &tinkproto.Product{Name: a.Product.Name, Vendor: a.Product.Vendor, SerialNumber: a.Product.SerialNumber}
	}
	return t
}

type kubeObject struct{ resource, yaml string }

// peerObjects are manifests()'s Template and the rule set every machine
// matches, as the peer's custom resources (Tinkerbell's rule sets have no
// priority: the one that matches all is enough).
func peerObjects() []kubeObject {
	var out []kubeObject
	for _, doc := range bytes.Split([]byte(manifests()), []byte("\n---\n")) {
		var m struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &m); err != nil {
			continue
		}
		switch {
		case m.Kind == "Template":
			out = append(out, kubeObject{"templates", string(doc)})
		case m.Kind == "WorkflowRuleSet" && m.Metadata.Name == "intel":
			// Tinkerbell 9111b51c creates the Workflow in
			// spec.workflow.namespace and fails with it empty;
			// Anvil takes empty for the rule set's own.
			doc = bytes.Replace(doc, []byte("  workflow:\n"), []byte("  workflow:\n    namespace: "+benchfleet.Namespace+"\n"), 1)
			out = append(out, kubeObject{"workflowrulesets", string(doc)})
		}
	}
	return out
}
