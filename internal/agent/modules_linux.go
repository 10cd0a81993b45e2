package agent

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/anvilproj/anvil/internal/kmod"
)

// fatCharsets are the character set modules a FAT filesystem asks for at
// mount time (code page 437 and the kernel's default iocharset); loading
// them with the filesystem saves the kernel a modprobe run for each.
var fatCharsets = []string{"nls_cp437", "nls_ascii", "nls_utf8", "nls_iso8859-1"}

// drivers loads kernel modules in this process, from the boot
// environment's module tree.
type drivers struct {
	idx    *kmod.Index
	prober *kmod.Prober
}

// openDrivers opens the module index of the running kernel.
func openDrivers() (*drivers, error) {
	dir, err := kmod.RunningDir()
	if err != nil {
		return nil, err
	}
	idx, err := kmod.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("no module index in %s (%w): using the kernel's built-in drivers only", dir, err)
	}
	return &drivers{idx: idx, prober: kmod.NewProber(kmod.ProberConfig{Index: idx})}, nil
}

// coldplug loads the drivers of the devices present that o selects (all by
// default: NICs, disk controllers, their buses), the way udev's
// coldplug does, and returns a one-line summary. Failures are printed; they
// do not stop the boot (a device nobody needs is no reason to).
func (d *drivers) coldplug(ctx context.Context, what string, o kmod.ColdplugOptions, logf func(format string, args ...any)) string {
	res, err := d.prober.ColdplugWith(ctx, o)
	for _, e := range res.Errors {
		logf("anvil agent: drivers: %v", e)
	}
	summary := fmt.Sprintf("%s: %d modules loaded in %d rounds", what, len(res.Loaded), res.Rounds)
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

// prepareFS loads the filesystem an action is about to mount (its FS_TYPE),
// in this process: the kernel would otherwise start its module helper for
// it, and for each character set a FAT filesystem wants, at mount time.
func (d *drivers) prepareFS(fstype string, logf func(format string, args ...any)) {
	fstype = strings.ToLower(strings.TrimSpace(fstype))
	if fstype == "" || strings.ContainsAny(fstype, "/ ") {
		return
	}
	names := []string{"fs-" + fstype}
	switch fstype {
	case "vfat", "msdos", "fat", "exfat", "iso9660":
		names = append(names, fatCharsets...)
	}
	for _, n := range names {
		if mods, builtin := d.idx.Lookup(n); builtin || (len(mods) == 0 && !d.idx.Has(n)) {
			continue // built in, or not in this boot environment
		}
		if _, err := d.prober.Probe(n); err != nil {
			logf("anvil agent: filesystem %s: %v", fstype, err)
		}
	}
}

// haveNetworkInterface reports whether a network interface other than
// loopback exists.
func haveNetworkInterface() bool {
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Name() != "lo" {
			return true
		}
	}
	return false
}
