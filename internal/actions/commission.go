package actions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// The commissioning actions test a machine before it is given work: its
// disks' health (SMART) and a short read of each, its memory size, its
// NICs' links. Each reports one Check per device in its Result (passed or
// failed), and fails when a check failed, so that the workflow stops and
// the server marks the machine (docs/commissioning.md). They read the
// system through Config.SysRoot (/sys, /proc, /dev) and Config's ioctl
// functions, so the tests run them on fixture trees and regular files.

// Short names of the commissioning actions. An image reference whose last
// element is one of them (anvil/commission-smart) runs the same action.
const (
	NameCommissionSmart    = "commission-smart"
	NameCommissionDiskRead = "commission-disk-read"
	NameCommissionMemory   = "commission-memory"
	NameCommissionNICLink  = "commission-nic-link"
)

// Results of a Check, the strings the server stores.
const (
	CheckPassed      = "passed"
	CheckFailed      = "failed"
	CheckUnsupported = "unsupported"
)

// Check is the result of one commissioning check on one device.
type Check struct {
	// Name is the check and the device it looked at: "smart/nvme0n1",
	// "disk-read/vda", "memory", "nic-link/eth0".
	Name string
	// Result is CheckPassed, CheckFailed or CheckUnsupported.
	Result string
	// Detail says what was found, for a person.
	Detail string
	// Values are the measurements by name, as text ("mediaErrors": "0").
	Values map[string]string
	// Time is when the check ran.
	Time time.Time
}

// check is one device's check within an action: it returns the result,
// detail and values; Time and Name are filled in by runChecks.
type check struct {
	name string
	run  func() (result, detail string, values map[string]string)
}

// runChecks runs the checks of action in order, writes a line for each
// and returns them all in the Result; the error names every check that
// failed. A context ended stops between checks.
func (c *Catalog) runChecks(ctx context.Context, action string, checks []check, out Output) (Result, error) {
	var (
		res    Result
		failed []string
	)
	for _, ch := range checks {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("%s: %w", action, err)
		}
		at := c.cfg.Clock.Now()
		result, detail, values := ch.run()
		res.Checks = append(res.Checks, Check{Name: ch.name, Result: result, Detail: detail, Values: values, Time: at})
		linef(out, "%s: %s: %s", ch.name, result, detail)
		if result == CheckFailed {
			failed = append(failed, ch.name+": "+detail)
		}
	}
	if len(failed) > 0 {
		return res, fmt.Errorf("%s: %d of %d checks failed: %s", action, len(failed), len(checks), strings.Join(failed, "; "))
	}
	return res, nil
}

// configFailure is the Result and error of a commissioning action whose
// environment cannot be used: a failed check named after the action, so
// that the machine is marked and the reason stored with the others.
func (c *Catalog) configFailure(action string, err error) (Result, error) {
	err = fmt.Errorf("%s: %w", action, err)
	return Result{Checks: []Check{{Name: action, Result: CheckFailed, Detail: err.Error(), Time: c.cfg.Clock.Now()}}}, err
}

// sysPath is p (an absolute path of the machine: /sys/block) under
// Config.SysRoot.
func (c *Catalog) sysPath(p string) string {
	return filepath.Join(c.cfg.SysRoot, p)
}

// ScansDevices reports whether s is a commissioning action that looks at
// every disk or NIC of the machine: the agent lets every driver finish
// loading before it runs one, or a disk still being probed would be left
// out.
func ScansDevices(s Spec) bool {
	switch actionName(s.Image) {
	case NameCommissionSmart, NameCommissionDiskRead, NameCommissionNICLink:
		return true
	}
	return false
}

// nvmeNamespace is the name of an NVMe namespace's block device, or of a
// path to it under native multipath (nvme0c0n1), in a controller's sysfs
// directory.
var nvmeNamespace = regexp.MustCompile(`^nvme[0-9]+(c[0-9]+)?n[0-9]+$`)

// settleNVMe waits, up to Config.DeviceWait, until every NVMe controller of
// /sys/class/nvme is live and lists a namespace: the driver resets each
// controller and scans its namespaces in the background, after its
// module has loaded, so a disk list read too early lacks them. A
// controller with no namespace at all costs the whole wait.
func (c *Catalog) settleNVMe(ctx context.Context) {
	dir := c.sysPath("/sys/class/nvme")
	deadline := c.cfg.Clock.Now().Add(c.cfg.DeviceWait)
	for {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return // no NVMe driver, or none loaded
		}
		settled := true
		for _, ent := range ents {
			ctrl := filepath.Join(dir, ent.Name())
			if readSysString(filepath.Join(ctrl, "state")) != "live" {
				settled = false
				break
			}
			subs, _ := os.ReadDir(ctrl)
			if !slices.ContainsFunc(subs, func(e os.DirEntry) bool { return nvmeNamespace.MatchString(e.Name()) }) {
				settled = false
				break
			}
		}
		if settled || !c.cfg.Clock.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-c.cfg.Clock.After(20 * time.Millisecond):
		}
	}
}

// disks returns the disks a commissioning action checks, by kernel name
// (nvme0n1, sda, vda): the DISKS variable's (names or /dev paths,
// separated by commas or spaces), else every disk of /sys/block that is
// a device (not loop, ram, zram, dm or md), not removable and not empty.
func (c *Catalog) disks(ctx context.Context, e env) ([]string, error) {
	c.settleNVMe(ctx)
	if v := e.str("DISKS"); v != "" {
		var names []string
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
			name := strings.TrimPrefix(f, "/dev/")
			if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
				return nil, fmt.Errorf("DISKS: %q is not a disk (write nvme0n1 or /dev/nvme0n1)", f)
			}
			if _, err := os.Stat(c.sysPath("/sys/block/" + name)); err != nil {
				return nil, fmt.Errorf("DISKS: %s is not a disk of this machine (no /sys/block/%s)", f, name)
			}
			names = append(names, name)
		}
		return names, nil
	}
	ents, err := os.ReadDir(c.sysPath("/sys/block"))
	if err != nil {
		return nil, fmt.Errorf("list disks: %w", err)
	}
	var names []string
	for _, ent := range ents {
		dir := c.sysPath("/sys/block/" + ent.Name())
		if _, err := os.Stat(filepath.Join(dir, "device")); err != nil {
			continue // virtual: loop, ram, zram, dm, md
		}
		if readSysString(filepath.Join(dir, "removable")) == "1" {
			continue // a CD-ROM, a USB stick: not the machine's disks
		}
		if n, err := readSysInt(filepath.Join(dir, "size")); err == nil && n == 0 {
			continue // no medium
		}
		names = append(names, ent.Name())
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, errors.New("the machine has no disk to check (/sys/block lists none with a device)")
	}
	return names, nil
}

// readSysString is a sysfs attribute's value without its newline; "" when
// it cannot be read.
func readSysString(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readSysInt is a sysfs attribute as a decimal integer.
func readSysInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// values builds a Check's Values from name/value pairs.
func values(kv ...any) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[fmt.Sprint(kv[i])] = fmt.Sprint(kv[i+1])
	}
	return m
}

// errNotSupported is wrapped by an ioctl's error when the device does not
// know the request: the check is unsupported there, not failed.
var errNotSupported = errors.New("not supported by the device")

// uintptrOf is the address of b's first byte.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
