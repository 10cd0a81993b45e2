package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// The ARM64 install: the same workflow as the x86 ones on an ARM64 UEFI
// machine (qemu-system-aarch64's virt board, AAVMF), with everything
// ARM64 built for it: Debian's arm64 kernel (fetch-kernel.sh), anvil-agent
// for GOARCH=arm64 as the boot environment's /init, the embedded
// ipxe-arm64.efi, and an OS image with Debian's arm64 systemd-boot.

// arm64OS is the ARM64 test OS (make-os-image.sh --uefi --arch arm64):
// systemd-boot on a GPT disk's EFI system partition, console ttyAMA0.
// IPv6 network boot is off in AAVMF as in OVMF (uefiOS says why).
var arm64OS = osImage{makeFlags: []string{"--uefi", "--arch", "arm64"}, file: "os-uefi-arm64.raw.zst", uefi: true, arm64: true,
	qemuArgs:   []string{"-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=no"},
	bootConfig: "/loader/entries/anvil.conf", bootConfigText: []string{
		"title Anvil test OS", "linux /vmlinuz", "initrd /initrd",
		"options console=ttyAMA0 anvil.installed=1 anvil.hostname={{ .hardware.metadata.instance.hostname }}",
	}}

// arm64Lab is what the ARM64 install needs, made once per test binary.
var arm64Lab struct {
	once    sync.Once
	err     error
	bootEnv string // vmlinuz-aarch64, initramfs-aarch64
	images  string // os-uefi-arm64.raw.zst
}

// requireARM64Lab is requireLab plus QEMU's aarch64 emulator and AAVMF.
func requireARM64Lab(t *testing.T) {
	t.Helper()
	requireLab(t)
	var missing []string
	if _, err := exec.LookPath("qemu-system-aarch64"); err != nil {
		missing = append(missing, "qemu-system-aarch64 (qemu-system-arm)")
	}
	for _, f := range []string{aavmfCode, aavmfVars} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f+" (qemu-efi-aarch64)")
		}
	}
	if len(missing) > 0 {
		testtool.Need(t, "the ARM64 lab: %s (scripts/install-deps.sh installs them)", strings.Join(missing, ", "))
	}
}

// prepareARM64 builds the ARM64 boot environment and OS image, timing
// each step (the cold and warm costs the CI budget is told).
func prepareARM64(t *testing.T) {
	t.Helper()
	arm64Lab.once.Do(func() { arm64Lab.err = buildARM64(t) })
	if arm64Lab.err != nil {
		t.Fatal(arm64Lab.err)
	}
}

func buildARM64(t *testing.T) error {
	dir := filepath.Join(assets.workDir, "arm64")
	arm64Lab.bootEnv = filepath.Join(dir, "bootenv")
	arm64Lab.images = filepath.Join(dir, "images")
	step := func(what string, start time.Time) { t.Logf("arm64: %s in %.1fs", what, time.Since(start).Seconds()) }

	start := time.Now()
	kdir := filepath.Join(repoRoot, ".cache", "kernel-arm64")
	if out, err := exec.Command(filepath.Join(repoRoot, "scripts", "fetch-kernel.sh"), kdir, "arm64").CombinedOutput(); err != nil {
		return fmt.Errorf("fetch the arm64 kernel: %v\n%s", err, out)
	}
	step("kernel "+kdir, start)

	start = time.Now()
	agent := filepath.Join(dir, "anvil-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", agent, "./cmd/anvil-agent")
	cmd.Dir, cmd.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0", "GOARCH=arm64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build anvil-agent for arm64: %v\n%s", err, out)
	}
	step("anvil-agent for arm64", start)

	// The default module selection, as an ARM64 server gets (548 modules,
	// a 25.5 MiB initramfs with Debian 12's kernel): virtio's alone would
	// be 6 MiB, which saved only ~2 s of the VM's 70 when measured. The
	// build's summary says how long it took.
	out, err := exec.Command(assets.anvil, "bootenv", "build", "--arch", "arm64", "--kernel", filepath.Join(kdir, "vmlinuz"),
		"--modules", filepath.Join(kdir, "modules"), "--anvil", agent, "--busybox", "none",
		"--out", arm64Lab.bootEnv).CombinedOutput()
	if err != nil {
		return fmt.Errorf("anvil bootenv build --arch arm64: %v\n%s", err, out)
	}
	t.Logf("arm64: %s", strings.TrimSpace(string(out)))

	start = time.Now()
	initrd := filepath.Join(dir, "initramfs")
	if err := buildInitramfsFor("arm64", filepath.Join(dir, "initramfs-root"), "./test/e2e/testinit", nil, initrd); err != nil {
		return err
	}
	out, err = exec.Command(filepath.Join(repoRoot, "scripts", "make-os-image.sh"),
		append(append([]string{}, arm64OS.makeFlags...), arm64Lab.images, filepath.Join(kdir, "vmlinuz"), initrd)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("make-os-image.sh --uefi --arch arm64: %v\n%s", err, out)
	}
	step("OS image", start)
	return nil
}

