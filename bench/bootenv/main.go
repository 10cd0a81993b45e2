// Command bootenvbench measures the boot environment's initramfs
// compressions: for each, the size of initramfs-x86_64 and how long a QEMU
// TCG machine takes from start to running /init with it (the kernel
// unpacks the initramfs before it runs /init, so this is where the
// decompressor's speed shows), plus the build time.
//
// Each initramfs is what `anvil bootenv build` makes from Debian's kernel
// with the default module selection, with test/bootenvinit as /init and a
// stand-in for the boot environment's binary next to it (default:
// cmd/anvil-agent built with -s -w, as make build builds it, so that it
// compresses like the real one). QEMU runs
// `-accel tcg -m 512 -nographic -no-reboot -nic none -kernel … -initrd …
// -append "console=ttyS0 quiet bootenvinit.coldplug=0"`; the time is
// from starting QEMU to /init's first line on the serial console, and
// the kernel's own uptime at that line is printed too. Runs go round
// robin over the compressions so that load from elsewhere on the machine
// spreads over all of them; medians are printed.
//
//	go build -o bench/out/bootenvbench ./bench/bootenv && bench/out/bootenvbench -runs 5
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/bootenv"
)

const (
	mib          = 1 << 20
	startMarker  = "BOOTENV started uptime="
	bootTimeout  = 3 * time.Minute
	standinPath  = "/usr/bin/anvil-standin"
	defaultComps = "none,gzip,gzip-9,zstd-3,zstd-9,zstd-19,xz,lz4,lz4-9"
)

type row struct {
	Compression  string    `json:"compression"`
	Bytes        int64     `json:"bytes"`
	ContentBytes int64     `json:"content_bytes"`
	BuildSeconds float64   `json:"build_seconds"`
	ToInit       []float64 `json:"to_init_seconds"`      // direct boot: QEMU start to /init's first line
	Uptime       []float64 `json:"uptime_seconds"`       // the kernel's uptime at that line
	IPXEToInit   []float64 `json:"ipxe_to_init_seconds"` // the same over iPXE and HTTP
	IPXEUptime   []float64 `json:"ipxe_uptime_seconds"`
}

func main() {
	var (
		kernel  = flag.String("kernel", ".cache/kernel/vmlinuz", "kernel image")
		modules = flag.String("modules", ".cache/kernel/modules", "modules (as anvil bootenv build --modules)")
		standin = flag.String("standin", "", "file standing in for the boot environment's binary (default: build cmd/anvil-agent with -s -w)")
		comps   = flag.String("compress", defaultComps, "compressions to compare, comma-separated")
		runs    = flag.Int("runs", 5, "boots per compression")
		workDir = flag.String("work", "", "directory for the builds (default: a temporary one, removed)")
		asJSON  = flag.Bool("json", false, "also print one JSON line per compression")
		noIPXE  = flag.Bool("no-ipxe", false, "boot directly only, not over iPXE and HTTP")
		results = benchresult.DirFlag()
	)
	flag.Parse()
	res := benchresult.New("bootenv")
	rows, err := run(*kernel, *modules, *standin, strings.Split(*comps, ","), *runs, *workDir, *asJSON, !*noIPXE)
	if err == nil {
		err = record(res, rows, *runs, *results)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bootenvbench:", err)
		os.Exit(1)
	}
}

