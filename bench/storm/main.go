// Command storm is Anvil's boot storm benchmark: N simulated machines power
// on at once and each does what its firmware, iPXE and the agent do, in
// order, against the real `anvil serve` run as a child process
// (internal/benchproc) with DHCP and TFTP on:
//
//  1. DHCP DORA through a relay: the bench is the relay agent (giaddr set,
//     hops 1, replies back at giaddr:67, as `anvil relay` does);
//  2. the iPXE binary over TFTP: the file the answer names, blksize 1432
//     and tsize as iPXE asks, one block at a time;
//  3. iPXE's own DHCP DORA (user class iPXE), whose answer names its script;
//  4. the script over HTTP, then the kernel and initramfs it names, on one
//     keep-alive connection as iPXE does;
//  5. the agent's first GetAction over gRPC (h2c), as worker_id in the
//     script's kernel line.
//
// Each machine has its own source address (127.1.x.y: all of 127.0.0.0/8
// is loopback on Linux), the address its Hardware reserves, so per-client
// limits count it alone. Bytes are checked (size and CRC-32C against the
// files served). A response with Retry-After is retried after that many
// seconds, as iPXE's HTTP core does (ipxe/ipxe src/net/tcp/httpcore.c,
// http_transfer_complete); it is counted as a refusal. Anything else that is
// not success — another status, a timeout, wrong bytes, no action — fails
// the machine.
//
// With -abuse, one more client (its own address) loops on one boot path
// file from 8 connections during the storm: the per-client limits must
// stop it (most of its requests refused) while the machines pass.
//
// Then the same bytes move at the same concurrency over loopback with no
// server logic (the loopback floor): UDP request/answer of the DHCP
// packets' sizes, a lockstep UDP copy of the TFTP blocks, and the HTTP
// bodies sent from the files by sendfile on one TCP connection per
// machine. The report gives the storm's time against the floor's.
//
// It needs root: the relay's socket is giaddr:67, where Anvil sends relayed
// replies (RFC 1542).
//
//	go run ./bench/storm -n 1000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/anvilproj/anvil/internal/benchresult"
)

func main() {
	var o options
	flag.IntVar(&o.n, "n", 1000, "machines booting at once")
	flag.StringVar(&o.anvil, "anvil", "bin/anvil", "path to the anvil binary")
	flag.BoolVar(&o.jsonOut, "json", false, "also print the figures as one JSON line")
	flag.StringVar(&o.resultDir, "result-dir", "bench/results", "write the result (internal/benchresult) here as storm-N.json; empty: do not write")
	flag.StringVar(&o.variant, "variant", "", "file name suffix after storm- (default: N)")
	flag.StringVar(&o.bootenv, "bootenv", "auto", "boot environment files: real (the built ones in -bootenv-dir), sized (random files of -kernel-bytes and -initramfs-bytes), auto (real when present, else sized)")
	flag.StringVar(&o.bootenvDir, "bootenv-dir", ".cache/demo/bootenv", "directory of the real vmlinuz-x86_64 and initramfs-x86_64 (make demo builds it)")
	flag.Int64Var(&o.kernelBytes, "kernel-bytes", 8247232, "size of the kernel with -bootenv sized")
	flag.Int64Var(&o.initrdBytes, "initramfs-bytes", 38172298, "size of the initramfs with -bootenv sized")
	flag.BoolVar(&o.abuse, "abuse", true, "run one abusive client (a loop from one address) during the storm")
	flag.BoolVar(&o.floor, "floor", true, "measure the loopback floor after the storm")
	flag.StringVar(&o.serverArgs, "server-args", "", "more flags for anvil serve, space-separated (e.g. \"--boot-concurrency 70\")")
	flag.StringVar(&o.giaddr, "giaddr", "127.0.0.2", "the relay's address (loopback); replies come to it on port 67")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up after this long")
	flag.StringVar(&o.logLevel, "log-level", "warn", "the server's --log-level")
	flag.BoolVar(&o.keep, "keep", false, "keep the data directory (and the server log)")
	flag.Parse()
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(2)
	}
	rep, err := run(context.Background(), o)
	if rep != nil {
		rep.print(os.Stdout)
		if o.jsonOut {
			b, _ := json.Marshal(rep)
			fmt.Println(string(b))
		}
		if o.resultDir != "" {
			path, werr := writeResult(o, rep)
			if werr != nil {
				fmt.Fprintln(os.Stderr, "storm: result:", werr)
				err = errors.Join(err, werr)
			} else {
				progress("wrote %s", path)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm: FAIL:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "storm: "+format+"\n", args...)
}

// writeResult records rep as bench/results/storm-N.json.
func writeResult(o options, rep *report) (string, error) {
	r := rep.result
	r.Finish()
	variant := o.variant
	if variant == "" {
		variant = strconv.Itoa(o.n)
	}
	return r.Write(o.resultDir, variant)
}

// newResult starts the result file of a run.
func newResult(o options, serverArgs []string) *benchresult.Result {
	r := benchresult.New("storm")
	r.Server = benchresult.AnvilServer(benchresult.Version(o.anvil, "version"), serverArgs)
	return r
}

// fileSum reads a file served during the storm: its size and CRC-32C are
// what every machine must receive.
func fileSum(path string) (fileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return fileInfo{}, err
	}
	defer f.Close()
	h := newCRC()
	n, err := io.Copy(h, f)
	if err != nil {
		return fileInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	return fileInfo{path: path, name: filepath.Base(path), size: n, crc: h.Sum32()}, nil
}
