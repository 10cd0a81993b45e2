// Command testinit is the /init of the end-to-end tests' initramfs: it proves
// that a machine booted the kernel and initramfs its iPXE script named, by
// printing a marker line with the kernel command line to the console, then
// powers the machine off so QEMU (run with -no-reboot) exits.
//
// It is a stand-in for the real boot environment (anvil agent as /init),
// which later tests use; it must stay tiny and dependency-free.
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
	syscall.Sync()
	time.Sleep(200 * time.Millisecond) // let the serial line drain
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Println("testinit: power off:", err)
	}
	select {} // PID 1 must not exit
}
