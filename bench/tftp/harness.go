package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/anvilproj/anvil/internal/tftp"
)

// serveHarness runs internal/tftp directly on -addr, serving -root (via
// os.Root, as anvil serve does), until SIGINT or SIGTERM. It stands in for
// `anvil serve` when the binary at hand has no TFTP server, and isolates
// the package's cost from the rest of the binary.
func serveHarness(args []string) error {
	fl := flag.NewFlagSet("serve", flag.ExitOnError)
	root := fl.String("root", "", "directory to serve")
	addr := fl.String("addr", "127.0.0.1:69", "UDP address to listen on")
	verbose := fl.Bool("v", false, "log every transfer")
	cpuProfile := fl.String("cpuprofile", "", "write a CPU profile of the run to this file")
	_ = fl.Parse(args)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	r, err := os.OpenRoot(*root)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	srv, err := tftp.New(tftp.Config{FS: r.FS(), Logger: log})
	if err != nil {
		return err
	}
	conn, err := net.ListenPacket("udp", *addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "tftp harness: serving %s on %s\n", *root, conn.LocalAddr())
	return srv.Serve(ctx, conn)
}
