package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/actions"
	"github.com/anvilproj/anvil/internal/agentcmdline"
	"github.com/anvilproj/anvil/internal/clientheader"
	"github.com/anvilproj/anvil/internal/hwinfo"
	"github.com/anvilproj/anvil/internal/kmod"
)

// BootConfig configures Boot.
type BootConfig struct {
	// Cmdline is the kernel command line. If "", /proc/cmdline is read.
	Cmdline string
	// Actions runs the actions. If nil, Boot makes the real ones
	// (NewCatalog): native actions and the container path, its image
	// cache sized by anvil.image_cache=.
	Actions ActionSet
	// Drivers loads the drivers of the machine's devices from
	// /lib/modules (coldplug), and each action's filesystem before it runs.
	Drivers bool
	// Network, when false, leaves the network as it is (an agent started on
	// a running OS); when true, Boot brings up every link with DHCP.
	Network bool
	// Console is where the operator's lines go. If nil, os.Stdout.
	Console *os.File
}

// networkSettle is the pause between the network drivers' coldplug rounds:
// a bus driver's devices (virtio, PCI) appear before its module load
// returns; a USB NIC that enumerates later is found by the full coldplug,
// and the network setup retries until a link shows up.
const networkSettle = 20 * time.Millisecond

// envFSType is the action environment variable naming the filesystem an
// action mounts (writefile, cexec, kexec, archive2disk).
const envFSType = "FS_TYPE"

// shellPath is the debug shell the boot environment carries (busybox).
const shellPath = "/bin/sh"

