package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/ipxe"
)

type options struct {
	n                        int
	anvil                    string
	jsonOut                  bool
	resultDir, variant       string
	bootenv, bootenvDir      string
	kernelBytes, initrdBytes int64
	abuse, floor             bool
	serverArgs               string
	giaddr                   string
	timeout                  time.Duration
	logLevel                 string
	keep                     bool
}

func (o *options) check() error {
	if o.n < 1 || o.n > 60000 {
		return fmt.Errorf("-n %d: want 1..60000 (one 127.x.y.z address each)", o.n)
	}
	switch o.bootenv {
	case "auto", "real", "sized":
	default:
		return fmt.Errorf("-bootenv %q: want real, sized or auto", o.bootenv)
	}
	if o.kernelBytes < 1 || o.initrdBytes < 1 {
		return errors.New("-kernel-bytes and -initramfs-bytes must be >= 1")
	}
	if a, err := netip.ParseAddr(o.giaddr); err != nil || !a.Is4() || !a.IsLoopback() {
		return fmt.Errorf("-giaddr %q: want an IPv4 loopback address", o.giaddr)
	}
	return nil
}

// abuserIP is the abusive client's address: not a machine's.
const abuserIP = "127.0.0.3"

// run starts the server, gives it the fleet, runs the storm and then the
// floor.
func run(ctx context.Context, o options) (*report, error) {
	benchproc.RaiseNoFile()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tmp, err := os.MkdirTemp("", "anvil-storm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	rl, err := newRelay(netip.MustParseAddr(o.giaddr))
	if err != nil {
		return nil, err
	}
	defer rl.close()

	bootenvDir, kind, err := bootEnv(o, tmp)
	if err != nil {
		return nil, err
	}
	exp := &expected{}
	if exp.kernel, err = fileSum(filepath.Join(bootenvDir, "vmlinuz-x86_64")); err != nil {
		return nil, err
	}
	if exp.initrd, err = fileSum(filepath.Join(bootenvDir, "initramfs-x86_64")); err != nil {
		return nil, err
	}
	ipxePath := filepath.Join(tmp, ipxe.BinaryEFIx8664)
	if err := extract(ipxe.Binaries(), ipxe.BinaryEFIx8664, ipxePath); err != nil {
		return nil, err
	}
	if exp.ipxe, err = fileSum(ipxePath); err != nil {
		return nil, err
	}

	args := strings.Fields(o.serverArgs)
	srv, err := benchproc.Start(ctx, benchproc.Options{Binary: o.anvil, LogLevel: o.logLevel, Args: args, Progress: progress,
		Boot: &benchproc.BootOptions{BootEnvDir: bootenvDir}})
	if err != nil {
		return nil, err
	}
	defer srv.Cleanup(o.keep)
	defer srv.Kill()
	exp.tftp = netip.MustParseAddrPort(srv.TFTPAddr)

	rep := &report{Machines: o.n, CPUs: benchproc.CPUs(), BootEnv: kind, ServerArgs: o.serverArgs,
		Files: map[string]int64{"ipxe.efi": exp.ipxe.size, "vmlinuz": exp.kernel.size, "initramfs": exp.initrd.size}}
	rep.result = newResult(o, srv.Args())

	admin := benchproc.NewH2CClient()
	base := "http://" + srv.GRPCAddr
	setup, err := benchfleet.Apply(ctx, anvilv1connect.NewManifestServiceClient(admin, base, connect.WithGRPC()),
		anvilv1connect.NewWorkflowServiceClient(admin, base, connect.WithGRPC()),
		benchfleet.Spec{N: o.n, Chunk: 500, Netboot: true, IP: machineIP, Netmask: "255.0.0.0", Gateway: "127.0.0.1"}, progress)
	if err != nil {
		return nil, err
	}
	rep.SetupS = (setup.Apply + setup.Render).Seconds()

	rl.forwardTo(netip.MustParseAddrPort(srv.DHCPAddr))

	// The storm.
	sampler := benchproc.NewRSSSampler(srv.PID)
	defer sampler.Stop()
	cpu0 := srv.CPU()
	self0 := benchproc.SelfCPU()
	abuseCtx, stopAbuse := context.WithCancel(ctx)
	ab := &abuser{}
	abDone := make(chan struct{})
	if o.abuse {
		go func() {
			defer close(abDone)
			ab.run(abuseCtx, netip.MustParseAddr(abuserIP), "http://"+srv.HTTPAddr+"/ipxe/binary/"+ipxe.BinaryEFIx8664)
		}()
	} else {
		close(abDone)
	}
	progress("storm: %d machines at once (%s boot environment: kernel %d B, initramfs %d B)", o.n, kind, exp.kernel.size, exp.initrd.size)
	peakCtx, stopPeak := context.WithCancel(ctx)
	peak := make(chan float64, 1)
	go func() { peak <- peakInFlight(peakCtx, "http://"+srv.HTTPAddr+"/metrics") }()
	outs := make([]machineOut, o.n)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range o.n {
		wg.Go(func() { outs[i] = boot(ctx, i, rl, exp) })
	}
	wg.Wait()
	stormTime := time.Since(t0)
	stopAbuse()
	<-abDone
	stopPeak()
	rep.PeakInFlight = <-peak
	rep.StormS = stormTime.Seconds()
	rep.ServerCPUS = srv.CPU() - cpu0
	rep.BenchCPUS = benchproc.SelfCPU() - self0
	rep.PeakRSSMiB = benchproc.MiB(benchproc.VmHWM(srv.PID))
	rep.SampledRSSMiB = benchproc.MiB(sampler.Stop())
	if o.abuse {
		rep.Abuse = &abuseReport{Address: abuserIP, Served: ab.served.Load(), Refused: ab.refused.Load(), Failed: ab.failed.Load()}
		rep.Abuse.ServedPerS = float64(rep.Abuse.Served) / stormTime.Seconds()
	}
	rep.summarize(outs)
	progress("storm: %d machines in %.2f s, %d failed", o.n, rep.StormS, rep.Failures)
	if err := srv.Stop(30 * time.Second); err != nil {
		return rep, err
	}

	if o.floor {
		progress("floor: the same bytes at the same concurrency, plain loopback copies")
		c0 := benchproc.SelfCPU()
		f, retrans, err := measureFloor(ctx, o.n, exp)
		rep.FloorCPUS = benchproc.SelfCPU() - c0
		rep.FloorTFTPRetransmits = retrans
		if err != nil {
			return rep, fmt.Errorf("floor: %w", err)
		}
		rep.FloorS = f.Seconds()
		rep.OverFloor = rep.StormS / rep.FloorS
	}
	rep.fillResult()

	var errs []error
	if rep.Failures > 0 {
		errs = append(errs, fmt.Errorf("%d of %d machines failed to boot: %v; first: %v", rep.Failures, o.n, rep.FailuresByKind, rep.FirstFailure))
	}
	if o.abuse && rep.Abuse.Refused == 0 {
		errs = append(errs, fmt.Errorf("the abusive client at %s was never refused (%d requests served)", abuserIP, rep.Abuse.Served))
	}
	return rep, errors.Join(errs...)
}

// bootEnv decides the boot environment files: the real ones, or random
// ones of the given sizes written under tmp.
func bootEnv(o options, tmp string) (dir, kind string, err error) {
	built := o.bootenvDir
	_, kerr := os.Stat(filepath.Join(built, "vmlinuz-x86_64"))
	_, ierr := os.Stat(filepath.Join(built, "initramfs-x86_64"))
	present := kerr == nil && ierr == nil
	switch {
	case o.bootenv == "real" && !present:
		return "", "", fmt.Errorf("-bootenv real: %s has no vmlinuz-x86_64 and initramfs-x86_64 (make demo builds them; or -bootenv sized)", built)
	case o.bootenv == "real" || (o.bootenv == "auto" && present):
		abs, err := filepath.Abs(built)
		return abs, "real", err
	}
	dir = filepath.Join(tmp, "bootenv")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	for name, size := range map[string]int64{"vmlinuz-x86_64": o.kernelBytes, "initramfs-x86_64": o.initrdBytes} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return "", "", err
		}
		_, err = io.CopyN(f, rand.Reader, size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", "", err
		}
	}
	return dir, "sized", nil
}

// extract writes file name of fsys to path.
func extract(fsys fs.FS, name, path string) error {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return fmt.Errorf("iPXE binary %s: %w", name, err)
	}
	return os.WriteFile(path, b, 0o644)
}

// percentile is the q-quantile of sorted d.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(len(d)-1, int(q*float64(len(d))))]
}
