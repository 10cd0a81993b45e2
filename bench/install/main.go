// Command installbench is the install benchmark: it runs the end-to-end
// install test (test/e2e TestInstall: a blank QEMU machine PXE boots from
// `anvil serve`, the agent streams a zstd image, writes a file, reads its
// metadata and reboots into the installed OS) -runs times, each timed
// against the bare netboot floor measured in the same test (QEMU start to
// a Go /init's marker, netbooted the same way), prints the table and
// writes the result file. Target: workflow SUCCESS within floor + image
// write + 2.5 s (the median margin of the runs).
//
// The test writes one JSON line per run to ANVIL_E2E_TIMINGS, with the
// command line of the `anvil serve` it started; this command reads them.
// Needs root (namespaces, taps), QEMU and the boot environment's kernel.
//
//	go build -o bench/out/installbench ./bench/install && bench/out/installbench -runs 3
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/anvilproj/anvil/internal/benchresult"
)

// targetMargin is the goal: SUCCESS at most this long after floor + write.
const targetMargin = 2.5

// timing is one run's line (test/e2e logTimings).
type timing struct {
	Test      string   `json:"test"`
	Floor     float64  `json:"floor_s"`
	Write     float64  `json:"write_s"`
	Agent     float64  `json:"agent_s"`
	Success   float64  `json:"success_s"`
	Margin    float64  `json:"margin_s"`
	Installed float64  `json:"installed_s"`
	Server    []string `json:"server"`
	Version   string   `json:"server_version"`
}

func main() {
	runs := flag.Int("runs", 3, "installs to time")
	out := flag.String("out", "bench/out", "directory for each run's test log and the timings file")
	results := benchresult.DirFlag()
	flag.Parse()
	if err := run(*runs, *out, *results); err != nil {
		fmt.Fprintln(os.Stderr, "installbench:", err)
		os.Exit(1)
	}
}

func run(runs int, out, results string) error {
	if runs < 1 {
		return errors.New("-runs must be at least 1")
	}
	res := benchresult.New("install")
	timingsPath, err := filepath.Abs(filepath.Join(out, "install.json"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	os.Remove(timingsPath)
	var failed error
	for i := 1; i <= runs; i++ {
		fmt.Fprintf(os.Stderr, "installbench: run %d of %d\n", i, runs)
		log := filepath.Join(out, fmt.Sprintf("install.%d.log", i))
		cmd := exec.Command("go", "test", "-count=1", "-run", "TestInstall$", "-timeout", "20m", "./test/e2e/")
		cmd.Env = append(os.Environ(), "CI=true", "ANVIL_E2E_TIMINGS="+timingsPath)
		b, err := cmd.CombinedOutput()
		if werr := os.WriteFile(log, b, 0o644); werr != nil {
			return werr
		}
		if err != nil {
			failed = errors.Join(failed, fmt.Errorf("run %d: %v (log: %s)", i, err, log))
		}
	}
	f, err := os.Open(timingsPath)
	if err != nil {
		return errors.Join(failed, fmt.Errorf("no timings: %w", err))
	}
	defer f.Close()
	ts, err := parse(f)
	if err != nil {
		return errors.Join(failed, err)
	}
	med := printTable(os.Stdout, ts)
	if err := record(res, ts, med, results); err != nil {
		return errors.Join(failed, err)
	}
	return failed
}

// parse reads the timings lines; a line that is not one is an error
// naming it.
func parse(r io.Reader) ([]timing, error) {
	var ts []timing
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		var t timing
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("timings line %d: %w", n, err)
		}
		if len(t.Server) < 2 {
			return nil, fmt.Errorf("timings line %d: no server command line", n)
		}
		ts = append(ts, t)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, errors.New("no timings: no install run finished")
	}
	return ts, nil
}

// printTable writes the table and returns the median margin.
func printTable(w io.Writer, ts []timing) float64 {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tfloor\twrite\tagent\tSUCCESS\tmargin\tinstalled OS\t")
	var margins []float64
	for i, t := range ts {
		fmt.Fprintf(tw, "%d\t%.1fs\t%.1fs\t%.1fs\t%.1fs\t%.1fs\t%.1fs\t\n", i+1, t.Floor, t.Write, t.Agent, t.Success, t.Margin, t.Installed)
		margins = append(margins, t.Margin)
	}
	tw.Flush()
	med := median(margins)
	verdict := "met"
	if med > targetMargin {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "median margin over floor + write: %.1fs (target %.1fs): %s\n", med, targetMargin, verdict)
	return med
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func record(res *benchresult.Result, ts []timing, med float64, dir string) error {
	res.Server = benchresult.AnvilServer(ts[0].Version, ts[0].Server) // the test's build is gone by now
	var floors, writes []float64
	for _, t := range ts {
		floors, writes = append(floors, t.Floor), append(writes, t.Write)
	}
	g := benchresult.Goal{Measure: fmt.Sprintf("QEMU TCG, blank VM to workflow SUCCESS, over the bare netboot floor + image write (median of %d)", len(ts)),
		Target: fmt.Sprintf("≤ %.1f s", targetMargin), Result: fmt.Sprintf("%.1f s (floor %.1f s, write %.1f s)", med, median(floors), median(writes)),
		Met: med <= targetMargin}
	if !g.Met {
		g.Reason = "docs/benchmarks.md#install-scriptsbenchsh-install"
	}
	res.Goals = []benchresult.Goal{g}
	res.Figures = map[string]any{"median_margin_s": med, "runs": len(ts)}
	res.Samples = ts
	return res.Save(dir, "")
}
