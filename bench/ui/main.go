// Command ui is the web UI's benchmark (issue 20: "the fleet page with
// 10,000 machines renders its first screen in under 1 s on this
// machine"). It starts `anvil serve` (the built binary, embedded store,
// authentication on) over a store holding N machines, one in five with a
// workflow in varied states (internal/benchfleet's fleet at rest, written
// into the store file before the server starts), logs in through the
// UI's login form with the server's admin token in headless Chromium
// (Debian's chromium through chromedp, internal/headless), and loads the
// fleet page and the hardware list's first page, each -runs times cold
// (the browser's cache emptied first) and warm (loaded again). For each
// load it reads the Performance API in the page: from the navigation's
// start to the first byte, the first contentful paint, DOMContentLoaded
// and the end of the load event (PerformanceNavigationTiming), and what
// was fetched.
//
// With -peer, the same machines (the same objects, as Tinkerbell's
// custom resources) go to Tinkerbell's own web UI: the tinkerbell binary
// with only its UI on, on an etcd and kube-apiserver (internal/tinkpeer),
// logged in through its login form with the API server's URL and a
// token, and its hardware list and its dashboard loaded the same way.
//
// The goal judged is the issue's: every load of either page, cold or
// warm, paints its first content and ends its load event within 1 s.
// Tests do not time the UI (test/browser checks what it shows); this
// does, beside the peer, and prints the ratios.
//
//	go run ./bench/ui -n 10000 -anvil bin/anvil
//	go run ./bench/ui -n 10000 -anvil bin/anvil -peer bench/out/tinkerbell
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"

	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/headless"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

var stderr io.Writer = os.Stderr

func progress(format string, args ...any) {
	fmt.Fprintf(stderr, "ui: "+format+"\n", args...)
}

// goalMs is the first screen: under 1 s.
const goalMs = 1000

type options struct {
	n, runs  int
	anvil    string
	peer     string
	chromium string
	shots    string
	results  string
	jsonOut  bool
	keep     bool
	timeout  time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 10000, "machines in the store (one in five with a workflow)")
	flag.IntVar(&o.runs, "runs", 5, "cold and warm loads of each page")
	flag.StringVar(&o.anvil, "anvil", "bin/anvil", "path to the anvil binary")
	flag.StringVar(&o.peer, "peer", "", "the tinkerbell binary (xz -dc /work/shared/tinkerbell/tinkerbell.xz): measure its UI over the same machines on an etcd and kube-apiserver (make kube); empty: no peer")
	flag.StringVar(&o.chromium, "chromium", "chromium", "the Chromium binary")
	flag.StringVar(&o.shots, "screenshots", "bench/out/ui", "directory for a screenshot of each page measured; empty: none")
	flag.BoolVar(&o.jsonOut, "json", false, "also print the figures as one JSON line")
	flag.BoolVar(&o.keep, "keep", false, "keep the servers' directories and logs")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up after this long")
	results := benchresult.DirFlag()
	flag.Parse()
	o.results = *results
	if o.n < 1 || o.runs < 1 {
		fmt.Fprintln(os.Stderr, "ui: -n and -runs must be at least 1")
		os.Exit(2)
	}
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ui: FAIL:", err)
		os.Exit(1)
	}
}

// report is a run.
type report struct {
	Machines  int      `json:"machines"`
	Workflows int      `json:"workflows"`
	Chromium  string   `json:"chromium"`
	Window    string   `json:"window"`
	Stats     []stats  `json:"stats"`
	PeerNotes []string `json:"peer_notes,omitempty"`

	samples []sample
	server  benchresult.Program
	peer    *benchresult.Program
}

func run(ctx context.Context, o options, w io.Writer) error {
	res := benchresult.New("ui")
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	chromium, err := exec.LookPath(o.chromium)
	if err != nil {
		return fmt.Errorf("chromium: %w (Debian's chromium package)", err)
	}
	if o.shots != "" {
		if err := os.MkdirAll(o.shots, 0o755); err != nil {
			return err
		}
	}
	objs := benchfleet.RestObjects(o.n)
	rep := &report{Machines: o.n, Workflows: countKind(objs, model.KindWorkflow), Window: fmt.Sprintf("%dx%d", headless.Width, headless.Height)}
	if err := runAnvil(ctx, o, chromium, objs, rep); err != nil {
		return err
	}
	if o.peer != "" {
		if err := runPeer(ctx, o, chromium, objs, rep); err != nil {
			return fmt.Errorf("peer: %w", err)
		}
	}
	rep.print(w)
	if o.jsonOut {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(w, string(b))
	}
	rep.result(res)
	return res.Save(o.results, strconv.Itoa(o.n))
}

