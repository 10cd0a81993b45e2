package actions

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// powerCommands maps reboot and poweroff to their reboot(2) commands.
var powerCommands = map[string]int{
	NameReboot:   powerRestart,
	NamePowerOff: powerOff,
}

// power returns the Runner of reboot or poweroff: it does nothing but
// return a Then that flushes the filesystems and calls reboot(2).
func (c *Catalog) power(name string) Runner {
	cmd := powerCommands[name]
	return func(ctx context.Context, s Spec, out Output) (Result, error) {
		linef(out, "%s once the action is reported", name)
		return Result{Then: c.then(cmd)}, nil
	}
}

// then is a Result.Then: sync, then reboot(2) with cmd.
func (c *Catalog) then(cmd int) func() error {
	return func() error {
		c.cfg.Sync()
		if err := c.cfg.Power(cmd); err != nil {
			return fmt.Errorf("reboot(2) command %#x: %w", cmd, err)
		}
		return nil
	}
}

// kexec mounts BLOCK_DEVICE (FS_TYPE), loads KERNEL_PATH and INITRD_PATH
// from it with CMD_LINE (kexec_file_load), unmounts it, and returns a
// Then that starts the loaded kernel.
func (c *Catalog) kexec(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	if e.str("KERNEL_PATH") == "" && e.str("GRUBCFG_PATH") != "" {
		return Result{}, fmt.Errorf("kexec: GRUBCFG_PATH is not supported natively: set KERNEL_PATH, INITRD_PATH and CMD_LINE")
	}
	var req [3]string
	for i, name := range []string{"BLOCK_DEVICE", "FS_TYPE", "KERNEL_PATH"} {
		v, err := e.required(name)
		if err != nil {
			return Result{}, fmt.Errorf("kexec: %w", err)
		}
		req[i] = v
	}
	dev, fstype, kernel := req[0], req[1], req[2]
	initrd, cmdline := e.str("INITRD_PATH"), strings.TrimSpace(s.Env["CMD_LINE"])

	m, err := c.mountDevice(ctx, dev, fstype)
	if err != nil {
		return Result{}, fmt.Errorf("kexec: %w", err)
	}
	err = c.kexecLoad(m.dir, kernel, initrd, cmdline)
	if uerr := m.unmount(); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("kexec: %w", err)
	}
	linef(out, "loaded %s (initrd %q, command line %q) from %s; kexec once the action is reported", kernel, initrd, cmdline, dev)
	return Result{Then: c.then(powerKexec)}, nil
}

// kexecLoad opens the kernel and initrd inside dir and loads them.
func (c *Catalog) kexecLoad(dir, kernel, initrd, cmdline string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	kpath, err := insidePath(kernel)
	if err != nil {
		return fmt.Errorf("KERNEL_PATH: %w", err)
	}
	kf, err := root.Open(kpath)
	if err != nil {
		return fmt.Errorf("KERNEL_PATH: %w", err)
	}
	defer kf.Close()
	initrdFd, flags := -1, kexecNoInitrd
	if initrd != "" {
		ipath, err := insidePath(initrd)
		if err != nil {
			return fmt.Errorf("INITRD_PATH: %w", err)
		}
		inf, err := root.Open(ipath)
		if err != nil {
			return fmt.Errorf("INITRD_PATH: %w", err)
		}
		defer inf.Close()
		initrdFd, flags = int(inf.Fd()), 0
	}
	if err := c.cfg.KexecLoad(int(kf.Fd()), initrdFd, cmdline, flags); err != nil {
		return fmt.Errorf("kexec_file_load %s: %w", kernel, err)
	}
	return nil
}
