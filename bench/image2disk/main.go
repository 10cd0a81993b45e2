// Command image2diskbench is Anvil's image2disk benchmark: it streams a
// 1 GiB zstd disk image over HTTP into a file, once with Anvil's native
// image2disk action (internal/actions) and once with the shell pipeline
// an operator would otherwise use,
//
//	curl -s URL | zstd -dc | dd of=FILE bs=4M conv=fsync
//
// in the same run, alternating which goes first, and prints the median
// MiB/s (of the uncompressed image) of each, their CPU time, and the
// ratio. conv=fsync is there for fairness: image2disk fsyncs the disk
// before it reports success, so both timings end with the data on the
// device, not in the page cache.
//
// The image is made once and kept in -work: a deterministic stand-in for
// an OS disk, extents of zeros (free space), random bytes (compressed
// files), text and skewed "binary" data, compressed by the zstd command
// (-3, as `zstd` defaults). `anvil serve` serves it from its /images/ on
// 127.0.0.1 (internal/benchproc: a child process, as it serves images to
// machines), so neither side shares a process with the server and the
// server is the one machines download from. image2disk runs in its own
// process too (this command's write mode), with the same defaults as in
// the boot environment. Every written file is checked against the
// image's SHA-256 after its timing.
//
//	go build -o bench/out/image2diskbench ./bench/image2disk && bench/out/image2diskbench
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/benchresult"
)

const (
	mib = 1 << 20
	// targetRatio: image2disk at least this fraction of the pipeline's
	// throughput.
	targetRatio = 0.95
	imageName   = "disk.raw.zst"
)

type config struct {
	size     int64
	runs     int
	work     string
	dest     string
	level    int
	jsonOut  bool
	only     string
	checksum bool
	anvil    string
	results  string // the result file's directory (benchresult)
}

func main() {
	modes := map[string]func([]string) error{"write": write}
	if len(os.Args) > 1 && modes[os.Args[1]] != nil {
		if err := modes[os.Args[1]](os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "image2diskbench:", err)
			os.Exit(1)
		}
		return
	}
	var cfg config
	flag.Int64Var(&cfg.size, "size", 1<<30, "size of the uncompressed image, bytes")
	flag.IntVar(&cfg.runs, "runs", 3, "runs of each contender; medians are printed")
	flag.StringVar(&cfg.work, "work", "bench/out/image2disk", "directory for the image (kept between runs) and the written files")
	flag.StringVar(&cfg.dest, "dest", "", "directory the files are written to (default: -work; a disk-backed filesystem, so fsync means something)")
	flag.IntVar(&cfg.level, "level", 3, "zstd level of the image")
	flag.BoolVar(&cfg.jsonOut, "json", false, "also print the results as one JSON line")
	flag.StringVar(&cfg.only, "only", "", "run one contender only: image2disk or pipeline")
	flag.BoolVar(&cfg.checksum, "checksum", false, "image2disk also verifies CHECKSUM (sha256 of the download)")
	flag.StringVar(&cfg.anvil, "anvil", "bin/anvil", "the anvil binary, whose serve command serves the image")
	results := benchresult.DirFlag()
	flag.Parse()
	cfg.results = *results
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "image2diskbench:", err)
		os.Exit(1)
	}
}

// lineOutput prints the action's lines to stderr and drops progress.
type lineOutput struct{}

func (lineOutput) Line(stream, line string) {
	fmt.Fprintf(os.Stderr, "image2disk %s: %s\n", stream, line)
}
func (lineOutput) Progress(actions.Progress) {}

// write runs the image2disk action once, as the agent would.
func write(args []string) error {
	fl := flag.NewFlagSet("write", flag.ExitOnError)
	url := fl.String("url", "", "IMG_URL")
	dest := fl.String("dest", "", "DEST_DISK (must exist)")
	sum := fl.String("checksum", "", "CHECKSUM")
	_ = fl.Parse(args)
	r, err := actions.New(actions.Config{}).Lookup("quay.io/tinkerbell/actions/image2disk:v1.0.0")
	if err != nil {
		return err
	}
	_, err = r(context.Background(), actions.Spec{Env: map[string]string{
		"IMG_URL": *url, "DEST_DISK": *dest, "COMPRESSED": "true", "CHECKSUM": *sum,
	}}, lineOutput{})
	return err
}