// Boot is the agent of the boot environment: it reads the kernel command
// line, loads drivers, brings up the network, and runs actions until ctx
// ends. A broken command line or a workflow that fails starts a console
// shell when the command line has anvil.shell=1 (and the boot environment
// has a shell); the agent keeps asking for work meanwhile, so a reprovision
// needs no reboot.
func Boot(ctx context.Context, cfg BootConfig) error {
	out := cfg.Console
	if out == nil {
		out = os.Stdout
	}
	con := newConsole(out)
	con.stamp = uptimeStamp
	started := time.Now()
	cmdline := cfg.Cmdline
	if cmdline == "" {
		b, err := os.ReadFile("/proc/cmdline")
		if err != nil {
			return fmt.Errorf("read the kernel command line: %w", err)
		}
		cmdline = string(b)
	}
	params, err := ParseCmdline(cmdline)
	if err != nil {
		con.printf("anvil agent: %v", err)
		if strings.Contains(cmdline, agentcmdline.ArgShell) {
			runShell(con, "the kernel command line is not usable")
		}
		return err
	}
	// Drivers: the network's first, then the rest (disk controllers are
	// slow to probe) while DHCP runs; the first action waits for them.
	var drv *drivers
	allDrivers := make(chan struct{})
	if cfg.Drivers {
		if err := InstallModprobe(); err != nil {
			con.printf("anvil agent: the kernel's module helper: %v (filesystems built as modules will not mount)", err)
		}
		con.printf("anvil agent: loading drivers")
		if drv, err = openDrivers(); err != nil {
			con.printf("anvil agent: drivers: %v", err)
			close(allDrivers)
		} else {
			con.printf("anvil agent: %s", drv.coldplug(ctx, "network drivers",
				kmod.ColdplugOptions{Keep: kmod.IsNetworkDevice, Until: haveNetworkInterface, Settle: networkSettle}, con.printf))
			go func() {
				defer close(allDrivers)
				con.printf("anvil agent: %s", drv.coldplug(ctx, "drivers", kmod.ColdplugOptions{}, con.printf))
			}()
		}
	} else {
		close(allDrivers)
	}
	var boot []string // lines for the server, once it is reachable
	if cfg.Network {
		leases, err := setupNetwork(ctx, params, con.printf)
		if err != nil {
			return err
		}
		boot = append(boot, leases...)
	}
	con.printf("anvil agent: up in %s; server %s, worker %s", time.Since(started).Round(time.Millisecond),
		strings.Join(params.ServerURLs, ", "), params.WorkerID)

	workerID := params.WorkerID
	if workerID == "" {
		workerID = firstMAC()
		con.printf("anvil agent: no worker_id= on the command line; using this machine's first MAC %s", workerID)
	}
	if cfg.Actions == nil {
		cat, note := NewCatalog(CatalogConfig{ImageCacheSize: params.ImageCacheSize})
		boot = append(boot, note)
		con.printf("anvil agent: %s", note)
		cfg.Actions = cat
	}
	if params.Discovery {
		// The inventory is the Hardware: it must list the disks, whose
		// drivers the background coldplug may still be loading.
		select {
		case <-allDrivers:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	attrs := attributes(drv, con.printf)
	if params.Discovery {
		// No Hardware yet: report the inventory and wait for work, whose
		// token the answer carries; then on as a netbooted agent.
		token, err := Discover(ctx, DiscoverConfig{Servers: bootServers(params), AgentID: workerID, Attributes: attrs,
			Console: out, ConsoleStamp: uptimeStamp})
		if err != nil {
			return err
		}
		params.Token = token
	}
	var shellOnce sync.Once
	a, err := New(Config{
		Servers:      bootServers(params),
		AgentID:      workerID,
		Actions:      cfg.Actions,
		Attributes:   attrs,
		Console:      out,
		Verbose:      params.Debug,
		ConsoleStamp: uptimeStamp,
		BeforeAction: func(ctx context.Context, s actions.Spec) {
			if actions.ScansDevices(s) {
				// A check of every disk or NIC: all of them first.
				select {
				case <-allDrivers:
				case <-ctx.Done():
				}
			}
			waitForDevice(ctx, actionDevice(s), allDrivers)
			if drv != nil {
				drv.prepareFS(s.Env[envFSType], con.printf)
			}
		},
		OnWorkflowEnd: func(id, state, msg string) {
			switch state {
			case stateSuccess:
				return
			case stateCancelled:
				con.printf("anvil agent: workflow %s was cancelled; waiting for new work", id)
				return
			}
			con.printf("anvil agent: workflow %s ended %s: %s", id, state, msg)
			con.printf("anvil agent: the machine stays up for inspection; `anvil logs workflow/%s` shows every line", strings.TrimPrefix(id, "default/"))
			if params.Shell {
				shellOnce.Do(func() { go runShell(con, "workflow "+id+" ended "+state) })
			}
		},
	})
	if err != nil {
		return err
	}
	for _, l := range boot {
		a.record("anvil agent: " + l) // already on the console
	}
	_, err = a.Run(ctx)
	return err
}

// bootServers are the AgentService clients for the boot parameters, one per
// address, in the order the agent tries them: Connect over HTTP/1.1 to each
// URL of anvil.server=, or gRPC (h2c, or TLS) to grpc_authority=. They
// share one transport, so each keeps its idle connections to its own
// replica.
func bootServers(p BootParams) []Server {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: p.InsecureTLS}, //nolint:gosec // the operator asked for it (tinkerbell_insecure_tls=true)
	}
	opts := []connect.ClientOption{clientheader.AgentToken(p.Token)}
	if p.GRPC {
		var protos http.Protocols
		protos.SetUnencryptedHTTP2(strings.HasPrefix(p.ServerURLs[0], "http://"))
		protos.SetHTTP2(true)
		tr.Protocols = &protos
		opts = append(opts, connect.WithGRPC())
	}
	hc := &http.Client{Transport: tr}
	out := make([]Server, len(p.ServerURLs))
	for i, u := range p.ServerURLs {
		out[i] = Server{URL: u, Client: anvilv1connect.NewAgentServiceClient(hc, u, opts...)}
	}
	return out
}