// arm64InstallTimeout bounds the ARM64 install: everything TCG emulates
// instruction by instruction on the shared 2 cores, from AAVMF's start
// to the installed OS's power off.
const arm64InstallTimeout = 20 * time.Minute

// TestInstallARM64: a blank ARM64 UEFI machine is installed end to end
// and boots the installed OS from its disk. AAVMF's PXE client sends DHCP
// architecture 11 and gets ipxe-arm64.efi over TFTP; iPXE's script is the
// aarch64 boot environment (the Hardware's dhcp.arch), whose arm64 agent
// writes the disk; after the reboot iPXE gets the local-disk script,
// whose `exit` hands the machine back to AAVMF, which boots the disk's
// systemd-boot and the installed OS (as TestInstallUEFI does on x86).
func TestInstallARM64(t *testing.T) {
	requireARM64Lab(t)
	prepareARM64(t)
	ns := newNetns(t, "arm64")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP, "--bootenv-dir", arm64Lab.bootEnv, "--images-dir", arm64Lab.images)
	name, mac, ip := "node-arm64", "52:54:00:77:02:40", "10.77.0.240"
	a.apply(t, installSpec{os: arm64OS, name: name, mac: mac, ip: ip, server: serverIP, keepNetboot: true, arch: "aarch64",
		imageURL: "http://" + serverIP + ":7080/images/" + arm64OS.file}.yaml())

	run := runWorkflowOS(t, ns, a, name+"-install", arm64OS, vm{name: name, mac: mac, tap: "tap0"}, arm64InstallTimeout, nil)
	t.Logf("ARM64 install: QEMU start → agent %.1fs, → workflow SUCCESS %.1fs, → installed OS %.1fs",
		run.res.seen[markerAgent].Seconds(), run.success.Seconds(), run.res.seen[markerInstalled].Seconds())
	if _, ok := run.res.seen[markerInstalled]; !ok {
		t.Logf("serial console:\n%s", tail(run.res.serial, 120))
	}
	assertInstalledOS(t, a, run, name, mac, ip)

	// The console: the arm64 boot environment's agent, then iPXE's
	// local-disk script, then the installed OS.
	agent := strings.Index(run.res.serial, markerAgent)
	local := strings.LastIndex(run.res.serial, markerLocalDisk)
	installed := strings.Index(run.res.serial, markerInstalled)
	if agent < 0 || local < agent || installed < local {
		t.Errorf("console order: agent at %d, local-disk script at %d, installed OS at %d; want them in that order", agent, local, installed)
	}
	record := a.cli(t, "logs", "hardware/"+name)
	t.Logf("the machine's record:\n%s", record) // docs/arm64.md shows it
	// The first boot: AAVMF's PXE client (architecture 11) gets
	// ipxe-arm64.efi over TFTP.
	assertRecord(t, record, "dhcp", "(uefi-arm64, PXEClient)", "boot file ipxe-arm64.efi via TFTP")
	assertRecord(t, record, "tftp", "RRQ ipxe-arm64.efi", "sent")
	// After the install, the local-disk script's `exit` returns to AAVMF,
	// whose next boot option is UEFI HTTP boot over IPv4 (architecture
	// 19, HTTPClient): it gets ipxe-arm64.efi's URL and loads it, whose
	// script exits again, and AAVMF goes on to the disk.
	assertRecord(t, record, "dhcp", "(http-uefi-arm64, HTTPClient)", "boot file http://"+serverIP+":7080/ipxe/binary/ipxe-arm64.efi")
	assertRecord(t, record, "http", "GET /ipxe/binary/ipxe-arm64.efi", "200")
	assertRecord(t, record, "http", "vmlinuz-aarch64", "200")
	assertRecord(t, record, "http", "initramfs-aarch64", "200")
	assertRecord(t, record, "http", arm64OS.file, "200")
}
