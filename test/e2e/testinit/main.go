// Command testinit is the /init of the end-to-end tests' initramfs: it proves
// that a machine booted the kernel and initramfs its iPXE script named, by
// printing a marker line with the kernel command line to the console, then
// powers the machine off so QEMU (run with -no-reboot) exits.
//
// It is also the /init of the small OS that the install test and `make demo`
// write to a machine's disk (scripts/make-os-image.sh): booted from there,
// its command line carries anvil.installed=1 and the anvil.hostname= that
// the workflow's writefile action put in the disk's syslinux.cfg, and it
// prints InstalledMarker with that hostname. It must stay tiny and
// dependency-free.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// Marker starts the line the tests look for on the serial console.
const Marker = "ANVIL-E2E-BOOTED"

// InstalledMarker starts the line printed when booted from an installed
// disk.
const InstalledMarker = "ANVIL-INSTALLED-OS"

func main() {
	_ = os.MkdirAll("/proc", 0o755)
	if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		fmt.Println("testinit: mount /proc:", err)
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fmt.Println("testinit: read /proc/cmdline:", err)
	}
	fmt.Printf("\n%s cmdline=%s\n", Marker, strings.TrimSpace(string(cmdline)))
	if args := strings.Fields(string(cmdline)); contains(args, "anvil.installed=1") {
		host := "unknown"
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "anvil.hostname="); ok {
				host = v
			}
		}
		fmt.Printf("%s hostname=%s: booted from the disk the workflow wrote\n", InstalledMarker, host)
	}
	syscall.Sync()
	time.Sleep(200 * time.Millisecond) // let the serial line drain
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Println("testinit: power off:", err)
	}
	select {} // PID 1 must not exit
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
