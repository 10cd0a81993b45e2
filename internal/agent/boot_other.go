//go:build !linux

package agent

import (
	"context"
	"errors"
	"os"
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
