// Command ocirunbench measures what the container path costs an action:
// the time from the action's start (the agent calling the Runner that
// actions.Catalog.Select chose) to the action's program running (its first
// output line reaching the agent), for a 10 MiB image:
//
//	native        Anvil's native path: the action's own code runs (its
//	              first line), no image, no container
//	cold          container, the image not in the cache: the tag resolved,
//	              every layer downloaded and verified, unpacked, then the
//	              namespaces, the overlay and the exec
//	warm tag      container, the image in the cache, named by tag: one
//	              manifest request to the registry, then the container
//	warm digest   container, the image in the cache, pinned by digest: no
//	              registry request at all
//	runc          (peer) Debian's runc starting the same unpacked root
//	              filesystem read-only with the same program: a container
//	              start alone, to set beside "warm digest"
//
// The image is FROM scratch: Debian's static busybox as the entrypoint and
// random (incompressible) bytes up to 10 MiB, so it is 10 MiB compressed
// and unpacked; the action runs `busybox echo RUNNING`. The registry is
// Debian's docker-registry (distribution 2.8) in its own process on
// 127.0.0.1, the image pushed to it with go-containerregistry; without it,
// go-containerregistry's in-process registry. Each path runs -runs times,
// round robin; a cold run gets an empty cache. Needs root (namespaces,
// mounts, cgroups), busybox-static, and docker-registry and runc for their
// rows.
//
//	go build -o bench/out/ocirunbench ./bench/ocirun && bench/out/ocirunbench
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/oci"
	"github.com/anvilproj/anvil/internal/oci/ocitest"
	"github.com/anvilproj/anvil/internal/untar/untartest"
)

const (
	mib       = 1 << 20
	imageSize = 10 * mib
	repo      = "anvil-bench/ten-mib"
	marker    = "RUNNING"
)

func main() {
	// The container's init is this binary started again.
	container.InitIfChild()
	runs := flag.Int("runs", 10, "runs of each path")
	work := flag.String("work", "", "work directory (default a temporary one)")
	jsonOut := flag.Bool("json", false, "also print one JSON line per path")
	noRunc := flag.Bool("no-runc", false, "skip the runc row")
	results := benchresult.DirFlag()
	flag.Parse()
	if err := bench(*runs, *work, *jsonOut, !*noRunc, *results); err != nil {
		fmt.Fprintln(os.Stderr, "ocirunbench:", err)
		os.Exit(1)
	}
}

// recorder is the action's Output: it notes when the line that says the
// program runs arrives (the program's stdout line for a container; the
// native action's own first line).
type recorder struct {
	mu     sync.Mutex
	first  time.Time
	stream string
	marker string
	lines  []string
}

func (r *recorder) Line(stream, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, stream+": "+line)
	if r.first.IsZero() && stream == r.stream && line == r.marker {
		r.first = time.Now()
	}
}

func (r *recorder) Progress(actions.Progress) {}

