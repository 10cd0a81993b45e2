// Command anvil is Anvil's one binary: `anvil serve` runs the provisioning
// server, the other commands are clients of its API.
//
// main only builds the command tree and wires flags to packages; the logic
// lives in internal/server and internal/cli.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/agent"
	"github.com/anvilproj/anvil/internal/cli"
	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/version"
)

func main() {
	// A container's init is this binary started again by the agent: it
	// is PID 1 of its own namespace, so this comes before the check below.
	container.InitIfChild()
	// In the boot environment anvil is /init: PID 1 mounts the kernel's
	// filesystems, reaps orphans and keeps `anvil agent --boot` running.
	if os.Getpid() == 1 {
		agent.Init()
	}
	// The boot environment's agent makes anvil the kernel's module helper
	// (/sbin/modprobe), for filesystems and the like loaded on demand.
	if filepath.Base(os.Args[0]) == "modprobe" {
		os.Exit(agent.Modprobe(os.Args[1:]))
	}
	os.Exit(run())
}

// run executes the command line and returns the exit code. It never calls
// os.Exit itself, so every deferred shutdown runs.
func run() int {
	// SIGINT/SIGTERM cancel the context; a second signal, after the first
	// has started a graceful shutdown, kills the process the default way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	err := newRootCmd().ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "anvil:", err)
	var exit *cli.ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	return 1
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "anvil",
		Short:         "Bare-metal provisioning in one binary",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Set up logging for every command before it runs.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			l, err := newLogger(cmd)
			if err != nil {
				return err
			}
			slog.SetDefault(l)
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.String("server", cli.DefaultServer, "address of the anvil API, http:// or https:// (env "+cli.EnvServer+")")
	pf.String(cli.FlagCACert, "", "PEM file of the CA to trust for an https:// --server, e.g. from 'anvil tls ca' (env "+cli.EnvCACert+"; default: the system's CAs)")
	pf.Bool(cli.FlagInsecureSkipVerify, false, "do not verify the server's certificate (labs only: anyone on the path can read and change the calls)")
	cli.AddTokenFlags(root)
	pf.String("log-format", "text", "log format: text or json")
	pf.String("log-level", "info", "log level: debug, info, warn or error")

	root.AddCommand(newServeCmd(), newVersionCmd(), newRelayCmd(), newAgentCmd(), newBootenvCmd(), newTokenCmd(), newTLSCmd(),
		newExportCmd(), newRestoreCmd())
	root.AddCommand(cli.Commands()...)
	return root
}

// newLogger builds the slog logger the --log-format and --log-level flags
// ask for, writing to standard error.
func newLogger(cmd *cobra.Command) (*slog.Logger, error) {
	format, _ := cmd.Flags().GetString("log-format")
	levelName, _ := cmd.Flags().GetString("log-level")
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", levelName)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit anvil was built from",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.Get())
		},
	}
}
