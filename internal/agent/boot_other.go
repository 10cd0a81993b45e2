//go:build !linux

package agent

import (
	"context"
	"errors"
	"os"

	"github.com/anvilproj/anvil/internal/actions"
)

// BootConfig configures Boot (Linux only).
type BootConfig struct {
	Cmdline string
	Actions ActionSet
	Drivers bool
	Network bool
	Console *os.File
}

var errNotLinux = errors.New("the boot environment runs on Linux only")

// Init is PID 1 of the boot environment (Linux only).
func Init() { panic(errNotLinux) }

// Boot is the boot environment's agent (Linux only).
func Boot(context.Context, BootConfig) error { return errNotLinux }

// Modprobe is the kernel's module helper (Linux only).
func Modprobe([]string) int { return 1 }

// CatalogConfig configures NewCatalog (Linux only).
type CatalogConfig struct {
	ImageCacheDir  string
	ImageCacheSize int64
	ScratchDir     string
}

// NewCatalog returns the native actions: containers need Linux.
func NewCatalog(CatalogConfig) (*actions.Catalog, string) {
	return actions.New(actions.Config{}), "no container path: containers need Linux"
}
