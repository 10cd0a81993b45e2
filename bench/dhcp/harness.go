package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/anvilproj/anvil/internal/dhcp"
	"github.com/anvilproj/anvil/internal/macaddr"
)

// harness serves DHCP with internal/dhcp over an in-memory map of the bench
// clients, the way `anvil serve` would with its boot policy as the Backend:
// the difference between the two rows is the rest of anvil.
func harness(args []string) {
	fs := flag.NewFlagSet("harness", flag.ExitOnError)
	clients := fs.Int("clients", 10000, "reservations")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of the run here")
	workers := fs.Int("workers", 0, "dhcp.Config.Workers")
	_ = fs.Parse(args)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	hosts := make(mapBackend, *clients)
	for i := range *clients {
		mac, ip := leaseFor(i)
		hosts[mac] = &dhcp.Host{
			Name: "default/bench", IP: ip, Netmask: net.CIDRMask(prefixLen, 32),
			Gateway: netip.MustParseAddr(serverAddr), Hostname: "bench", LeaseTime: time.Hour, AllowPXE: true,
		}
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := dhcp.New(dhcp.Config{
		ServerIP: netip.MustParseAddr(serverAddr),
		HTTPBase: anvilHTTP,
		Backend:  hosts,
		Logger:   logger,
		Workers:  *workers,
	})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := dhcp.ListenInterface(netip.MustParseAddr(serverAddr), dhcp.ServerPort)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.Serve(ctx, conn); err != nil {
		log.Print(err)
	}
}

type mapBackend map[macaddr.MAC]*dhcp.Host

func (m mapBackend) Lookup(_ context.Context, mac macaddr.MAC) (*dhcp.Host, error) {
	if h := m[mac]; h != nil {
		return h, nil
	}
	return nil, dhcp.ErrUnknownHost
}
