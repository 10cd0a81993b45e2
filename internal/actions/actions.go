// Package actions runs Tinkerbell's actions natively, without a container
// runtime: image2disk, archive2disk, writefile, cexec, kexec (with
// upstream's grub.cfg detection), reboot, poweroff and waitdaemon (its
// IMAGE natively or in a container), and Anvil's commissioning checks
// (commission-smart, commission-disk-read, commission-memory,
// commission-nic-link, whose results travel in Result.Checks), selected by Tinkerbell's image name
// (quay.io/tinkerbell/actions/image2disk:v1.0.0) or by a short name
// ("image2disk"), configured by the same environment variables.
//
// It owns what an action does to the machine: disks, filesystems, chroots,
// power. It must not talk to the server: the agent reports for it, through
// Output, and decides when a Result's Then may run. Everything it does to
// the system goes through Config's functions, so the actions are tested
// against regular files and directories; the defaults are Linux system
// calls (mount(2), umount2(2), reboot(2), kexec_file_load(2), the BLKRRPART
// ioctl). User documentation: docs/actions.md.
package actions

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/container"
	"github.com/anvilproj/anvil/internal/oci"
)

// Spec is one action as the server hands it to the agent.
type Spec struct {
	Name    string
	Image   string
	Command []string
	Env     map[string]string
	Volumes []string
	// Pid is Tinkerbell's `pid`: "host" runs a container in the
	// machine's PID namespace.
	Pid string
	// Runtime is the action's `runtime` (Anvil's field): RuntimeAuto,
	// RuntimeContainer or RuntimeNative. Select reads it.
	Runtime string
	// Images says how to pull each image the action names (its Image;
	// waitdaemon's IMAGE), by the reference as written, as the server
	// resolved them from its registry settings and the Hardware's. An
	// image missing here is pulled from its own registry, anonymously.
	Images map[string]ImageSource
	// Timeout bounds the run; 0 means none. The caller enforces it via ctx.
	Timeout time.Duration
}

// Progress is how far a long action (image2disk, archive2disk) has come.
type Progress struct {
	// Bytes is how much of the source has been fetched: for image2disk
	// the bytes of IMG_URL as served (compressed when it is compressed).
	Bytes int64
	// TotalBytes is the source's size as the server announced it
	// (Content-Length, so compressed when the image is); 0 when unknown.
	TotalBytes int64
	// BytesPerSec is the fetch rate over the last interval.
	BytesPerSec float64
	// Written is how much has been written to the destination so far,
	// after decompression.
	Written int64
}

// Output receives what an action does while it runs. Implementations must
// be safe for concurrent use (a command's stdout and stderr are read by two
// goroutines).
type Output interface {
	// Line is one line of output; stream is "stdout", "stderr" or "action"
	// (a line the action itself writes about what it does).
	Line(stream, line string)
	// Progress is called every few seconds by actions that move bytes,
	// and once more when they have moved the last byte. It is never
	// called after the Runner has returned, but from a Result's Then
	// (waitdaemon runs its IMAGE there).
	Progress(p Progress)
}

// Output streams.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamAction = "action"
)

// Result is what a successful action leaves to do. Then, when not nil,
// takes the machine down (reboot, poweroff, kexec): the agent calls it only
// after the server has acknowledged the action's SUCCESS, so that a finished
// install is never left RUNNING. Then does not return when it succeeds.
type Result struct {
	Then func() error
	// Checks are the results of a commissioning action's checks
	// (commission.go), also when it fails: the agent sends them with the
	// action's end report.
	Checks []Check
}

// Runner runs one action. It never takes the machine down itself: what
// must happen after the action is reported is in the Result.
type Runner func(ctx context.Context, s Spec, out Output) (Result, error)

// ErrUnknownImage is wrapped by Lookup's error for an image that has no
// native implementation.
var ErrUnknownImage = errors.New("no native action for image")

// Defaults for Config's zero values.
const (
	// DefaultDeviceWait is how long an action that mounts a partition
	// waits for its device node to appear: the kernel creates partition
	// nodes shortly after image2disk re-reads the partition table.
	DefaultDeviceWait = 10 * time.Second
	// DefaultStallTimeout is how long a download may go without a byte
	// before it counts as lost.
	DefaultStallTimeout = 60 * time.Second
	// DefaultWriteBuffer is the size of image2disk's writes.
	DefaultWriteBuffer = 4 << 20
	// DefaultHeaderTimeout bounds the wait for an HTTP response's headers.
	DefaultHeaderTimeout = 60 * time.Second
)

