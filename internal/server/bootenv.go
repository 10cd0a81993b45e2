package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/anvilproj/anvil/internal/bootenv"
)

// buildBootEnv builds the boot environment into the served directory when
// Config.BootEnvModules asks for it, before anything serves /bootenv/:
// the files are then in place when the first machine asks. A build whose
// inputs are unchanged does nothing.
func buildBootEnv(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.BootEnvModules == "" {
		if cfg.BootEnvKernel != "" || cfg.BootEnvAnvil != "" {
			return errors.New("--bootenv-kernel and --bootenv-anvil need --bootenv-modules")
		}
		return nil
	}
	dir := cfg.BootEnvDir
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "bootenv")
	}
	res, err := bootenv.Build(ctx, bootenv.Config{OutDir: dir, Kernel: cfg.BootEnvKernel, Modules: cfg.BootEnvModules,
		Anvil: cfg.BootEnvAnvil, Logger: log})
	if err != nil {
		return fmt.Errorf("boot environment: %w", err)
	}
	log.Info(res.Summary())
	return nil
}
