package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"golang.org/x/crypto/ssh"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/console"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/supervise"
)

// consoleHostKey is the console's host key inside DataDir.
const consoleHostKey = "console/ssh_host_ed25519_key"

// consoleComponent opens the serial console's SSH listener (closed by res
// if the console never serves) and returns the component serving it.
func consoleComponent(cfg Config, st store.Store, executor *bmc.Executor, events machinelog.Sink, res *closers) (supervise.Component, error) {
	log := cfg.Logger
	keyFile := cfg.ConsoleHostKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(cfg.DataDir, consoleHostKey)
	}
	hostKey, err := console.HostKey(keyFile)
	if err != nil {
		return supervise.Component{}, err
	}
	ln, err := listen(context.Background(), nil, cfg.Bind, &cfg.ConsolePort, "console")
	if err != nil {
		return supervise.Component{}, err
	}
	res.add(func() error { ln.Close(); return nil }) // closed by Serve when served; harmless
	srv := console.New(console.Config{Store: st, HostKey: hostKey, Attach: attachConsole(executor), Events: events, Logger: log})
	return supervise.Component{Name: "serial console", Run: bestEffort(log, "serial console stopped", func(ctx context.Context) error {
		log.Info("serial console listening", "addr", ln.Addr().String(), "host_key", ssh.FingerprintSHA256(hostKey.PublicKey()))
		return srv.Serve(ctx, ln)
	})}, nil
}

// attachConsole is the executor's Console with a console lost mid-stream
// told apart as console.ErrLost, so the console attaches it again.
func attachConsole(executor *bmc.Executor) func(context.Context, *model.Machine, io.Reader, io.Writer) error {
	return func(ctx context.Context, m *model.Machine, in io.Reader, out io.Writer) error {
		err := executor.Console(ctx, m, in, out)
		if errors.Is(err, bmc.ErrConsoleLost) {
			return fmt.Errorf("%w: %w", console.ErrLost, err)
		}
		return err
	}
}