// sample is one timed run.
type sample struct {
	wall, cpu float64 // seconds
}

// contender is one way of writing the image.
type contender struct {
	Name    string  `json:"name"`
	Command string  `json:"command"`
	MiBps   float64 `json:"mib_per_s"`
	Wall    float64 `json:"wall_s"`
	CPU     float64 `json:"cpu_s"`
	samples []sample
	args    func(url, dest string) []string
}

func run(cfg config) error {
	res := benchresult.New("image2disk")
	for _, tool := range []string{"curl", "zstd", "dd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (scripts/install-deps.sh installs it)", tool)
		}
	}
	if err := os.MkdirAll(cfg.work, 0o755); err != nil {
		return err
	}
	if cfg.dest == "" {
		cfg.dest = cfg.work
	}
	img, rawSum, zstSum, err := ensureImage(cfg)
	if err != nil {
		return err
	}
	st, err := os.Stat(img)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "image2diskbench: image %s: %d MiB → %.0f MiB zstd -%d (ratio %.2f)\n",
		img, cfg.size/mib, float64(st.Size())/mib, cfg.level, float64(cfg.size)/float64(st.Size()))

	self, err := os.Executable()
	if err != nil {
		return err
	}
	imagesDir, err := filepath.Abs(filepath.Dir(img))
	if err != nil {
		return err
	}
	srv, err := benchproc.Start(context.Background(), benchproc.Options{Binary: cfg.anvil, LogLevel: "warn",
		Args: []string{"--images-dir", imagesDir}, Progress: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "image2diskbench: "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	defer srv.Cleanup(false)
	defer srv.Kill()
	url := "http://" + srv.HTTPAddr + "/images/" + imageName

	writeArgs := []string{self, "write"}
	if cfg.checksum {
		writeArgs = append(writeArgs, "-checksum", "sha256:"+zstSum)
	}
	contenders := []*contender{
		{Name: "image2disk", Command: "image2diskbench write (internal/actions, COMPRESSED=true)",
			args: func(url, dest string) []string { return append(writeArgs, "-url", url, "-dest", dest) }},
		{Name: "pipeline", Command: "curl -s URL | zstd -dc | dd of=FILE bs=4M conv=fsync",
			args: func(url, dest string) []string {
				return []string{"sh", "-c", `curl -s "$1" | zstd -dc | dd of="$2" bs=4M conv=fsync status=none`, "sh", url, dest}
			}},
	}
	if cfg.only != "" {
		var keep []*contender
		for _, c := range contenders {
			if c.Name == cfg.only {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			return fmt.Errorf("-only %q: no such contender", cfg.only)
		}
		contenders = keep
	}
	dest := filepath.Join(cfg.dest, "written.raw")
	for r := 0; r < cfg.runs; r++ {
		order := contenders
		if r%2 == 1 {
			order = reversed(contenders)
		}
		for _, c := range order {
			s, err := measure(c, url, dest, rawSum)
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", c.Name, r+1, err)
			}
			c.samples = append(c.samples, s)
			fmt.Fprintf(os.Stderr, "image2diskbench: run %d %-10s %7.1f MiB/s  %5.2f s wall  %5.2f s CPU\n",
				r+1, c.Name, float64(cfg.size)/mib/s.wall, s.wall, s.cpu)
		}
	}
	os.Remove(dest)
	for _, c := range contenders {
		c.Wall = median(c.samples, func(s sample) float64 { return s.wall })
		c.CPU = median(c.samples, func(s sample) float64 { return s.cpu })
		c.MiBps = float64(cfg.size) / mib / c.Wall
	}
	err = report(cfg, contenders, float64(st.Size()))
	if rerr := record(res, cfg, srv.Args(), contenders, float64(st.Size())); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// record writes the run's result file: image2disk's throughput over the
// pipeline's, both downloading from the same anvil serve.
func record(res *benchresult.Result, cfg config, serverArgs []string, cs []*contender, zstSize float64) error {
	if len(cs) != 2 {
		return nil // -only: nothing to compare, no result file
	}
	res.Server = benchresult.AnvilServer(benchresult.Version(cfg.anvil, "version"), serverArgs)
	res.Peers = []benchresult.Program{{Name: "curl | zstd -dc | dd conv=fsync",
		Version: benchresult.Version("curl", "--version") + "; " + benchresult.Version("zstd", "--version"),
		Options: cs[1].args("URL", "FILE")}}
	ratio := cs[0].MiBps / cs[1].MiBps
	g := benchresult.Goal{Measure: fmt.Sprintf("MiB/s writing a %d MiB image (zstd -%d, %.0f MiB) from anvil serve to a file, fsynced: image2disk over the pipeline",
		cfg.size/mib, cfg.level, zstSize/mib),
		Target: fmt.Sprintf("≥ %.2f×", targetRatio), Result: fmt.Sprintf("%.2f× (%.0f MiB/s, %.2f s CPU)", ratio, cs[0].MiBps, cs[0].CPU),
		Peer: fmt.Sprintf("%.0f MiB/s, %.2f s CPU", cs[1].MiBps, cs[1].CPU), Met: ratio >= targetRatio}
	if !g.Met {
		g.Reason = "docs/benchmarks.md#image2disk-benchimage2disk"
	}
	res.Goals = []benchresult.Goal{g}
	res.Figures = map[string]any{"runs": cfg.runs, "size": cfg.size, "zstd_size": int64(zstSize), "checksum": cfg.checksum,
		"contenders": cs, "image2disk": "image2diskbench write: internal/actions' image2disk, COMPRESSED=true, as the agent runs it"}
	samples := map[string][]map[string]float64{}
	for _, c := range cs {
		for _, s := range c.samples {
			samples[c.Name] = append(samples[c.Name], map[string]float64{"wall_s": s.wall, "cpu_s": s.cpu})
		}
	}
	res.Samples = samples
	return res.Save(cfg.results, "")
}

// measure writes the image once with c and checks the result.
func measure(c *contender, url, dest, rawSum string) (sample, error) {
	os.Remove(dest)
	// image2disk never creates DEST_DISK (a disk exists); dd creates it.
	// Both start from an empty file.
	if err := os.WriteFile(dest, nil, 0o644); err != nil {
		return sample{}, err
	}
	args := c.args(url, dest)
	cmd := exec.Command(args[0], args[1:]...)
	var errb strings.Builder
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("%v\n%s", err, errb.String())
	}
	wall := time.Since(start).Seconds()
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	sum, err := fileSHA256(dest)
	if err != nil {
		return sample{}, err
	}
	if sum != rawSum {
		return sample{}, fmt.Errorf("written file has sha256 %s; the image has %s", sum, rawSum)
	}
	return sample{wall: wall, cpu: cpu}, nil
}

func report(cfg config, cs []*contender, zstSize float64) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\tMiB/s\twall s\tCPU s\tcommand\t\n")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.2f\t%s\t\n", c.Name, c.MiBps, c.Wall, c.CPU, c.Command)
	}
	tw.Flush()
	fmt.Printf("image: %d MiB raw, %.0f MiB zstd -%d; medians of %d runs; files in %s\n",
		cfg.size/mib, zstSize/mib, cfg.level, cfg.runs, cfg.dest)
	pass := true
	ratio := 0.0
	if len(cs) == 2 {
		ratio = cs[0].MiBps / cs[1].MiBps
		pass = ratio >= targetRatio
		verdict := "met"
		if !pass {
			verdict = "MISSED"
		}
		fmt.Printf("verdict: image2disk %.1f MiB/s = %.2f× the pipeline's %.1f MiB/s; target ≥ %.2f×: %s\n",
			cs[0].MiBps, ratio, cs[1].MiBps, targetRatio, verdict)
	}
	if cfg.jsonOut {
		line, _ := json.Marshal(map[string]any{"bench": "image2disk", "runs": cfg.runs, "size": cfg.size,
			"zstd_size": int64(zstSize), "contenders": cs, "ratio": ratio, "pass": pass})
		fmt.Println(string(line))
	}
	if !pass {
		return errors.New("image2disk is below the target")
	}
	return nil
}