func countKind(objs []model.Object, kind string) (n int) {
	for _, obj := range objs {
		if obj.GetTypeMeta().Kind == kind {
			n++
		}
	}
	return n
}

// anvilPages are Anvil's pages measured: the fleet page (its first
// screen is the counts by state) and the hardware list's first page.
var anvilPages = []page{
	{Name: "fleet", Path: "/ui/", Items: "ul.counts li"},
	{Name: "hardware", Path: "/ui/hardware", Items: "main tbody tr"},
}

// runAnvil writes the fleet into a new data directory's store, starts
// `anvil serve` on it, logs in and measures anvilPages.
func runAnvil(ctx context.Context, o options, chromium string, objs []model.Object, rep *report) error {
	dir, err := os.MkdirTemp("", "anvil-uibench-")
	if err != nil {
		return err
	}
	if err := fill(ctx, filepath.Join(dir, "data"), objs); err != nil {
		os.RemoveAll(dir)
		return err
	}
	// benchproc starts the server with --insecure-no-auth; switched back
	// on, every page load checks the session's token as users' do.
	srv, err := benchproc.Start(ctx, benchproc.Options{Binary: o.anvil, LogLevel: "warn", Dir: dir, Progress: progress,
		Args: []string{"--insecure-no-auth=false"}})
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	defer srv.Cleanup(o.keep)
	defer srv.Kill()
	rep.server = benchresult.AnvilServer(benchresult.Version(o.anvil, "version"), srv.Args())
	token, err := os.ReadFile(filepath.Join(dir, "data", "auth", "admin.token"))
	if err != nil {
		return fmt.Errorf("the admin token: %w", err)
	}
	base := "http://" + srv.HTTPAddr
	bctx, stop := headless.Start(ctx, chromium)
	defer stop()
	// Debian's chromium wrapper fails on --version; the browser says.
	v, err := chromedp.CallBrowser(bctx, cdpbrowser.GetVersion, cdp.Empty{})
	if err != nil {
		return fmt.Errorf("chromium: %w", err)
	}
	rep.Chromium = v.Product
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"/ui/login"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), strings.TrimSpace(string(token))),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("counts")),
	); err != nil {
		return fmt.Errorf("log in to anvil's UI: %w\n%s", err, srv.LogTail())
	}
	// The UI's view fills from the store's watch after the start: the
	// figures are of the whole fleet, so wait (bounded) until it is there.
	want := fmt.Sprintf("%d machines by state", o.n)
	if err := waitText(bctx, base+"/ui/", "counts", want); err != nil {
		return err
	}
	progress("anvil: logged in; the fleet page says %q", want)
	for _, p := range anvilPages {
		cpu0 := srv.CPU()
		s, err := measure(bctx, benchresult.ServerUnderTest, base, p, o.runs, o.shots, "anvil-"+p.Name+".png")
		if err != nil {
			return err
		}
		rep.add(s, (srv.CPU()-cpu0)*1000/float64(len(s)))
	}
	return nil
}

// fill writes objs into a new embedded store in dataDir (where `anvil
// serve --data-dir dataDir` opens it), in one Apply.
func fill(ctx context.Context, dataDir string, objs []model.Object) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	t0 := time.Now()
	st, err := bolt.Open(filepath.Join(dataDir, backend.StoreFile), bolt.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if _, err := st.Apply(ctx, objs); err != nil {
		st.Close()
		return fmt.Errorf("fill the store: %w", err)
	}
	if err := st.Close(); err != nil {
		return err
	}
	progress("wrote %d objects into the store in %.1f s", len(objs), time.Since(t0).Seconds())
	return nil
}

