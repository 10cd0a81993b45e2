package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/server"
	"github.com/anvilproj/anvil/internal/version"
)

func newServeCmd() *cobra.Command {
	var cfg server.Config
	var memoryLimitMiB int64
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Anvil server: API, workflow engine and (later) the boot services",
		Long: `serve runs every Anvil service on one IP address until SIGINT or SIGTERM,
then shuts down gracefully: in-flight calls get up to 10 seconds to finish.

--bind defaults to 0.0.0.0 (every IPv4 address of the machine). Guessing "the"
address of a multi-homed provisioning host would be a surprise; set --bind to
the provisioning network's address for the DHCP and boot services.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = slog.Default() // set up by the root's --log-* flags
			// A soft limit makes the garbage collector work harder near it
			// instead of letting RSS float to 2-3x the live heap under a
			// burst of reports. GOMEMLIMIT in the environment wins.
			if memoryLimitMiB > 0 && os.Getenv("GOMEMLIMIT") == "" {
				debug.SetMemoryLimit(memoryLimitMiB << 20)
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			cfg.Logger.Info("starting anvil", "version", version.Get().Version, "commit", version.Get().Commit,
				"data_dir", cfg.DataDir)
			return server.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/anvil", "directory of the store and the logs")
	f.StringVar(&cfg.Bind, "bind", server.DefaultBind, "IP address every listener binds to")
	f.IntVar(&cfg.HTTPPort, "http-port", server.DefaultHTTPPort, "port of the HTTP API (HTTP/1.1 and h2c), /healthz, /readyz, /metrics")
	f.IntVar(&cfg.GRPCPort, "grpc-port", server.DefaultGRPCPort, "port of the gRPC API (h2c)")
	f.BoolVar(&cfg.DisableHTTP, "no-http", false, "do not serve the HTTP port")
	f.BoolVar(&cfg.DisableGRPC, "no-grpc", false, "do not serve the gRPC port")
	f.Int64Var(&memoryLimitMiB, "memory-limit-mib", 768, "soft memory limit for the Go runtime in MiB (0: none; GOMEMLIMIT overrides)")
	f.StringVar(&cpuProfile, "cpu-profile", "", "write a Go CPU profile of the whole run to this file (for performance reports)")
	return cmd
}