// ensureImage makes the compressed image unless -work has it for this
// size and level, and returns its path and the SHA-256 of the raw and
// compressed image.
func ensureImage(cfg config) (path, rawSum, zstSum string, err error) {
	dir := filepath.Join(cfg.work, fmt.Sprintf("image-%d-l%d", cfg.size, cfg.level))
	path = filepath.Join(dir, imageName)
	sums := filepath.Join(dir, "sha256")
	if b, err := os.ReadFile(sums); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if _, err := os.Stat(path); err == nil {
				return path, f[0], f[1], nil
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", err
	}
	fmt.Fprintf(os.Stderr, "image2diskbench: making a %d MiB image in %s (once)\n", cfg.size/mib, dir)
	cmd := exec.Command("zstd", "-q", "-f", "-T0", "-"+strconv.Itoa(cfg.level), "-o", path)
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", "", "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", "", "", err
	}
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(in, h), 4*mib)
	genErr := generate(w, cfg.size)
	if genErr == nil {
		genErr = w.Flush()
	}
	in.Close()
	if err := cmd.Wait(); err != nil || genErr != nil {
		return "", "", "", fmt.Errorf("making the image: %v %v", genErr, err)
	}
	rawSum = hex.EncodeToString(h.Sum(nil))
	if zstSum, err = fileSHA256(path); err != nil {
		return "", "", "", err
	}
	return path, rawSum, zstSum, os.WriteFile(sums, []byte(rawSum+" "+zstSum+"\n"), 0o644)
}

