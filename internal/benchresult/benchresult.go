// Package benchresult is the one shape in which every benchmark under
// bench/ records what it measured, so that a figure quoted in
// docs/benchmarks.md can be traced to a committed file that says when, on
// what machine, at which commit, against which peers with which options,
// and from which raw samples it came. The summary table of
// docs/benchmarks.md is generated from these files (bench/table).
//
// It owns the file format and its checks; it measures nothing and starts
// no program (internal/benchproc does).
package benchresult

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ServerUnderTest is the only program a result may name as the server
// under test: a benchmark measures Anvil as users run it, never a
// stand-in main or a library call.
const ServerUnderTest = "anvil serve"

// Result is one benchmark run.
type Result struct {
	// Bench names the benchmark: its scripts/bench.sh section.
	Bench string `json:"bench"`
	// Date is when the run started, UTC.
	Date time.Time `json:"date"`
	// Cores is the number of CPUs the machine offered the run.
	Cores int `json:"cores"`
	// Commit is `git rev-parse HEAD` of the tree measured, with
	// "+dirty" when tracked files differed from it.
	Commit string `json:"commit"`
	// Load is the 1-minute load average before and after the run: a
	// figure measured on a busy machine says so.
	Load [2]float64 `json:"load"`
	// Command is the benchmark's own command line.
	Command []string `json:"command"`
	// Server is the program measured; its Name must be ServerUnderTest.
	// It is empty only in a result with a Subject.
	Server Program `json:"server"`
	// Subject, in a benchmark that starts no server (the agent's
	// image2disk action, the container path of actions, the boot
	// environment's initramfs), names the Anvil code measured and how it
	// ran. A result has a Server or a Subject, never both: a benchmark
	// that serves anything to its clients measures `anvil serve`.
	Subject *Program `json:"subject,omitempty"`
	// Peers are the other programs measured in the same run, each with
	// the exact options it ran with.
	Peers []Program `json:"peers,omitempty"`
	// Goals are the targets this run judges, one table row each.
	Goals []Goal `json:"goals"`
	// Figures is the benchmark's own summary (its table as data).
	Figures any `json:"figures,omitempty"`
	// Samples are the raw measurements the figures were computed from.
	Samples any `json:"samples"`
}

// Program is a server taking part in a run.
type Program struct {
	// Name is what users call it: "anvil serve", "kea-dhcp4", "nginx".
	Name string `json:"name"`
	// Version is what the program reports, when it reports one.
	Version string `json:"version,omitempty"`
	// Options are its command line and the settings that matter for the
	// comparison (e.g. "sendfile on", "windowsize 64").
	Options []string `json:"options"`
}

// Goal is one target and what this run measured against it.
type Goal struct {
	// Measure says what is measured, e.g. "run time, 10,000 machines × 5 actions".
	Measure string `json:"measure"`
	// Target is the goal, e.g. "≤ 10 s" or "≥ 1.0× nginx".
	Target string `json:"target"`
	// Result is Anvil's figure, with its unit.
	Result string `json:"result"`
	// Peer is the peer's figure at the same options in the same run, if any.
	Peer string `json:"peer,omitempty"`
	// Met says whether Result reaches Target.
	Met bool `json:"met"`
	// Reason, for a goal not met, is the measured reason or where it is
	// written down.
	Reason string `json:"reason,omitempty"`
}

// New starts a Result for bench: date, cores, commit, load and command
// are filled in here so that no benchmark has its own way of finding them.
func New(bench string) *Result {
	return &Result{
		Bench:   bench,
		Date:    time.Now().UTC().Truncate(time.Second),
		Cores:   runtime.NumCPU(),
		Commit:  Commit(),
		Load:    [2]float64{LoadAverage(), 0},
		Command: append([]string(nil), os.Args...),
	}
}

// Finish records the load average at the end of the run.
func (r *Result) Finish() { r.Load[1] = LoadAverage() }

// AnvilServer names the server under test: `anvil serve` as it was run,
// argv its whole command line (internal/benchproc's Server.Args), so the
// result holds the exact options measured.
func AnvilServer(version string, argv []string) Program {
	return Program{Name: ServerUnderTest, Version: version, Options: append([]string(nil), argv...)}
}

