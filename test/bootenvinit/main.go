// Command bootenvinit is the /init of internal/bootenv's QEMU tests and
// of bench/bootenv, standing in for anvil: it proves that a boot
// environment boots and that internal/kmod loads a machine's drivers from
// the modules inside it, by modalias, as the agent does.
//
// It prints lines starting with "BOOTENV " on the console: "started"
// with the kernel's uptime as soon as it runs, then (unless the kernel
// command line says bootenvinit.coldplug=0) what coldplug loaded, the
// failures, the network interfaces and disks that appeared, and whether
// /dev/vda mounts as vfat — which makes the kernel ask /sbin/modprobe for
// fs-vfat and nls_cp437: /sbin/modprobe links to /init, and called by
// that name this program answers as modprobe (kmod.ModprobeCommand), as
// anvil does. Then it powers off so that QEMU, run with -no-reboot,
// exits.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/anvilproj/anvil/internal/kmod"
)

func main() {
	if filepath.Base(os.Args[0]) == "modprobe" {
		os.Exit(kmod.ModprobeCommand(os.Args[1:], kmod.ProberConfig{}, os.Stderr))
	}
	mount("proc", "/proc", "proc")
	mount("sysfs", "/sys", "sysfs")
	mount("devtmpfs", "/dev", "devtmpfs")
	uptime, _ := os.ReadFile("/proc/uptime")
	say("started uptime=%s", strings.Fields(string(uptime) + " ?")[0])
	cmdline, _ := os.ReadFile("/proc/cmdline")
	if !slices.Contains(strings.Fields(string(cmdline)), "bootenvinit.coldplug=0") {
		coldplug()
	}
	say("done")
	syscall.Sync()
	time.Sleep(100 * time.Millisecond) // let the serial line drain
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		say("power off: %v", err)
	}
	select {} // PID 1 must not exit
}

func coldplug() {
	dir, err := kmod.RunningDir()
	if err != nil {
		say("error %v", err)
		return
	}
	idx, err := kmod.Open(dir)
	if err != nil {
		say("error %v", err)
		return
	}
	p := kmod.NewProber(kmod.ProberConfig{Index: idx})
	start := time.Now()
	res, err := p.Coldplug(context.Background())
	if err != nil {
		say("error coldplug: %v", err)
	}
	say("coldplug rounds=%d modules=%d in %dms", res.Rounds, len(res.Loaded), time.Since(start).Milliseconds())
	say("loaded %s", strings.Join(res.Loaded, " "))
	for _, e := range res.Errors {
		say("failed %s", e)
	}
	say("unmatched %d", len(res.Unmatched))
	say("net %s", strings.Join(list("/sys/class/net", "lo"), " "))
	say("block %s", strings.Join(list("/sys/block", ""), " "))
	// No module of the filesystem is loaded: the kernel runs
	// /sbin/modprobe fs-vfat, then nls_cp437 and nls_ascii (FAT's default
	// code page and character set).
	_ = os.MkdirAll("/mnt", 0o755)
	if err := syscall.Mount("/dev/vda", "/mnt", "vfat", syscall.MS_RDONLY, ""); err != nil {
		say("mount vfat: %v", err)
	} else {
		say("mount vfat ok")
	}
	say("modules %s", strings.Join(procModules(), " "))
}

// procModules returns the names of the loaded modules.
func procModules() []string {
	data, _ := os.ReadFile("/proc/modules")
	var names []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	slices.Sort(names)
	return names
}

// list returns the entries of a sysfs class directory but skip.
func list(dir, skip string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if e.Name() != skip {
			names = append(names, filepath.Base(e.Name()))
		}
	}
	return names
}

func mount(source, target, fstype string) {
	_ = os.MkdirAll(target, 0o755)
	if err := syscall.Mount(source, target, fstype, 0, ""); err != nil {
		say("mount %s: %v", target, err)
	}
}

func say(format string, args ...any) {
	fmt.Printf("BOOTENV "+format+"\n", args...)
}