func run(kernel, modules, standin string, comps []string, runs int, work string, asJSON, ipxe bool) ([]*row, error) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, fmt.Errorf("qemu-system-x86_64 not found (Debian package qemu-system-x86): %w", err)
	}
	if work == "" {
		dir, err := os.MkdirTemp("", "bootenvbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		work = dir
	}
	ctx := context.Background()
	initBin := filepath.Join(work, "bootenvinit")
	if err := goBuild(initBin, "./test/bootenvinit"); err != nil {
		return nil, err
	}
	if standin == "" {
		standin = filepath.Join(work, "anvil-standin")
		if err := goBuild(standin, "./cmd/anvil-agent", "-ldflags=-s -w"); err != nil {
			return nil, err
		}
	}
	fi, err := os.Stat(standin)
	if err != nil {
		return nil, err
	}
	fmt.Printf("stand-in for anvil-agent: %s (%.1f MiB)\n", standin, float64(fi.Size())/mib)

	rows := make([]*row, len(comps))
	for i, c := range comps {
		start := time.Now()
		res, err := bootenv.Build(ctx, bootenv.Config{
			OutDir: filepath.Join(work, c), Kernel: kernel, Modules: modules, Anvil: initBin,
			Busybox: bootenv.BusyboxNone, Compression: c, Force: true,
			Extras: []bootenv.Extra{{Src: standin, Dst: standinPath}},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			return nil, fmt.Errorf("build %s: %w", c, err)
		}
		rows[i] = &row{Compression: c, Bytes: res.InitramfsSize, ContentBytes: res.ContentBytes,
			BuildSeconds: time.Since(start).Seconds()}
		fmt.Fprintf(os.Stderr, "built %s: %.1f MiB in %.1fs (%d modules)\n", c, float64(res.InitramfsSize)/mib,
			rows[i].BuildSeconds, res.Modules)
	}
	// The HTTP server iPXE fetches from: WORK/COMP/… and a script per
	// compression.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.Handle("/files/", http.StripPrefix("/files/", http.FileServer(http.Dir(work))))
	mux.HandleFunc("/script/{comp}", func(w http.ResponseWriter, r *http.Request) {
		c := r.PathValue("comp")
		fmt.Fprintf(w, "#!ipxe\nkernel http://%[1]s/files/%[2]s/vmlinuz-x86_64 %[3]s\ninitrd http://%[1]s/files/%[2]s/initramfs-x86_64\nboot\n",
			guestHost(port), c, bootArgs)
	})
	go http.Serve(ln, mux) //nolint:errcheck // ends when ln closes

	for r := 0; r < runs; r++ {
		for i, c := range comps {
			dir := filepath.Join(work, c)
			toInit, uptime, err := boot("-nic", "none", "-kernel", filepath.Join(dir, "vmlinuz-x86_64"),
				"-initrd", filepath.Join(dir, "initramfs-x86_64"), "-append", bootArgs)
			if err != nil {
				return nil, fmt.Errorf("boot %s: %w", c, err)
			}
			rows[i].ToInit = append(rows[i].ToInit, toInit)
			rows[i].Uptime = append(rows[i].Uptime, uptime)
			fmt.Fprintf(os.Stderr, "run %d %s: direct: /init after %.2fs (uptime %.2fs)", r+1, c, toInit, uptime)
			if ipxe {
				toInit, uptime, err := boot("-netdev", "user,id=n0,bootfile=http://"+guestHost(port)+"/script/"+c,
					"-device", "virtio-net-pci,netdev=n0", "-boot", "n")
				if err != nil {
					return nil, fmt.Errorf("boot %s over iPXE: %w", c, err)
				}
				rows[i].IPXEToInit = append(rows[i].IPXEToInit, toInit)
				rows[i].IPXEUptime = append(rows[i].IPXEUptime, uptime)
				fmt.Fprintf(os.Stderr, "; iPXE: /init after %.2fs (uptime %.2fs)", toInit, uptime)
			}
			fmt.Fprintln(os.Stderr)
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "compression\tinitramfs MiB\tratio\tbuild s\tdirect: to /init s\tkernel s\tiPXE: to /init s\tkernel s\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t\n", r.Compression, float64(r.Bytes)/mib,
			float64(r.ContentBytes)/float64(r.Bytes), r.BuildSeconds, stat(r.ToInit), stat(r.Uptime),
			stat(r.IPXEToInit), stat(r.IPXEUptime))
	}
	tw.Flush()
	fmt.Printf("medians (min–max) of %d boots; uncompressed contents %.1f MiB; \"kernel\" is the kernel's uptime at /init\n",
		runs, float64(rows[0].ContentBytes)/mib)
	if asJSON {
		for _, r := range rows {
			line, _ := json.Marshal(r)
			fmt.Println(string(line))
		}
	}
	return rows, nil
}

// fastestSlack is how much slower than the fastest compression the
// default may be and still count as the fastest: the spread of medians
// between runs of one compression on this kind of machine.
const fastestSlack = 1.03

// record writes the run's result file. The boot environment is built by
// internal/bootenv in this process and booted by QEMU: no server takes
// part (iPXE fetches from this command's own file server), so the result
// names the build as its subject. The goal is the docs' target: the
// default compression is the fastest to /init, its size reported.
func record(res *benchresult.Result, rows []*row, runs int, dir string) error {
	res.Subject = &benchresult.Program{Name: "anvil bootenv build (internal/bootenv.Build, in the bench's process)",
		Options: []string{"Debian's kernel and default module selection", "test/bootenvinit as /init", "a stand-in for the anvil binary (cmd/anvil -s -w)",
			"qemu-system-x86_64 -accel tcg -m 512 -nographic -no-reboot -append " + bootArgs}}
	res.Peers = []benchresult.Program{{Name: "qemu-system-x86_64", Version: benchresult.Version("qemu-system-x86_64", "--version"),
		Options: []string{"-accel", "tcg", "-m", "512", "-nographic", "-no-reboot"}}}
	var def, fastest *row
	for _, r := range rows {
		if r.Compression == bootenv.DefaultCompression {
			def = r
		}
		if fastest == nil || median(r.ToInit) < median(fastest.ToInit) {
			fastest = r
		}
	}
	if def == nil {
		return fmt.Errorf("no result file: the default compression %s was not measured", bootenv.DefaultCompression)
	}
	g := benchresult.Goal{Measure: fmt.Sprintf("QEMU TCG start to /init, direct boot, the default initramfs compression (%s), median of %d", def.Compression, runs),
		Target: fmt.Sprintf("the fastest measured (≤ %.2f× its median), size reported", fastestSlack),
		Result: fmt.Sprintf("%.2f s, %.1f MiB", median(def.ToInit), float64(def.Bytes)/mib),
		Peer:   fmt.Sprintf("fastest: %s %.2f s, %.1f MiB", fastest.Compression, median(fastest.ToInit), float64(fastest.Bytes)/mib),
		Met:    median(def.ToInit) <= fastestSlack*median(fastest.ToInit)}
	if !g.Met {
		g.Reason = "docs/bootenv.md#compression"
	}
	res.Goals = []benchresult.Goal{g}
	if len(def.IPXEToInit) > 0 {
		res.Goals = append(res.Goals, benchresult.Goal{Measure: fmt.Sprintf("QEMU TCG start to /init over iPXE and HTTP, %s, median of %d", def.Compression, runs),
			Target: "reported", Result: fmt.Sprintf("%.2f s", median(def.IPXEToInit)), Met: true})
	}
	res.Figures = map[string]any{"runs": runs, "default": bootenv.DefaultCompression}
	res.Samples = rows
	return res.Save(dir, "")
}

// bootArgs is the kernel command line: quiet, and /init stops at once.
const bootArgs = "console=ttyS0 quiet bootenvinit.coldplug=0"

// guestHost is this machine's port as QEMU's user-mode network shows it
// to the guest.
func guestHost(port int) string { return fmt.Sprintf("10.0.2.2:%d", port) }

// boot runs QEMU with args until it powers off, and returns the seconds
// from its start to /init's first line and the kernel's uptime that line
// reports.
func boot(args ...string) (toInit, uptime float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	base := []string{"-accel", "tcg", "-m", "512", "-nographic", "-no-reboot"}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", append(base, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(out)
	var console strings.Builder
	for sc.Scan() {
		line := sc.Text()
		console.WriteString(line + "\n")
		if i := strings.Index(line, startMarker); i >= 0 && toInit == 0 {
			toInit = time.Since(start).Seconds()
			uptime, _ = strconv.ParseFloat(strings.Fields(line[i+len(startMarker):])[0], 64)
		}
	}
	if err := cmd.Wait(); err != nil {
		return 0, 0, fmt.Errorf("qemu: %w\n%s", err, console.String())
	}
	if toInit == 0 {
		return 0, 0, fmt.Errorf("/init never ran:\n%s", console.String())
	}
	return toInit, uptime, nil
}

// stat renders the median and range of xs, or "-" without any.
func stat(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median(xs), slices.Min(xs), slices.Max(xs))
}

func goBuild(out, pkg string, flags ...string) error {
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
