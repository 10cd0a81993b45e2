// Package cmdbase holds what every anvil binary's command line shares —
// the full anvil's and the boot environment's anvil-agent's: the root
// command with its --server and logging flags, the version command, the
// exit code an error carries (ExitError), and running a command tree to
// an exit code.
//
// It is a leaf (cobra and the standard library): the management CLI
// (internal/cli) and the agent's command (internal/agentcmd) both build
// on it without linking each other, so that anvil-agent carries neither
// the server nor the CLI.
package cmdbase

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/systemd"
	"github.com/anvilproj/anvil/internal/version"
)

// EnvServer names the environment variable that sets the server address
// when --server is not given.
const EnvServer = "ANVIL_SERVER"

// The logging flags every binary has (NewRoot), which `anvil serve`'s
// config file and environment set too.
const (
	FlagLogFormat = "log-format"
	FlagLogLevel  = "log-level"
)

// DefaultServer is the address --server has by default.
const DefaultServer = "http://127.0.0.1:7080"

// ExitError carries a process exit code other than 1 (e.g. `workflow
// watch` ending in FAILED, `agent --exit-when-done` ending other than
// SUCCESS); Run returns its code.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// NewRoot returns a root command named use, with the persistent flags
// every binary has (--server, --log-format, --log-level) and the default
// slog logger set from the logging flags before any command runs.
func NewRoot(use, short string) *cobra.Command {
	root := &cobra.Command{
		Use:           use,
		Short:         short,
		SilenceUsage:  true,
		SilenceErrors: true,
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
	pf.String("server", DefaultServer, "address of the anvil API, http:// or https:// (env "+EnvServer+")")
	pf.String(FlagLogFormat, "text", "log format: text or json")
	pf.String(FlagLogLevel, "info", "log level: debug, info, warn or error")
	return root
}

// logLevel is the level of the logger the root's hook made last: what
// SetLogLevel changes while the program runs.
var logLevel atomic.Pointer[slog.LevelVar]

// newLogger builds the slog logger the --log-format and --log-level flags
// ask for, writing to standard error: as journald wants it (no time, a
// priority prefix) when standard error is the journal stream systemd
// gave the service, else with the time.
func newLogger(cmd *cobra.Command) (*slog.Logger, error) {
	format, _ := cmd.Flags().GetString(FlagLogFormat)
	levelName, _ := cmd.Flags().GetString(FlagLogLevel)
	level := new(slog.LevelVar)
	if err := setLevel(level, levelName); err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	var mk func(io.Writer, *slog.HandlerOptions) slog.Handler
	switch strings.ToLower(format) {
	case "text":
		mk = func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewTextHandler(w, o) }
	case "json":
		mk = func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewJSONHandler(w, o) }
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	w := cmd.ErrOrStderr()
	logLevel.Store(level)
	if f, ok := w.(*os.File); ok && systemd.IsJournalStream(f) {
		return slog.New(systemd.NewJournalHandler(w, opts, mk)), nil
	}
	return slog.New(mk(w, opts)), nil
}

// setLevel sets v to the level name (--log-level's values).
func setLevel(v *slog.LevelVar, name string) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(name)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", name)
	}
	v.Set(level)
	return nil
}

// SetLogLevel changes the level of the default logger the root's hook
// made, at once and for every goroutine: `anvil serve` applies a changed
// log-level on SIGHUP so.
func SetLogLevel(name string) error {
	v := logLevel.Load()
	if v == nil {
		return errors.New("no logger made by the root command")
	}
	return setLevel(v, name)
}

// NewVersionCmd returns the version command.
func NewVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit this binary was built from",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.Get())
		},
	}
}

// Run executes root with the process's arguments and returns the exit
// code: 0, an ExitError's code, or 1 for any other error, which it prints
// to root's error output after the command's name. It never calls os.Exit
// itself, so every deferred shutdown runs. SIGINT and SIGTERM cancel the
// command's context; a second signal, after the first has started a
// graceful shutdown, kills the process the default way.
func Run(root *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	return ExitCode(root, root.ExecuteContext(ctx))
}

// ExitCode is the exit code of err, the result of executing root: 0 for
// nil, an ExitError's code, else 1. An error is printed to root's error
// output after its name ("anvil: …").
func ExitCode(root *cobra.Command, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(root.ErrOrStderr(), "%s: %v\n", root.Name(), err)
	var exit *ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	return 1
}