// Config is what the actions use of the system. Every field is optional;
// the zero value runs on the real machine (Linux).
type Config struct {
	// HTTPClient fetches images and archives. If nil, a client with
	// connect and response-header timeouts and no overall timeout (the
	// action's context bounds it) that asks for identity encoding.
	HTTPClient *http.Client
	// Mount is mount(2). If nil, unix.Mount.
	Mount func(source, target, fstype string, flags uintptr, data string) error
	// Unmount is umount2(2). If nil, unix.Unmount.
	Unmount func(target string, flags int) error
	// Power is reboot(2) with a LINUX_REBOOT_CMD_* command; it is only
	// ever called from a Result's Then. If nil, unix.Reboot.
	Power func(cmd int) error
	// KexecLoad is kexec_file_load(2): it loads the kernel (and initrd;
	// -1 for none) that a later Power(LINUX_REBOOT_CMD_KEXEC) starts. If
	// nil, unix.KexecFileLoad.
	KexecLoad func(kernelFd, initrdFd int, cmdline string, flags int) error
	// RereadPartitions asks the kernel to re-read a block device's
	// partition table; image2disk calls it only for block devices. If
	// nil, the BLKRRPART ioctl (retried briefly while the device is busy).
	RereadPartitions func(disk *os.File) error
	// Sync flushes every filesystem; Then calls it before Power. If nil,
	// unix.Sync.
	Sync func()
	// Clock is the source of time: progress intervals, transfer rates
	// and the back-off between fetch retries. If nil, clock.Real.
	Clock clock.Clock
	// TempDir is where mount points are made. If "", os.TempDir().
	TempDir string
	// DeviceWait is how long to wait for a partition's device node to
	// appear. If 0, DefaultDeviceWait; negative: do not wait.
	DeviceWait time.Duration
	// StallTimeout ends a download that has received nothing for this
	// long (retried when RETRY_ENABLED). If 0, DefaultStallTimeout.
	StallTimeout time.Duration
	// WriteBuffer is the size of each write to the destination disk. If
	// 0, DefaultWriteBuffer (4 MiB).
	WriteBuffer int
	// Images pulls the images of actions that run in a container, and
	// Containers runs them. If either is nil, there is no container path:
	// an image without a native implementation fails.
	Images     *oci.Puller
	Containers *container.Runtime
	// SysRoot is where the commissioning actions find the machine's
	// /sys, /proc and /dev. If "", "/".
	SysRoot string
	// NVMeLog reads an NVMe log page of the device open as f into buf
	// (the NVME_IOCTL_ADMIN_CMD ioctl, Get Log Page); an error wrapping
	// errNotSupported means the device has no such command. If nil, the
	// ioctl.
	NVMeLog func(f *os.File, id uint8, buf []byte) error
	// SGIO sends a non-data SCSI command to the device open as f (the
	// SG_IO ioctl) and returns how many bytes of sense it wrote. If nil,
	// the ioctl.
	SGIO func(f *os.File, cdb, sense []byte) (int, error)
	// OpenDisk opens a disk for commission-disk-read with flags
	// (O_RDONLY, O_DIRECT). If nil, os.OpenFile.
	OpenDisk func(path string, flags int) (DiskReader, error)
}

// Catalog is the set of native actions, configured once. It is safe for
// concurrent use.
type Catalog struct {
	cfg     Config
	runners map[string]Runner
}

// Short names of the native actions: the last element of a Tinkerbell
// action image's name, without tag or digest.
const (
	NameImage2Disk   = "image2disk"
	NameArchive2Disk = "archive2disk"
	NameWriteFile    = "writefile"
	NameCexec        = "cexec"
	NameKexec        = "kexec"
	NameReboot       = "reboot"
	NamePowerOff     = "poweroff"
	// NameWaitDaemon is ghcr.io/jacobweinstock/waitdaemon, which
	// Tinkerbell templates end with: it runs its IMAGE (kexec, say), or
	// reboots or powers off, once the action is reported (waitdaemon.go).
	NameWaitDaemon = "waitdaemon"
)

// New returns a Catalog whose actions use cfg, with its zero fields set
// to their defaults.
func New(cfg Config) *Catalog {
	setSystemDefaults(&cfg)
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultHTTPClient()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.DeviceWait == 0 {
		cfg.DeviceWait = DefaultDeviceWait
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.WriteBuffer <= 0 {
		cfg.WriteBuffer = DefaultWriteBuffer
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/"
	}
	if cfg.NVMeLog == nil {
		cfg.NVMeLog = nvmeLog
	}
	if cfg.SGIO == nil {
		cfg.SGIO = sgIO
	}
	if cfg.OpenDisk == nil {
		cfg.OpenDisk = openDisk
	}
	c := &Catalog{cfg: cfg}
	c.runners = map[string]Runner{
		NameImage2Disk:   c.image2disk,
		NameArchive2Disk: c.archive2disk,
		NameWriteFile:    c.writefile,
		NameCexec:        c.cexec,
		NameKexec:        c.kexec,
		NameReboot:       c.power(NameReboot),
		NamePowerOff:     c.power(NamePowerOff),
		NameWaitDaemon:   c.waitdaemon,

		NameCommissionSmart:    c.smart,
		NameCommissionDiskRead: c.diskRead,
		NameCommissionMemory:   c.memory,
		NameCommissionNICLink:  c.nicLink,
	}
	return c
}

// defaultHTTPClient is Config.HTTPClient's default.
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = DefaultHeaderTimeout
	t.ReadBufferSize = 256 << 10
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

// Lookup returns the native Runner for an action image: a Tinkerbell
// image name of any registry, repository and tag
// (quay.io/tinkerbell/actions/cexec:v1.0.0,
// ghcr.io/jacobweinstock/waitdaemon:latest) or a short name ("cexec"). An
// image with no native action is an error wrapping ErrUnknownImage. Select
// is what decides how an action runs (natively or in a container).
func (c *Catalog) Lookup(image string) (Runner, error) {
	if r, ok := c.runners[actionName(image)]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("%w %q (native actions: %s)", ErrUnknownImage, image, strings.Join(c.Names(), ", "))
}

// Names lists the short names Lookup knows, sorted.
func (c *Catalog) Names() []string {
	names := make([]string, 0, len(c.runners))
	for n := range c.runners {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// actionName is the short name of an image reference: its last path
// element, without a digest (@sha256:…) or tag (:v1), in lower case.
// "quay.io/tinkerbell/actions/image2disk:v1.0.0" → "image2disk".
func actionName(image string) string {
	ref := strings.TrimSpace(image)
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		ref = ref[i+1:]
	}
	if i := strings.IndexByte(ref, ':'); i >= 0 {
		ref = ref[:i]
	}
	return strings.ToLower(ref)
}

// linef writes one action line.
func linef(out Output, format string, args ...any) {
	out.Line(StreamAction, fmt.Sprintf(format, args...))
}