// attributes describes this machine to the server: a summary, and its
// inventory (internal/hwinfo), which the server keeps as the Hardware's
// status.attributes. Read once per boot: the agent sends the same with
// each GetAction, and the server writes only a change. drv, when the
// agent loads drivers (the boot environment), loads efivarfs for
// secureBoot.
func attributes(drv *drivers, logf func(format string, args ...any)) *v1.AgentAttributes {
	a := &v1.AgentAttributes{Cpu: fmt.Sprintf("%d x %s", runtime.NumCPU(), runtime.GOARCH)}
	if inv, err := hwinfo.Collect("/"); err == nil {
		if inv.Anvil.Firmware == "uefi" && inv.Anvil.SecureBoot == "" {
			inv.Anvil.SecureBoot = secureBoot(drv, logf)
		}
		a.Inventory, _ = json.Marshal(inv) // plain structs: cannot fail
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		a.Memory = formatBytes(int64(si.Totalram) * int64(si.Unit))
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if len(i.HardwareAddr) == 6 && i.Flags&net.FlagLoopback == 0 {
			a.Macs = append(a.Macs, i.HardwareAddr.String())
		}
	}
	return a
}

// secureBoot reads the SecureBoot EFI variable through a private,
// read-only efivarfs mount, then unmounts it: the boot environment's init
// mounts no efivarfs (an action that writes boot entries mounts its own,
// read-write), and this leaves the machine as it found it. "" when the
// variable cannot be read.
func secureBoot(drv *drivers, logf func(format string, args ...any)) string {
	if drv != nil {
		drv.prepareFS("efivarfs", logf) // a module in Debian's kernel
	}
	dir, err := os.MkdirTemp("", "anvil-efivars-")
	if err != nil {
		return ""
	}
	defer os.Remove(dir)
	if err := unix.Mount("efivarfs", dir, "efivarfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		logf("anvil agent: efivarfs: %v (the inventory does not say whether Secure Boot is on)", err)
		return ""
	}
	defer func() { _ = unix.Unmount(dir, 0) }()
	b, err := os.ReadFile(filepath.Join(dir, hwinfo.SecureBootVar))
	if err != nil {
		return ""
	}
	return hwinfo.SecureBootState(b)
}

// firstMAC is the MAC of the first non-loopback interface, or "".
func firstMAC() string {
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if len(i.HardwareAddr) == 6 && i.Flags&net.FlagLoopback == 0 {
			return i.HardwareAddr.String()
		}
	}
	return ""
}

// runShell runs the boot environment's shell on the console until it
// exits, if there is one.
func runShell(con *console, why string) {
	if _, err := os.Stat(shellPath); err != nil {
		con.printf("anvil agent: %s; no shell in this boot environment (%s)", why, shellPath)
		return
	}
	con.printf("anvil agent: %s; starting a shell on the console (anvil.shell=1). Exit it to leave it.", why)
	cmd := exec.Command(shellPath)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "PS1=anvil# ")
	if err := cmd.Run(); err != nil {
		con.printf("anvil agent: shell: %v", err)
	}
}

// Action environment variables that name the block device an action
// works on.
var deviceEnv = []string{"DEST_DISK", "BLOCK_DEVICE"}

// actionDevice is the block device an action works on, or "".
func actionDevice(s actions.Spec) string {
	for _, k := range deviceEnv {
		if v := s.Env[k]; strings.HasPrefix(v, "/dev/") {
			return v
		}
	}
	return ""
}

// waitForDevice returns when dev exists, or when every driver is loaded
// (then the action itself says if the device is missing), or ctx ends. An
// action on /dev/vda need not wait for the CD-ROM's driver to finish
// probing, and one that names no device (reboot) waits for nothing.
func waitForDevice(ctx context.Context, dev string, allDrivers <-chan struct{}) {
	if dev == "" {
		return
	}
	for {
		if _, err := os.Stat(dev); err == nil {
			return
		}
		select {
		case <-allDrivers:
			return
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// uptimeStamp is the time since boot as the kernel prints it in its log
// ("[    3.412345] "), so that the agent's console lines and the kernel's
// read as one timeline.
func uptimeStamp() string {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return ""
	}
	return fmt.Sprintf("[%5d.%06d] ", ts.Sec, ts.Nsec/1000)
}