// Validate says what makes r unfit to be quoted, or nil.
func (r *Result) Validate() error {
	var errs []error
	if r.Bench == "" {
		errs = append(errs, errors.New("no bench name"))
	}
	if r.Date.IsZero() {
		errs = append(errs, errors.New("no date"))
	}
	if r.Cores <= 0 {
		errs = append(errs, errors.New("no core count"))
	}
	if r.Commit == "" {
		errs = append(errs, errors.New("no commit"))
	}
	switch {
	case r.Subject == nil:
		if err := CheckServer(r.Server); err != nil {
			errs = append(errs, err)
		}
	case r.Server.Name != "" || len(r.Server.Options) > 0:
		errs = append(errs, fmt.Errorf("both a server under test (%q) and a subject (%q): a benchmark that starts a server measures it", r.Server.Name, r.Subject.Name))
	case !strings.HasPrefix(r.Subject.Name, "anvil") || len(r.Subject.Options) == 0:
		errs = append(errs, fmt.Errorf("subject %q: a subject is Anvil code (its name starts with \"anvil\") with the options it ran with", r.Subject.Name))
	}
	for i, p := range r.Peers {
		if p.Name == "" || len(p.Options) == 0 {
			errs = append(errs, fmt.Errorf("peer %d (%q): a peer needs its name and its exact options", i, p.Name))
		}
	}
	if len(r.Goals) == 0 {
		errs = append(errs, errors.New("no goals: a result judges at least one target"))
	}
	for i, g := range r.Goals {
		if g.Measure == "" || g.Target == "" || g.Result == "" {
			errs = append(errs, fmt.Errorf("goal %d: measure, target and result are all needed", i))
		}
	}
	if r.Samples == nil {
		errs = append(errs, errors.New("no raw samples"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench result %q: %w", r.Bench, err)
	}
	return nil
}

// CheckServer refuses a server under test that is not `anvil serve`.
func CheckServer(p Program) error {
	if p.Name != ServerUnderTest {
		return fmt.Errorf("server under test is %q: only %q may be measured as Anvil", p.Name, ServerUnderTest)
	}
	if len(p.Options) < 2 || filepath.Base(p.Options[0]) != "anvil" || p.Options[1] != "serve" {
		return fmt.Errorf("server under test runs %q, not `anvil serve`", strings.Join(p.Options, " "))
	}
	return nil
}

// DefaultDir is where results are committed, relative to the
// repository's root.
const DefaultDir = "bench/results"

// DirFlag registers -results, the directory a benchmark writes its result
// into, on the default flag set, so every benchmark takes the same flag.
func DirFlag() *string {
	return flag.String("results", DefaultDir, "write the run's result file (internal/benchresult) into this directory; empty: write none")
}

// Save finishes r and, when dir is not empty, writes it (Write) and says
// where on stderr. A result that does not validate is an error: the run
// measured something that must not be quoted.
func (r *Result) Save(dir, variant string) error {
	r.Finish()
	if dir == "" {
		return r.Validate()
	}
	path, err := r.Write(dir, variant)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "result: %s\n", path)
	return nil
}

// Version is the first non-empty line a program prints when run with
// args (e.g. "nginx", "-v"), for a peer's Version; "unknown" when it
// cannot be run. Some programs print it on stderr, so both are read; one
// that does not exit within seconds (a daemon that took the flag for
// another) is killed.
func Version(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return "unknown"
}

// Marshal validates r and encodes it as indented JSON.
func (r *Result) Marshal() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return json.MarshalIndent(r, "", "  ")
}

// Write validates r and writes it to dir as <bench>[-<variant>].json,
// where variant tells apart results of one bench at different settings
// (e.g. fleet's machine count). It returns the file's path.
func (r *Result) Write(dir, variant string) (string, error) {
	b, err := r.Marshal()
	if err != nil {
		return "", err
	}
	name := r.Bench
	if variant != "" {
		name += "-" + variant
	}
	path := filepath.Join(dir, name+".json")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// Read reads and validates a result file.
func Read(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Commit is `git rev-parse HEAD` of the working directory's tree, with
// "+dirty" when tracked files differ from it, or "unknown" outside git.
// The result files themselves (DefaultDir) do not count: `make bench`
// rewrites them section by section, and the code measured is the same.
func Commit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)"+DefaultDir).Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}

// LoadAverage is the 1-minute load average from /proc/loadavg, or -1
// where it cannot be read.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