func bench(runs int, work string, jsonOut, withRunc bool, results string) error {
	res := benchresult.New("ocirun")
	if os.Geteuid() != 0 {
		return errors.New("needs root: containers are namespaces, mounts and cgroups")
	}
	if work == "" {
		d, err := os.MkdirTemp("", "ocirunbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		work = d
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("static busybox (busybox-static): %w", err)
	}
	payload := make([]byte, imageSize-len(bb))
	rnd := rand.New(rand.NewPCG(10, 20))
	for i := range payload {
		payload[i] = byte(rnd.Uint32())
	}
	img, err := ocitest.ProgramImageOf(bb, "/bin/busybox", untartest.Entry{Name: "payload", Body: string(payload)})
	if err != nil {
		return err
	}

	host, which, registry, stop, err := startRegistry(filepath.Join(work, "registry"))
	if err != nil {
		return err
	}
	defer stop()
	pusher := &ocitest.Registry{Host: host}
	tag := host + "/" + repo + ":v1"
	digest, err := pusher.PushImage(tag, img)
	if err != nil {
		return err
	}
	pinned := host + "/" + repo + "@" + digest
	fmt.Fprintf(os.Stderr, "registry: %s at %s; image %s (%d MiB)\n", which, host, digest, imageSize/mib)

	rt, err := container.New(container.Config{ScratchDir: filepath.Join(work, "scratch")})
	if err != nil {
		return err
	}
	newCatalog := func(cache string) (*actions.Catalog, error) {
		p, err := oci.New(oci.Config{Dir: cache, Limit: 256 * mib})
		if err != nil {
			return nil, err
		}
		return actions.New(actions.Config{Images: p, Containers: rt}), nil
	}
	warm, err := newCatalog(filepath.Join(work, "cache-warm"))
	if err != nil {
		return err
	}
	spec := func(image string) actions.Spec {
		return actions.Spec{Name: "bench", Image: image, Command: []string{"echo", marker},
			Images: map[string]actions.ImageSource{image: {Source: oci.Source{Image: image, Ref: image, PlainHTTP: true}}}}
	}
	// One pull first, so that the warm rows find the image.
	if _, err := runAction(warm, spec(tag), actions.StreamStdout, marker); err != nil {
		return err
	}

	paths := []struct {
		name string
		run  func(i int) (time.Duration, error)
	}{
		{"native", func(int) (time.Duration, error) {
			return runAction(warm, actions.Spec{Name: "bench", Image: "reboot"}, actions.StreamAction, "reboot once the action is reported")
		}},
		{"cold", func(i int) (time.Duration, error) {
			cold, err := newCatalog(filepath.Join(work, fmt.Sprintf("cache-cold-%d", i)))
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(filepath.Join(work, fmt.Sprintf("cache-cold-%d", i)))
			return runAction(cold, spec(tag), actions.StreamStdout, marker)
		}},
		{"warm tag", func(int) (time.Duration, error) { return runAction(warm, spec(tag), actions.StreamStdout, marker) }},
		{"warm digest", func(int) (time.Duration, error) { return runAction(warm, spec(pinned), actions.StreamStdout, marker) }},
	}
	if withRunc {
		if runc, err := exec.LookPath("runc"); err == nil {
			rootfs := filepath.Join(work, "runc-rootfs")
			if err := unpackFor(warm, spec(pinned), rootfs); err != nil {
				return err
			}
			paths = append(paths, struct {
				name string
				run  func(i int) (time.Duration, error)
			}{"runc (peer)", func(i int) (time.Duration, error) { return runcStart(runc, work, rootfs, i) }})
		} else {
			fmt.Fprintln(os.Stderr, "runc not found (Debian package runc): no peer row")
		}
	}

	times := make([][]time.Duration, len(paths))
	for i := range runs {
		for j, p := range paths {
			d, err := p.run(i)
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", p.name, i+1, err)
			}
			times[j] = append(times[j], d)
		}
	}

	fmt.Printf("time from action start to its program running, 10 MiB image, %d runs each; registry: %s on loopback\n\n", runs, which)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tmedian ms\tmin ms\tmax ms\tover native ms\t")
	nativeMedian := median(times[0])
	for j, p := range paths {
		m := median(times[j])
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", p.name, ms(m), ms(slicesMin(times[j])), ms(slicesMax(times[j])), ms(m-nativeMedian))
	}
	tw.Flush()
	if jsonOut {
		for j, p := range paths {
			line, _ := json.Marshal(map[string]any{
				"bench": "ocirun", "path": p.name, "runs": runs, "image_mib": imageSize / mib, "registry": which,
				"median_ms": ms(median(times[j])), "min_ms": ms(slicesMin(times[j])), "max_ms": ms(slicesMax(times[j])),
			})
			fmt.Println(string(line))
		}
	}

	// The agent's action runner is measured in this process: no server
	// takes part, so the result names it as its subject.
	res.Subject = &benchresult.Program{Name: "anvil agent's action runner (internal/actions, in the bench's process, as the agent runs it)",
		Options: []string{fmt.Sprintf("image %s: %d MiB, FROM scratch, static busybox; the action runs `busybox echo %s`", digest, imageSize/mib, marker),
			"image cache: internal/oci, 256 MiB limit; containers: internal/container"}}
	res.Peers = []benchresult.Program{registry}
	samples := map[string][]float64{}
	for j, p := range paths {
		for _, d := range times[j] {
			samples[p.name] = append(samples[p.name], ms(d))
		}
		if p.name == "runc (peer)" {
			res.Peers = append(res.Peers, benchresult.Program{Name: "runc", Version: benchresult.Version("runc", "--version"),
				Options: []string{"runc run (read-only root filesystem of the same image, the same program)"}})
			continue
		}
		g := benchresult.Goal{Measure: fmt.Sprintf("action start to its program running, %s, %d MiB image, median of %d", p.name, imageSize/mib, runs),
			Target: "reported", Result: fmt.Sprintf("%.2f ms", ms(median(times[j]))), Met: true}
		if p.name == "warm digest" && len(paths) > 4 {
			g.Peer = fmt.Sprintf("runc's start alone %.2f ms", ms(median(times[len(paths)-1])))
		}
		res.Goals = append(res.Goals, g)
	}
	res.Figures = map[string]any{"runs": runs, "image_mib": imageSize / mib, "registry": which}
	res.Samples = samples
	return res.Save(results, "")
}

