package server

import (
	"context"
	"log/slog"
	"path/filepath"

	"golang.org/x/crypto/ssh"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/console"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/store"
)

// consoleHostKey is the console's host key inside DataDir.
const consoleHostKey = "console/ssh_host_ed25519_key"

// startConsole opens the serial console's SSH listener and serves it
// until ctx ends; the returned function waits for it to be gone.
func startConsole(ctx context.Context, cfg Config, st store.Store, executor *bmc.Executor, events machinelog.Sink, log *slog.Logger) (func(), error) {
	keyFile := cfg.ConsoleHostKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(cfg.DataDir, consoleHostKey)
	}
	hostKey, err := console.HostKey(keyFile)
	if err != nil {
		return nil, err
	}
	ln, err := listen(ctx, nil, cfg.Bind, &cfg.ConsolePort, "console")
	if err != nil {
		return nil, err
	}
	srv := console.New(console.Config{Store: st, HostKey: hostKey, Attach: executor.Console, Events: events, Logger: log})
	log.Info("serial console listening", "addr", ln.Addr().String(), "host_key", ssh.FingerprintSHA256(hostKey.PublicKey()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil {
			log.Error("serial console stopped", "err", err)
		}
	}()
	return func() { <-done }, nil
}
