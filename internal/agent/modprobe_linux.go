package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

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

// Modprobe loads the modules or aliases named in args with their
// dependencies, as the kernel's `modprobe -q -- NAME` does, and returns the
// exit code. Flags other than -q/--quiet are accepted and ignored; module
// parameters (NAME key=value) are not supported and are reported.
func Modprobe(args []string) int {
	quiet := false
	var names []string
	onlyNames := false
	for _, a := range args {
		switch {
		case onlyNames:
			names = append(names, a)
		case a == "--":
			onlyNames = true
		case a == "-q" || a == "--quiet":
			quiet = true
		case strings.HasPrefix(a, "-"):
		default:
			names = append(names, a)
		}
	}
	if len(names) == 0 {
		fmt.Fprintln(os.Stderr, "modprobe: no module named")
		return 1
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		fmt.Fprintln(os.Stderr, "modprobe:", err)
		return 1
	}
	idx, err := kmod.Open(filepath.Join(modulesRoot, unix.ByteSliceToString(u.Release[:])))
	if err != nil {
		if !quiet {
			fmt.Fprintln(os.Stderr, "modprobe:", err)
		}
		return 1
	}
	p := kmod.NewProber(kmod.ProberConfig{Index: idx})
	// The kernel's request names one module (or alias); anything after it
	// would be parameters.
	if len(names) > 1 && !quiet {
		fmt.Fprintf(os.Stderr, "modprobe: %s: module parameters are not supported; ignoring %q\n", names[0], names[1:])
	}
	if _, err := p.Probe(names[0]); err != nil {
		if !quiet {
			fmt.Fprintln(os.Stderr, "modprobe:", err)
		}
		return 1
	}
	return 0
}