// runAction selects and runs s as the agent does, and returns the time
// from the call to the line want on stream.
func runAction(c *actions.Catalog, s actions.Spec, stream, want string) (time.Duration, error) {
	out := &recorder{stream: stream, marker: want}
	start := time.Now()
	sel, err := c.Select(s)
	if err != nil {
		return 0, err
	}
	if _, err := sel.Run(context.Background(), s, out); err != nil {
		return 0, fmt.Errorf("%v; lines:\n%s", err, strings.Join(out.lines, "\n"))
	}
	if out.first.IsZero() {
		return 0, fmt.Errorf("no %q line; lines:\n%s", want, strings.Join(out.lines, "\n"))
	}
	return out.first.Sub(start), nil
}

// unpackFor copies the cached image's root filesystem for runc (which is
// given it read-only, as the container path's lower layer is).
func unpackFor(c *actions.Catalog, s actions.Spec, dst string) error {
	p, err := c.PrepareContainer(context.Background(), s, &recorder{})
	if err != nil {
		return err
	}
	defer p.Release()
	return exec.Command("cp", "-a", p.Image().Rootfs, dst).Run()
}

// runcStart runs `runc run` of rootfs with busybox echo and returns the
// time from its start to the marker line.
func runcStart(runc, work, rootfs string, i int) (time.Duration, error) {
	bundle := filepath.Join(work, fmt.Sprintf("runc-bundle-%d", i))
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(bundle)
	if out, err := exec.Command(runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("runc spec: %v %s", err, out)
	}
	specPath := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(specPath)
	if err != nil {
		return 0, err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return 0, err
	}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/busybox", "echo", marker}
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	// The host's network, as the container path's.
	linux := spec["linux"].(map[string]any)
	var nss []any
	for _, ns := range linux["namespaces"].([]any) {
		if ns.(map[string]any)["type"] != "network" {
			nss = append(nss, ns)
		}
	}
	linux["namespaces"] = nss
	if b, err = json.Marshal(spec); err != nil {
		return 0, err
	}
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		return 0, err
	}
	cmd := exec.Command(runc, "run", "--bundle", bundle, fmt.Sprintf("ocirunbench-%d-%d", os.Getpid(), i))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	buf := make([]byte, 256)
	var got []byte
	var at time.Time
	for {
		n, rerr := stdout.Read(buf)
		got = append(got, buf[:n]...)
		if at.IsZero() && strings.Contains(string(got), marker) {
			at = time.Now()
		}
		if rerr != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("runc run: %v: %s", err, got)
	}
	if at.IsZero() {
		return 0, fmt.Errorf("runc run printed %q", got)
	}
	return at.Sub(start), nil
}

// startRegistry starts Debian's docker-registry on a free loopback port,
// else go-containerregistry's in-process registry, and returns its host.
func startRegistry(dir string) (host, which string, peer benchresult.Program, stop func(), err error) {
	bin, lerr := exec.LookPath("docker-registry")
	if lerr != nil {
		r := ocitest.StartRegistry()
		return r.Host, "in-process (go-containerregistry)", benchresult.Program{Name: "go-containerregistry's registry",
			Options: []string{"in the bench's process"}}, r.Server.Close, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", peer, nil, err
	}
	host = ln.Addr().String()
	ln.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", peer, nil, err
	}
	cfg := filepath.Join(dir, "config.yml")
	conf := fmt.Sprintf("version: 0.1\nlog: {level: error, accesslog: {disabled: true}}\nstorage:\n  filesystem: {rootdirectory: %s}\nhttp: {addr: %q}\n",
		filepath.Join(dir, "data"), host)
	peer = benchresult.Program{Name: "docker-registry", Version: benchresult.Version(bin, "--version"),
		Options: append([]string{bin, "serve", cfg}, strings.Split(strings.TrimSpace(conf), "\n")...)}
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return "", "", peer, nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return "", "", peer, nil, err
	}
	cmd := exec.Command(bin, "serve", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", "", peer, nil, err
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() }
	for range 100 {
		if c, err := net.Dial("tcp", host); err == nil {
			c.Close()
			return host, "Debian's docker-registry", peer, stop, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	return "", "", peer, nil, errors.New("docker-registry did not listen")
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func slicesMin(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = min(m, x)
	}
	return m
}

func slicesMax(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
