// Command discovery is Anvil's discovery throughput benchmark (issue 19):
// N simulated unknown machines power on at once against `anvil serve
// --discovery` run as a child process (internal/benchproc; embedded store,
// no DHCP or TFTP: the agent's part of discovery is what is measured), with
// a Template and two WorkflowRuleSets applied that match them. Each machine
// has its own MAC, SMBIOS UUID and serials and an inventory in
// internal/hwinfo's JSON (a golden file of a real machine, varied per
// machine: a third have more memory and match the higher-priority rule
// set), and runs the agent's own discovery code (internal/agent's
// Discover, over gRPC on a connection of its own, with the agent's
// back-off on a refusal) until the answer hands it its workflow; then its
// first GetAction with that workflow's token.
//
// It reports machines enrolled per second (first call to last token),
// each machine's time, the refusals the agents were given and asked again
// after (the server's busy and full counts), the server's CPU, peak RSS
// and RSS and Go heap growth per discovered machine, the growth of its
// data directory per machine, and HardwareService.Get's latency, called
// in a loop during the run.
//
// Then the storm phase (-storm-max M, below N): the same N machines
// against a fresh server with --discovery-max M. It ends once M machines
// have their workflows and every other one has been refused since; exactly
// M Hardware must have been made, the rest refused, and the API must have
// answered throughout.
//
// With -peer, the same machines run against Tinkerbell's own
// auto-discovery and auto-enrolment (the tinkerbell binary on an etcd and
// kube-apiserver it starts: peer.go), between the two phases.
//
//	go run ./bench/discovery -n 1000
//	go run ./bench/discovery -n 1000 -peer bench/out/tinkerbell
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/anvilproj/anvil/internal/benchresult"
)

var stderr io.Writer = os.Stderr

func main() {
	var o options
	flag.IntVar(&o.n, "n", 1000, "unknown machines powered on at once")
	flag.IntVar(&o.stormMax, "storm-max", -1, "--discovery-max of the storm phase, below -n (-1: 4/5 of -n; 0: no storm phase)")
	flag.StringVar(&o.anvil, "anvil", "bin/anvil", "path to the anvil binary")
	flag.StringVar(&o.inventory, "inventory", "internal/hwinfo/testdata/dell-r610.golden.json", "the inventory every machine is a variation of (internal/hwinfo's JSON)")
	flag.BoolVar(&o.getAction, "get-action", true, "each enrolled machine then asks for its first action with its token")
	flag.DurationVar(&o.wait, "wait", 30*time.Second, "the Discover long poll each agent asks for (the agent's default)")
	flag.DurationVar(&o.probe, "probe-every", 20*time.Millisecond, "the pause between two HardwareService.Get calls of the API probe")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up after this long")
	flag.StringVar(&o.logLevel, "log-level", "warn", "the server's --log-level")
	flag.StringVar(&o.serverArg, "server-args", "", "more flags for anvil serve, space-separated")
	flag.BoolVar(&o.keep, "keep", false, "keep the data directories (and the server logs)")
	flag.BoolVar(&o.jsonOut, "json", false, "also print the figures as one JSON line")
	flag.StringVar(&o.variant, "variant", "", "result file suffix after discovery- (default: N)")
	flag.StringVar(&o.peer, "peer", "", "the tinkerbell binary (xz -dc /work/shared/tinkerbell/tinkerbell.xz): run the same machines against its auto-discovery on an etcd and kube-apiserver (make kube); empty: no peer")
	results := benchresult.DirFlag()
	flag.Parse()
	o.results = *results
	if o.stormMax < 0 {
		o.stormMax = o.n * 4 / 5
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "discovery:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "discovery: FAIL:", err)
		os.Exit(1)
	}
}

// run runs both phases, prints the report and saves the result file.
func run(ctx context.Context, o options, w io.Writer) error {
	rep, res, err := measure(ctx, o)
	if rep == nil {
		return err
	}
	rep.print(w)
	if o.jsonOut {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(w, string(b))
	}
	if err != nil {
		return err
	}
	return res.Save(o.results, o.resultVariant())
}

// measure runs the phases and returns the report and its result (not
// yet saved).
func measure(ctx context.Context, o options) (*report, *benchresult.Result, error) {
	res := benchresult.New("discovery")
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	base, err := loadFixture(o.inventory)
	if err != nil {
		return nil, nil, err
	}
	raw, _, err := inventory(base, 0)
	if err != nil {
		return nil, nil, err
	}
	rep := &report{CPUs: res.Cores, Inventory: o.inventory, InvBytes: len(raw)}
	if rep.Throughput, err = runPhase(ctx, o, base, "throughput", o.n, o.n); err != nil {
		return nil, nil, fmt.Errorf("throughput phase: %w", err)
	}
	if o.peer != "" {
		if rep.peer, err = runPeer(ctx, o, base, o.n); err != nil {
			return nil, nil, fmt.Errorf("peer: %w", err)
		}
		rep.Peer = rep.peer.phase
	}
	if o.stormMax > 0 {
		if rep.Storm, err = runPhase(ctx, o, base, "storm", o.n, o.stormMax); err != nil {
			return nil, nil, fmt.Errorf("storm phase: %w", err)
		}
	}
	rep.result(res, benchresult.Version(o.anvil, "version"))
	return rep, res, errors.Join(rep.errs()...)
}
