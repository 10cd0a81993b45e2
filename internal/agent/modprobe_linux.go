package agent

import (
	"os"
	"path/filepath"

	"github.com/anvilproj/anvil/internal/kmod"
)

// modprobePath is where the kernel runs its module helper from when it
// needs a module nobody loaded: a filesystem at mount(2) ("fs-vfat"), a
// crypto algorithm, a network protocol. The boot environment's agent
// links it to its own binary (InstallModprobe), whose main runs Modprobe
// when started under that name.
const modprobePath = "/sbin/modprobe"

// InstallModprobe makes this binary the kernel's module helper: a symlink
// at /sbin/modprobe to it, and /proc/sys/kernel/modprobe naming that. A
// modprobe already there is left alone.
func InstallModprobe() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if _, err := os.Lstat(modprobePath); err != nil {
		if err := os.MkdirAll(filepath.Dir(modprobePath), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(self, modprobePath); err != nil {
			return err
		}
	}
	return os.WriteFile("/proc/sys/kernel/modprobe", []byte(modprobePath+"\n"), 0o644)
}

// Modprobe is the kernel's module helper (kmod.ModprobeCommand), run when
// this binary is started as modprobe; it returns the exit code.
func Modprobe(args []string) int {
	return kmod.ModprobeCommand(args, kmod.ProberConfig{}, os.Stderr)
}
