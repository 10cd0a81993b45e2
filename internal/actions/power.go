package actions

import (
	"context"
	"fmt"
	"io"
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

// defaultGrubCfg is where upstream's kexec reads grub.cfg when
// GRUBCFG_PATH is not set.
const defaultGrubCfg = "/boot/grub/grub.cfg"

// kexec mounts BLOCK_DEVICE (FS_TYPE), loads a kernel from it
// (kexec_file_load), unmounts it, and returns a Then that starts the
// loaded kernel. The kernel is KERNEL_PATH with INITRD_PATH and CMD_LINE;
// without KERNEL_PATH, as upstream, it is grub.cfg's default entry
// (GRUBCFG_PATH, default /boot/grub/grub.cfg): its kernel, initrds and
// arguments, CMD_LINE replacing the arguments when set.
func (c *Catalog) kexec(ctx context.Context, s Spec, out Output) (Result, error) {
	e := env(s.Env)
	var req [2]string
	for i, name := range []string{"BLOCK_DEVICE", "FS_TYPE"} {
		v, err := e.required(name)
		if err != nil {
			return Result{}, fmt.Errorf("kexec: %w", err)
		}
		req[i] = v
	}
	dev, fstype := req[0], req[1]
	cmdline := strings.TrimSpace(s.Env["CMD_LINE"])
	m, err := c.mountDevice(ctx, dev, fstype)
	if err != nil {
		return Result{}, fmt.Errorf("kexec: %w", err)
	}
	root, err := os.OpenRoot(m.dir)
	if err == nil {
		var boot kexecBoot
		boot, err = kexecTarget(root, e, cmdline)
		if err == nil {
			err = c.kexecLoad(root, boot)
		}
		if err == nil {
			linef(out, "loaded %s (initrd %q, command line %q) from %s%s; kexec once the action is reported",
				boot.kernel, strings.Join(boot.initrds, " "), boot.cmdline, dev, boot.from)
		}
		root.Close()
	}
	if uerr := m.unmount(); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return Result{}, fmt.Errorf("kexec: %w", err)
	}
	return Result{Then: c.then(powerKexec)}, nil
}

// kexecBoot is what kexec loads.
type kexecBoot struct {
	kernel  string
	initrds []string
	cmdline string
	from    string // where the paths came from, for the action's line
	// kernelVar and initrdVar name the setting each path came from, for
	// errors.
	kernelVar, initrdVar string
}

// kexecTarget decides what to load: the environment's paths, or
// grub.cfg's default entry.
func kexecTarget(root *os.Root, e env, cmdline string) (kexecBoot, error) {
	if k := e.str("KERNEL_PATH"); k != "" {
		b := kexecBoot{kernel: k, cmdline: cmdline, kernelVar: "KERNEL_PATH", initrdVar: "INITRD_PATH"}
		if i := e.str("INITRD_PATH"); i != "" {
			b.initrds = []string{i}
		}
		return b, nil
	}
	cfgPath := e.str("GRUBCFG_PATH")
	if cfgPath == "" {
		cfgPath = defaultGrubCfg
	}
	p, err := insidePath(cfgPath)
	if err != nil {
		return kexecBoot{}, fmt.Errorf("no KERNEL_PATH, and GRUBCFG_PATH %s: %w", cfgPath, err)
	}
	b, err := readLimited(root, p, maxGrubCfg)
	if err != nil {
		return kexecBoot{}, fmt.Errorf("no KERNEL_PATH, and grub.cfg: %w", err)
	}
	entry, err := grubDefault(string(b))
	if err != nil {
		return kexecBoot{}, fmt.Errorf("no KERNEL_PATH, and %s: %w", cfgPath, err)
	}
	if cmdline == "" {
		cmdline = entry.Args
	}
	what := fmt.Sprintf("%s entry %s (%q)", cfgPath, entry.Path, entry.Title)
	return kexecBoot{kernel: entry.Kernel, initrds: entry.Initrds, cmdline: cmdline, from: ", " + what,
		kernelVar: what + ": linux", initrdVar: what + ": initrd"}, nil
}

// maxGrubCfg bounds the grub.cfg read: real ones are tens of KiB.
const maxGrubCfg = 4 << 20

// readLimited reads a file inside root, refusing one over max bytes.
func readLimited(root *os.Root, name string, max int64) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	return b, nil
}

// kexecLoad opens the kernel and initrds inside root and loads them.
// Several initrds (microcode first, as GRUB lists them) are loaded as
// one: the kernel reads concatenated cpio archives as GRUB hands them.
func (c *Catalog) kexecLoad(root *os.Root, b kexecBoot) error {
	kpath, err := insidePath(b.kernel)
	if err != nil {
		return fmt.Errorf("%s: %w", b.kernelVar, err)
	}
	kf, err := root.Open(kpath)
	if err != nil {
		return fmt.Errorf("%s: %w", b.kernelVar, err)
	}
	defer kf.Close()
	initrdFd, flags := -1, kexecNoInitrd
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, name := range b.initrds {
		ipath, err := insidePath(name)
		if err != nil {
			return fmt.Errorf("%s: %w", b.initrdVar, err)
		}
		f, err := root.Open(ipath)
		if err != nil {
			return fmt.Errorf("%s: %w", b.initrdVar, err)
		}
		files = append(files, f)
	}
	switch len(files) {
	case 0:
	case 1:
		initrdFd, flags = int(files[0].Fd()), 0
	default:
		joined, err := os.CreateTemp(c.cfg.TempDir, "anvil-initrd-")
		if err != nil {
			return err
		}
		os.Remove(joined.Name())
		defer joined.Close()
		for i, f := range files {
			if _, err := io.Copy(joined, f); err != nil {
				return fmt.Errorf("%s %s: %w", b.initrdVar, b.initrds[i], err)
			}
		}
		initrdFd, flags = int(joined.Fd()), 0
	}
	if err := c.cfg.KexecLoad(int(kf.Fd()), initrdFd, b.cmdline, flags); err != nil {
		return fmt.Errorf("kexec_file_load %s: %w", b.kernel, err)
	}
	return nil
}
