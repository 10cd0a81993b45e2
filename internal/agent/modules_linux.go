package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/anvilproj/anvil/internal/kmod"
)

// modulesRoot is where the boot environment keeps its kernel modules
// (anvil bootenv build puts them there with their index).
const modulesRoot = "/lib/modules"

// LoadModules loads the drivers of the devices present (NICs, disk
// controllers, their buses) from /lib/modules/$(uname -r), the way udev's
// coldplug does, and returns a one-line summary. Failures are reported in
// the summary and on the console; they do not stop the boot (a driver
// built into the kernel, or a device nobody needs, is no reason to).
func LoadModules(ctx context.Context, logf func(format string, args ...any)) string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Sprintf("drivers: uname: %v", err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	dir := filepath.Join(modulesRoot, release)
	idx, err := kmod.Open(dir)
	if err != nil {
		return fmt.Sprintf("drivers: no module index for kernel %s (%v): using the kernel's built-in drivers only", release, err)
	}
	res, err := kmod.NewProber(kmod.ProberConfig{Index: idx}).Coldplug(ctx)
	for _, e := range res.Errors {
		logf("anvil agent: drivers: %v", e)
	}
	summary := fmt.Sprintf("drivers: %d modules loaded in %d rounds", len(res.Loaded), res.Rounds)
	if len(res.Loaded) > 0 {
		summary += " (" + strings.Join(res.Loaded, " ") + ")"
	}
	if len(res.Errors) > 0 {
		summary += fmt.Sprintf(", %d failed", len(res.Errors))
	}
	if err != nil {
		summary += ": " + err.Error()
	}
	return summary
}
