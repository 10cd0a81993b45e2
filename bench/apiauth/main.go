// Command apiauthbench measures what authentication costs the management
// API: management calls per second against `anvil serve` with
// authentication on (the local issuer's ES256 tokens, verified on every
// call) and off (--insecure-no-auth), in the same run, alternating which
// goes first, and prints the medians and their ratio. The target is a
// ratio of at least 0.8.
//
// Each round starts a fresh server (its own data directory, ports on
// 127.0.0.1, boot services off), creates one Hardware, and has -clients
// goroutines call HardwareService.Get on it over Connect (binary, HTTP/1.1
// keep-alive) for -duration; the first -warmup of each is not counted. The
// token is the admin token the server writes at start, sent as
// "Authorization: Bearer" on every call, as a CLI or an orchestrator does.
//
//	go build -o bench/out/apiauthbench ./bench/apiauth && bench/out/apiauthbench -anvil bin/anvil
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/clientheader"
	"github.com/anvilproj/anvil/internal/server"
)

// targetRatio: with authentication, at least this fraction of the calls
// per second without.
const targetRatio = 0.8

func main() {
	anvil := flag.String("anvil", "bin/anvil", "the anvil binary")
	rounds := flag.Int("rounds", 3, "rounds per mode (medians are printed)")
	clients := flag.Int("clients", 8, "concurrent callers")
	duration := flag.Duration("duration", 5*time.Second, "measured time per round")
	warmup := flag.Duration("warmup", time.Second, "unmeasured time before each round")
	results := benchresult.DirFlag()
	flag.Parse()
	if err := run(*anvil, *rounds, *clients, *duration, *warmup, *results); err != nil {
		fmt.Fprintln(os.Stderr, "apiauthbench:", err)
		os.Exit(1)
	}
}

func run(bin string, rounds, clients int, duration, warmup time.Duration, dir string) error {
	res := benchresult.New("apiauth")
	results := map[bool][]float64{}
	argv := map[bool][]string{}
	for r := range rounds {
		// Alternate the order, so neither mode always runs on a warmer
		// (or more throttled) machine.
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, authOn := range order {
			rate, args, err := round(bin, authOn, clients, duration, warmup)
			if err != nil {
				return err
			}
			argv[authOn] = args
			fmt.Printf("round %d auth %-3s %9.0f calls/s\n", r+1, onOff(authOn), rate)
			results[authOn] = append(results[authOn], rate)
		}
	}
	off, on := median(results[false]), median(results[true])
	ratio := on / off
	verdict := "met"
	if ratio < targetRatio {
		verdict = "MISSED"
	}
	fmt.Printf("\nHardwareService.Get, %d clients, medians of %d rounds of %s:\n", clients, rounds, duration)
	fmt.Printf("  auth off (--insecure-no-auth)      %9.0f calls/s\n", off)
	fmt.Printf("  auth on (ES256 token, every call)  %9.0f calls/s\n", on)
	fmt.Printf("  ratio on/off %.2f (target >= %.2f): %s\n", ratio, targetRatio, verdict)

	version := benchresult.Version(bin, "version")
	res.Server = benchresult.AnvilServer(version, argv[true])
	res.Peers = []benchresult.Program{{Name: "anvil serve with authentication off (the baseline)", Version: version, Options: argv[false]}}
	g := benchresult.Goal{Measure: fmt.Sprintf("HardwareService.Get calls/s, %d clients, authentication on over off", clients),
		Target: fmt.Sprintf("≥ %.1f×", targetRatio), Result: fmt.Sprintf("%.2f× (%.0f calls/s)", ratio, on),
		Peer: fmt.Sprintf("off: %.0f calls/s", off), Met: ratio >= targetRatio}
	if !g.Met {
		g.Reason = "docs/benchmarks.md#authentication-benchapiauth"
	}
	res.Goals = []benchresult.Goal{g}
	res.Figures = map[string]any{"rounds": rounds, "clients": clients, "duration_s": duration.Seconds(), "warmup_s": warmup.Seconds(),
		"median_on": on, "median_off": off}
	res.Samples = map[string][]float64{"auth_on_calls_per_s": results[true], "auth_off_calls_per_s": results[false]}
	if err := res.Save(dir, ""); err != nil {
		return err
	}
	if ratio < targetRatio {
		return errors.New("target missed")
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// round starts a server and measures calls per second against it.
func round(bin string, authOn bool, clients int, duration, warmup time.Duration) (rate float64, argv []string, err error) {
	dir, err := os.MkdirTemp("", "apiauthbench-")
	if err != nil {
		return 0, nil, err
	}
	defer os.RemoveAll(dir)
	// The ports are bound here and passed to the server (socket
	// activation): nothing can take them between their choice and its start.
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	defer httpLn.Close() // the child has its own copy
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	defer grpcLn.Close()
	args := []string{"serve", "--data-dir", dir, "--bind", "127.0.0.1",
		"--no-dhcp", "--no-tftp", "--no-syslog", "--no-console", "--metadata-port", "0", "--log-level", "warn"}
	if !authOn {
		args = append(args, "--insecure-no-auth")
	}
	cmd := exec.Command(bin, args...)
	argv = append([]string{bin}, args...) // before PassListeners puts a shell in front
	cmd.Stderr = os.Stderr
	if err := server.PassListeners(cmd, server.Listeners{HTTP: httpLn, GRPC: grpcLn}); err != nil {
		return 0, nil, err
	}
	err = cmd.Start()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	base := "http://" + httpLn.Addr().String()
	if err := waitReady(base); err != nil {
		return 0, nil, err
	}
	token := ""
	if authOn {
		b, err := os.ReadFile(filepath.Join(dir, "auth", "admin.token"))
		if err != nil {
			return 0, nil, err
		}
		token = strings.TrimSpace(string(b))
	}
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	auth := ""
	if token != "" {
		auth = "Bearer " + token
	}
	hc := anvilv1connect.NewHardwareServiceClient(&http.Client{Transport: tr}, base,
		clientheader.Set("Authorization", auth))
	spec, err := structpb.NewStruct(map[string]any{"interfaces": []any{map[string]any{"dhcp": map[string]any{"mac": "52:54:00:00:00:01"}}}})
	if err != nil {
		return 0, nil, err
	}
	if _, err := hc.Create(context.Background(), connect.NewRequest(&v1.CreateHardwareRequest{Hardware: &v1.Hardware{
		Metadata: &v1.ObjectMeta{Name: "bench"}, Spec: spec}})); err != nil {
		return 0, nil, fmt.Errorf("create hardware: %w", err)
	}

	var counted atomic.Bool
	var calls atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, err := hc.Get(ctx, connect.NewRequest(&v1.GetRequest{Name: "bench"}))
				if err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
						cancel()
					}
					return
				}
				if counted.Load() {
					calls.Add(1)
				}
			}
		}()
	}
	time.Sleep(warmup)
	counted.Store(true)
	start := time.Now()
	time.Sleep(duration)
	counted.Store(false)
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, nil, fmt.Errorf("auth %s: Get: %w", onOff(authOn), err)
	}
	return float64(calls.Load()) / elapsed.Seconds(), argv, nil
}

func waitReady(base string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("anvil serve not ready after 30s")
}