// waitText loads url until the element id's text is want (the server's
// view or cache catching up), for at most a minute.
func waitText(ctx context.Context, url, id, want string) error {
	var got string
	for deadline := time.Now().Add(time.Minute); ; {
		if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
			return err
		}
		var err error
		if got, err = chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.getElementById(%q) || {}).textContent || ""`, id))); err != nil {
			return err
		}
		if strings.TrimSpace(got) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: #%s says %q after a minute; want %q", url, id, got, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// add records a page's samples and their summaries.
func (r *report) add(s []sample, cpuPerLoadMs float64) {
	r.samples = append(r.samples, s...)
	for _, mode := range []string{"cold", "warm"} {
		st := summarize(s, s[0].Server, s[0].Page, mode)
		st.ServerCPUMs = cpuPerLoadMs
		r.Stats = append(r.Stats, st)
	}
}

func (r *report) stat(server, pageName, mode string) *stats {
	for i := range r.Stats {
		if s := &r.Stats[i]; s.Server == server && s.Page == pageName && s.Mode == mode {
			return s
		}
	}
	return nil
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "ui bench: %d machines (%d workflows), %s, window %s, medians (max) over %d loads\n",
		r.Machines, r.Workflows, r.Chromium, r.Window, r.Stats[0].Runs)
	fmt.Fprintf(w, "%-12s %-9s %-5s %10s %16s %16s %12s\n", "server", "page", "mode", "TTFB ms", "FCP ms", "load ms", "CPU/load ms")
	for _, s := range r.Stats {
		fmt.Fprintf(w, "%-12s %-9s %-5s %10.0f %16s %16s %12.1f\n", s.Server, s.Page, s.Mode, s.TTFBMedianMs,
			fmt.Sprintf("%.0f (%.0f)", s.FCPMedianMs, s.FCPMaxMs), fmt.Sprintf("%.0f (%.0f)", s.LoadMedianMs, s.LoadMaxMs), s.ServerCPUMs)
	}
	for _, c := range r.comparisons() {
		fmt.Fprintf(w, "%s: Tinkerbell's %s / Anvil's %s: load %s\n", c.mode, c.peer.Page, c.anvil.Page, ratio(c.peer.LoadMedianMs, c.anvil.LoadMedianMs))
	}
	for _, n := range r.PeerNotes {
		fmt.Fprintln(w, "peer:", n)
	}
}

// comparison pairs a page of Anvil's with the peer's page that shows the
// same.
type comparison struct {
	mode        string
	anvil, peer *stats
}

func (r *report) comparisons() []comparison {
	var out []comparison
	for _, pair := range peerPairs {
		for _, mode := range []string{"cold", "warm"} {
			a, p := r.stat(benchresult.ServerUnderTest, pair[0], mode), r.stat(peerName, pair[1], mode)
			if a != nil && p != nil {
				out = append(out, comparison{mode, a, p})
			}
		}
	}
	return out
}

func ratio(peer, anvil float64) string {
	if anvil <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", peer/anvil)
}

// result is the run as a benchresult file: one goal per Anvil page,
// judged against the 1 s, with the peer's figure beside it.
func (r *report) result(res *benchresult.Result) {
	res.Server = r.server
	if r.peer != nil {
		res.Peers = []benchresult.Program{*r.peer}
	}
	for _, p := range anvilPages {
		cold, warm := r.stat(benchresult.ServerUnderTest, p.Name, "cold"), r.stat(benchresult.ServerUnderTest, p.Name, "warm")
		worst := max(cold.FCPMaxMs, cold.LoadMaxMs, warm.FCPMaxMs, warm.LoadMaxMs)
		g := benchresult.Goal{
			Measure: fmt.Sprintf("%s page (%s), %d machines: navigation start to first contentful paint and to the load event, headless Chromium, %d cold + %d warm loads",
				p.Name, p.Path, r.Machines, cold.Runs, warm.Runs),
			Target: fmt.Sprintf("< %d ms, every load", goalMs),
			Result: fmt.Sprintf("cold FCP %.0f ms, load %.0f ms; warm FCP %.0f ms, load %.0f ms (medians; worst %.0f ms)",
				cold.FCPMedianMs, cold.LoadMedianMs, warm.FCPMedianMs, warm.LoadMedianMs, worst),
			Met: worst < goalMs && worst > 0,
		}
		if !g.Met {
			g.Reason = "docs/ui.md#how-fast"
		}
		for _, c := range r.comparisons() {
			if c.anvil.Page == p.Name && c.mode == "cold" {
				pw := r.stat(peerName, c.peer.Page, "warm")
				g.Peer = fmt.Sprintf("Tinkerbell's %s page (%s): cold FCP %.0f ms, load %.0f ms; warm FCP %.0f ms, load %.0f ms (%s Anvil's cold load)",
					c.peer.Page, peerPath(c.peer.Page), c.peer.FCPMedianMs, c.peer.LoadMedianMs, pw.FCPMedianMs, pw.LoadMedianMs,
					ratio(c.peer.LoadMedianMs, c.anvil.LoadMedianMs))
			}
		}
		res.Goals = append(res.Goals, g)
	}
	res.Figures = r
	res.Samples = r.samples
}