// generate writes size bytes shaped like an OS disk: extents of 64 KiB to
// 4 MiB, each zeros (45%), random (20%: compressed files, encrypted
// data), text from a word list (25%) or skewed bytes that compress about
// 2:1 (10%: binaries). Deterministic.
func generate(w io.Writer, size int64) error {
	r := rand.New(rand.NewChaCha8([32]byte{'a', 'n', 'v', 'i', 'l'}))
	words := strings.Fields(`the of and to in is for on that with as by this be are from at or an it not
		kernel module systemd usr lib bin etc share doc locale x86_64 amd64 debian linux firmware
		config include void int return struct static const unsigned char if else while for error`)
	buf := make([]byte, 4*mib)
	for done := int64(0); done < size; {
		n := min(int64(64<<10)*(1+int64(r.IntN(64))), size-done)
		b := buf[:n]
		switch k := r.IntN(100); {
		case k < 45:
			clear(b)
		case k < 65:
			for i := 0; i+8 <= len(b); i += 8 {
				v := r.Uint64()
				for j := range 8 {
					b[i+j] = byte(v >> (8 * j))
				}
			}
		case k < 90:
			for i := 0; i < len(b); {
				wd := words[r.IntN(len(words))]
				i += copy(b[i:], wd)
				if i < len(b) {
					b[i] = " \n"[min(r.IntN(12), 1)]
					i++
				}
			}
		default:
			for i := range b {
				v := r.Uint32()
				b[i] = byte(v & (0xff >> (v >> 29))) // mostly small values
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		done += n
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, 4*mib)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func median(ss []sample, f func(sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	sort.Float64s(xs)
	if len(xs) == 0 {
		return 0
	}
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func reversed(cs []*contender) []*contender {
	out := make([]*contender, len(cs))
	for i, c := range cs {
		out[len(cs)-1-i] = c
	}
	return out
}
