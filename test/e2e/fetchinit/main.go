// Command fetchinit is the /init of the boot-profile end-to-end test's
// initramfs: the stand-in for an OS like Flatcar that configures itself
// from a URL on its kernel command line. It loads the virtio network
// drivers shipped next to it, gives the first network link the address
// the profile's kernel arguments name (fetchinit.ip=ADDR/PREFIX), fetches
// ignition.config.url=, prints a marker line with the SHA-256 and size of
// what it received, and powers the machine off.
//
// It stays small: no DHCP client (the address comes from the profile's
// templated arguments, which the test also checks), only the standard
// library and netlink.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Marker starts the line the test looks for on the serial console.
const Marker = "ANVIL-E2E-CONFIG"

func main() {
	mounts()
	args := cmdline()
	if err := run(args); err != nil {
		fmt.Printf("\n%s error=%q\n", Marker, err.Error())
	}
	syscall.Sync()
	time.Sleep(200 * time.Millisecond) // let the serial line drain
	_ = syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // PID 1 must not exit
}

func run(args map[string]string) error {
	url, addr := args["ignition.config.url"], args["fetchinit.ip"]
	if url == "" || addr == "" {
		return fmt.Errorf("want ignition.config.url= and fetchinit.ip= on the command line, have %v", args)
	}
	if err := loadModules("/modules"); err != nil {
		return err
	}
	if err := configure(addr); err != nil {
		return err
	}
	var body []byte
	var err error
	for attempt := 0; attempt < 10; attempt++ { // the link may take a moment to pass traffic
		if body, err = fetch(url); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	fmt.Printf("\n%s url=%s sha256=%s bytes=%d\n", Marker, url, hex.EncodeToString(sum[:]), len(body))
	return nil
}

func mounts() {
	for _, m := range []struct{ src, dst, fs string }{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := syscall.Mount(m.src, m.dst, m.fs, 0, ""); err != nil && err != syscall.EBUSY {
			fmt.Printf("fetchinit: mount %s: %v\n", m.dst, err)
		}
	}
}

func cmdline() map[string]string {
	b, _ := os.ReadFile("/proc/cmdline")
	out := map[string]string{}
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

// loadModules loads the modules named, in order, by dir/order.
func loadModules(dir string) error {
	order, err := os.ReadFile(filepath.Join(dir, "order"))
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(string(order)) {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load %s: %w", name, err)
		}
	}
	return nil
}

// configure puts addr on the first link that is not loopback and brings it up.
func configure(addr string) error {
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("fetchinit.ip=%s: %w", addr, err)
	}
	var link netlink.Link
	for deadline := time.Now().Add(10 * time.Second); link == nil; {
		links, _ := netlink.LinkList()
		for _, l := range links {
			if l.Attrs().Name != "lo" {
				link = l
				break
			}
		}
		if link == nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("no network link appeared")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return err
	}
	return netlink.AddrAdd(link, a)
}

func fetch(url string) ([]byte, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return io.ReadAll(resp.Body)
}
