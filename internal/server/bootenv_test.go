package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunBootEnvErrors checks that serve's boot environment step runs
// before anything is served and that its failure stops the start with a
// reason (the build itself is tested in internal/bootenv).
func TestRunBootEnvErrors(t *testing.T) {
	tests := []struct {
		name    string
		cfg     func(c *Config)
		wantErr string
	}{
		{"kernel without modules", func(c *Config) { c.BootEnvKernel = "/boot/vmlinuz" }, "need --bootenv-modules"},
		{"modules missing", func(c *Config) { c.BootEnvModules = filepath.Join(t.TempDir(), "none") }, "boot environment: modules"},
		{"modules not modules", func(c *Config) { c.BootEnvModules = t.TempDir() }, "no module directory in it"},
		{"anvil not static", func(c *Config) {
			// A module directory and a kernel path, so the build gets as far
			// as /init; Debian's ls is dynamically linked.
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "kernel"), 0o755); err != nil {
				t.Fatal(err)
			}
			c.BootEnvModules, c.BootEnvKernel, c.BootEnvAnvil = dir, filepath.Join(dir, "vmlinuz"), "/bin/ls"
		}, "/init binary /bin/ls: dynamically linked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), Bind: "127.0.0.1", InsecureNoAuth: true, Listeners: Listeners{HTTP: listenLocal(t), GRPC: listenLocal(t)},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DisableDHCP: true, DisableTFTP: true, DisableSyslog: true}
			tc.cfg(&cfg)
			err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Run error %v; want one containing %q", err, tc.wantErr)
			}
		})
	}
}
