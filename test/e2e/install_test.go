package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The install tests provision for real: a QEMU machine with a blank disk
// PXE boots into the boot environment that `anvil bootenv build` made from
// Debian's kernel (anvil-agent as /init), the agent runs a workflow of
// native actions that streams a zstd disk image to /dev/vda, writes the
// machine's hostname into its boot config, fetches its own metadata into
// the installed OS and reboots; the next PXE boot is sent to the disk,
// which boots the installed OS (scripts/make-os-image.sh), whose init
// prints ANVIL-INSTALLED-OS with the hostname.

// Markers on the serial console, timed from QEMU's start.
const (
	markerAgent     = "anvil agent:"       // the boot environment's agent is running
	markerInstalled = "ANVIL-INSTALLED-OS" // the installed OS booted (testinit)
)

// installLab is what an install test needs: the built boot environment and
// the OS image, made once per test binary.
var installLab struct {
	once    sync.Once
	err     error
	bootEnv string // directory with vmlinuz-x86_64, initramfs-x86_64
	images  string // directory with os.raw.zst
}

// prepareInstall builds the boot environment and the OS image.
func prepareInstall(t *testing.T) {
	t.Helper()
	installLab.once.Do(func() {
		dir := filepath.Join(assets.workDir, "install")
		installLab.bootEnv = filepath.Join(dir, "bootenv")
		installLab.images = filepath.Join(dir, "images")
		kdir := filepath.Join(repoRoot, ".cache", "kernel")
		start := time.Now()
		out, err := exec.Command(assets.anvil, "bootenv", "build", "--kernel", filepath.Join(kdir, "vmlinuz"),
			"--modules", filepath.Join(kdir, "modules"), "--out", installLab.bootEnv).CombinedOutput()
		if err != nil {
			installLab.err = fmt.Errorf("anvil bootenv build: %v\n%s", err, out)
			return
		}
		t.Logf("boot environment built in %.1fs: %s", time.Since(start).Seconds(), strings.TrimSpace(string(out)))
		// The machines boot what make build's machines boot: anvil-agent,
		// not the whole anvil.
		if agent := filepath.Join(filepath.Dir(assets.anvil), "anvil-agent"); !strings.Contains(string(out), "/init "+agent+" (") {
			installLab.err = fmt.Errorf("anvil bootenv build did not take %s as /init:\n%s", agent, out)
			return
		}
		for _, img := range []osImage{biosOS, uefiOS} {
			args := append(append([]string{}, img.makeFlags...), installLab.images, assets.kernel, assets.initrd)
			out, err = exec.Command(filepath.Join(repoRoot, "scripts", "make-os-image.sh"), args...).CombinedOutput()
			if err != nil {
				installLab.err = fmt.Errorf("make-os-image.sh %s: %v\n%s", strings.Join(img.makeFlags, " "), err, out)
				return
			}
		}
	})
	if installLab.err != nil {
		t.Fatal(installLab.err)
	}
}

// osImage is one firmware's variant of the test OS (make-os-image.sh).
type osImage struct {
	makeFlags []string // make-os-image.sh's flags for it
	file      string   // what it writes to installLab.images for image2disk
	uefi      bool     // boots on OVMF (else SeaBIOS)
	arm64     bool     // an ARM64 OS: boots on AAVMF (QEMU's virt board)
	qemuArgs  []string // the firmware settings its machines boot with
	// bootConfig is the boot loader's config on the disk's first (FAT)
	// partition, and bootConfigText what the workflow's writefile action
	// puts there: the Template's lines, naming the machine.
	bootConfig     string
	bootConfigText []string
}

var (
	// biosOS: SYSLINUX on an MBR disk.
	biosOS = osImage{file: "os.raw.zst", bootConfig: "/syslinux.cfg", bootConfigText: []string{
		"SERIAL 0 115200", "DEFAULT installed", "PROMPT 0", "TIMEOUT 0", "LABEL installed", "  KERNEL /vmlinuz",
		"  APPEND initrd=/initrd console=ttyS0 anvil.installed=1 anvil.hostname={{ .hardware.metadata.instance.hostname }}",
	}}
	// uefiOS: systemd-boot on a GPT disk's EFI system partition.
	// Its machines have IPv6 network boot switched off in the firmware:
	// after the install, netboot is refused, and OVMF tries each of the
	// NIC's boot options (PXEv4, PXEv6, HTTPv4, HTTPv6) in turn before
	// the disk; each IPv6 one waits about two minutes for a DHCPv6 server
	// the lab does not have.
	uefiOS = osImage{makeFlags: []string{"--uefi"}, file: "os-uefi.raw.zst", uefi: true,
		qemuArgs:   []string{"-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=no"},
		bootConfig: "/loader/entries/anvil.conf", bootConfigText: []string{
			"title Anvil test OS", "linux /vmlinuz", "initrd /initrd",
			"options console=ttyS0 anvil.installed=1 anvil.hostname={{ .hardware.metadata.instance.hostname }}",
		}}
)

// installYAML is a Hardware with a blank disk and a workflow that installs
// the BIOS test OS from imageURL onto it. The metadata URL is the server's
// Hegel-compatible port.
func installYAML(name, mac, ip, server, imageURL string) string {
	return installSpec{os: biosOS, name: name, mac: mac, ip: ip, server: server, imageURL: imageURL}.yaml()
}

// installSpec is what an install manifest varies in.
type installSpec struct {
	os                              osImage
	name, mac, ip, server, imageURL string
	vlanID                          int // the interface's dhcp.vlan_id, if not 0
	// keepNetboot leaves netboot on after the install (no
	// toggleAllowNetboot): the next boot gets iPXE's local-disk script.
	keepNetboot bool
	// bmc, if set, is the Machine the Hardware's spec.bmcRef names.
	bmc string
	// noWorkflow leaves the Workflow out (reprovision creates it).
	noWorkflow bool
	// sshKey, if set, is the Hardware's one spec.metadata.instance.ssh_keys
	// entry (an authorized_keys line).
	sshKey string
	// arch is the interface's dhcp.arch; "" is x86_64.
	arch string
}

// yaml is the Hardware, Template and Workflow of the install.
func (in installSpec) yaml() string {
	vlan := ""
	if in.vlanID != 0 {
		vlan = fmt.Sprintf("\n        vlan_id: \"%d\"", in.vlanID)
	}
	toggle := "\n  bootOptions:\n    toggleAllowNetboot: true"
	if in.keepNetboot {
		toggle = ""
	}
	bmcRef := ""
	if in.bmc != "" {
		bmcRef = "\n  bmcRef:\n    apiGroup: bmc.tinkerbell.org\n    kind: Machine\n    name: " + in.bmc
	}
	sshKeys := ""
	if in.sshKey != "" {
		sshKeys = "\n      ssh_keys:\n        - " + strconv.Quote(strings.TrimSpace(in.sshKey))
	}
	arch := in.arch
	if arch == "" {
		arch = "x86_64"
	}
	out := fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: %[1]s
spec:%[10]s
  disks:
    - device: /dev/vda
  metadata:
    instance:
      id: %[2]s
      hostname: %[1]s%[11]s
  interfaces:
    - dhcp:
        mac: %[2]s
        hostname: %[1]s
        arch: %[12]s
        lease_time: 600
        ip: {address: %[3]s, netmask: 255.255.255.0, gateway: %[4]s}
        name_servers: [%[4]s]%[8]s
      netboot:
        allowPXE: true
        allowWorkflow: true
---
apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata:
  name: %[1]s-install
spec:
  data: |
    version: "0.1"
    name: install
    global_timeout: 600
    tasks:
      - name: os-installation
        worker: "{{.device_1}}"
        volumes: [/dev:/dev]
        actions:
          - name: stream-image
            image: quay.io/tinkerbell/actions/image2disk:v1.0.0
            timeout: 300
            environment:
              IMG_URL: %[5]s
              DEST_DISK: {{ index .Hardware.Disks 0 }}
              COMPRESSED: true
          - name: hostname
            image: quay.io/tinkerbell/actions/writefile:v1.0.0
            timeout: 60
            environment:
              DEST_DISK: {{ formatPartition (index .Hardware.Disks 0) 1 }}
              FS_TYPE: vfat
              DEST_PATH: %[6]s
              MODE: "0755"
              CONTENTS: |
%[7]s
          - name: metadata
            image: quay.io/tinkerbell/actions/cexec:v1.0.0
            timeout: 60
            environment:
              BLOCK_DEVICE: {{ formatPartition (index .Hardware.Disks 0) 1 }}
              FS_TYPE: vfat
              CHROOT: y
              DEFAULT_INTERPRETER: "/busybox sh -c"
              CMD_LINE: "/busybox wget -q -O /metadata.json http://%[4]s:50061/metadata && /busybox cat /metadata.json"
          - name: reboot
            image: reboot
            timeout: 30
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata:
  name: %[1]s-install
spec:
  templateRef: %[1]s-install
  hardwareRef: %[1]s
  hardwareMap:
    device_1: %[2]s%[9]s
`, in.name, in.mac, in.ip, in.server, in.imageURL, in.os.bootConfig,
		"                "+strings.Join(in.os.bootConfigText, "\n                "), vlan, toggle, bmcRef, sshKeys, arch)
	if in.noWorkflow {
		out, _, _ = strings.Cut(out, "---\napiVersion: tinkerbell.org/v1alpha1\nkind: Workflow\n")
	}
	return out
}

// installRun is one install: the VM's result and when the workflow ended.
type installRun struct {
	res     vmResult
	success time.Duration // from QEMU start to the workflow's SUCCESS as polled (0: not seen)
	disk    string
	os      osImage
	// workflow is the install's workflow; "" is the machine's name with
	// "-install".
	workflow string
}

// workflowOf is the name of run's workflow on the machine name.
func (run installRun) workflowOf(name string) string {
	if run.workflow != "" {
		return run.workflow
	}
	return name + "-install"
}

// runInstall boots a blank BIOS VM until its installed OS powers it off,
// while polling the workflow; during is called once the workflow is
// RUNNING.
func runInstall(t *testing.T, ns *netns, a *anvil, name, mac string, during func()) installRun {
	t.Helper()
	return runInstallOS(t, ns, a, biosOS, vm{name: name, mac: mac, tap: "tap0"}, during)
}

// runInstallOS is runInstall of img on the machine m (name, mac, and how
// it is cabled), with the firmware img is for.
func runInstallOS(t *testing.T, ns *netns, a *anvil, img osImage, m vm, during func()) installRun {
	t.Helper()
	return runWorkflowOS(t, ns, a, m.name+"-install", img, m, installTimeout, during)
}

// runWorkflowOS is runInstallOS of the workflow named workflow, bounded by
// timeout.
func runWorkflowOS(t *testing.T, ns *netns, a *anvil, workflow string, img osImage, m vm, timeout time.Duration, during func()) installRun {
	t.Helper()
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	var success atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	qemuStart := make(chan time.Time, 1)
	polled := make(chan struct{})
	failed := make(chan struct{}) // the workflow ended badly: stop the VM
	go func() {
		defer close(polled)
		start := <-qemuStart
		calledDuring := false
		for ctx.Err() == nil {
			state := workflowState(a, workflow)
			if state == "RUNNING" && !calledDuring && during != nil {
				calledDuring = true
				during()
			}
			if state == "SUCCESS" {
				success.Store(int64(time.Since(start)))
				return
			}
			if state == "FAILED" || state == "TIMEOUT" {
				time.Sleep(2 * time.Second) // let the console show why
				close(failed)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	m.disk, m.uefi, m.arm64, m.stop = disk, img.uefi, img.arm64, failed
	// The image's QEMU arguments, then the test's own (an -smbios serial).
	m.qemuArgs = append(slices.Clip(img.qemuArgs), m.qemuArgs...)
	m.markers = []string{markerAgent, markerInstalled}
	start := time.Now()
	qemuStart <- start
	res := ns.boot(m, timeout)
	cancel()
	<-polled
	if success.Load() == 0 && workflowState(a, workflow) == "SUCCESS" {
		// A workflow whose last action powers the VM off can end between
		// two polls and the VM's exit; its time is then known only to be
		// before now.
		success.Store(int64(time.Since(start)))
	}
	return installRun{res: res, success: time.Duration(success.Load()), disk: disk, os: img}
}

// installTimeout bounds a whole install under TCG: boot, write, reboot,
// boot from disk (~40 s alone on the 2-core machine).
const installTimeout = 5 * time.Minute

// workflowState reads a workflow's state with the CLI ("" on error).
func workflowState(a *anvil, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := a.ns.exec(ctx, assets.anvil, append(a.clientArgs(), "get", "workflow", name, "-o", "json")...)
	if err != nil {
		return ""
	}
	var wf struct {
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	if json.Unmarshal([]byte(out), &wf) != nil {
		return ""
	}
	return wf.Status.State
}

// storedWorkflow is the part of a stored workflow the tests check.
type storedWorkflow struct {
	Status struct {
		State          string     `json:"state"`
		CompletionTime *time.Time `json:"completionTime"`
		Tasks          []struct {
			Actions []actionRecord `json:"actions"`
		} `json:"tasks"`
	} `json:"status"`
}

// actionRecord is one action of a storedWorkflow.
type actionRecord struct {
	Name              string     `json:"name"`
	State             string     `json:"state"`
	Attempt           int        `json:"attempt"`
	ExecutionStart    *time.Time `json:"executionStart"`
	ExecutionStop     *time.Time `json:"executionStop"`
	ExecutionDuration string     `json:"executionDuration"`
	Message           string     `json:"message"`
	Progress          *progress  `json:"progress"` // the agent's last report
}

// progress is an action's self-reported progress: bytes fetched of the
// total.
type progress struct {
	Bytes      int64 `json:"bytes"`
	TotalBytes int64 `json:"totalBytes"`
}

func getWorkflow(t *testing.T, a *anvil, name string) storedWorkflow {
	t.Helper()
	wf, err := readWorkflow(a, name)
	if err != nil {
		t.Fatal(err)
	}
	return wf
}

// assertInstalled checks everything an install must leave behind
// (assertInstalledOS), and that the workflow's toggleAllowNetboot turned
// netboot off, so the second boot was sent to the disk.
func assertInstalled(t *testing.T, a *anvil, run installRun, name, mac, ip string) storedWorkflow {
	t.Helper()
	wf := assertInstalledOS(t, a, run, name, mac, ip)
	hw := a.cli(t, "get", "hardware", name, "-o", "json")
	if !strings.Contains(hw, `"allowPXE": false`) && !strings.Contains(hw, `"allowPXE":false`) {
		t.Errorf("after the install, allowPXE is not false:\n%s", hw)
	}
	return wf
}

// readWorkflow is getWorkflow for any goroutine: it returns its error.
func readWorkflow(a *anvil, name string) (storedWorkflow, error) {
	var wf storedWorkflow
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := a.ns.exec(ctx, assets.anvil, append(a.clientArgs(), "get", "workflow", name, "-o", "json")...)
	if err != nil {
		return wf, fmt.Errorf("anvil get workflow %s: %v\n%s", name, err, out)
	}
	if err := json.Unmarshal([]byte(out), &wf); err != nil {
		return wf, fmt.Errorf("workflow %s as JSON: %v\n%s", name, err, out)
	}
	return wf, nil
}

// assertInstalledOS checks what every install leaves behind: the
// installed OS booted with the hostname the workflow wrote, the stored
// workflow is SUCCESS with every action's times, the disk holds what the
// actions wrote, and the workflow's log has the actions' output.
func assertInstalledOS(t *testing.T, a *anvil, run installRun, name, mac, ip string) storedWorkflow {
	t.Helper()
	return assertInstalledFrom(t, a, run, name, mac, ip, func() storedWorkflow { return getWorkflow(t, a, run.workflowOf(name)) })
}

// assertInstalledFrom is assertInstalledOS with the workflow read by
// read: from the server (anvil get), or from wherever its store is (the
// Kubernetes API server).
func assertInstalledFrom(t *testing.T, a *anvil, run installRun, name, mac, ip string, read func() storedWorkflow) storedWorkflow {
	t.Helper()
	if !strings.Contains(run.res.serial, markerInstalled+" hostname="+name) {
		t.Fatalf("the installed OS did not boot with hostname %s (err %v); serial tail:\n%s", name, run.res.err, tail(run.res.serial, 60))
	}
	if run.res.err != nil {
		t.Errorf("VM did not power off cleanly: %v", run.res.err)
	}
	wf := read()
	if wf.Status.State != "SUCCESS" {
		t.Errorf("workflow state = %q; want SUCCESS", wf.Status.State)
	}
	n := 0
	for _, task := range wf.Status.Tasks {
		for _, act := range task.Actions {
			n++
			if act.State != "SUCCESS" || act.ExecutionStart == nil || act.ExecutionStop == nil || act.ExecutionStop.Before(*act.ExecutionStart) {
				t.Errorf("action %s: state %s, start %v, stop %v; want SUCCESS with times", act.Name, act.State, act.ExecutionStart, act.ExecutionStop)
			}
		}
	}
	if n != 4 {
		t.Errorf("workflow has %d actions; want 4", n)
	}

	// The disk, read from the host with mtools: the boot config names the
	// machine, and the metadata the machine fetched about itself is there.
	cfg := mtype(t, run.disk, run.os.bootConfig)
	if !strings.Contains(cfg, "anvil.hostname="+name) {
		t.Errorf("disk's %s lacks the hostname:\n%s", run.os.bootConfig, cfg)
	}
	// /metadata is Hegel's: the Hardware's spec.metadata, found by the
	// caller's address (ip); the instance ID of these machines is their MAC.
	md := mtype(t, run.disk, "/metadata.json")
	if !strings.Contains(md, `"hostname":"`+name+`"`) || !strings.Contains(md, `"id":"`+mac+`"`) {
		t.Errorf("disk's metadata.json is not this machine's (%s, %s, asked from %s):\n%s", name, mac, ip, md)
	}

	// The record: the agent's output reached the server.
	logs := a.cli(t, "logs", "workflow/"+run.workflowOf(name))
	if !strings.Contains(logs, "metadata") || !strings.Contains(logs, name) {
		t.Errorf("workflow log lacks the cexec action's output (the metadata it fetched):\n%s", logs)
	}
	return wf
}

// mtype reads a file from the FAT partition at 1 MiB of a raw disk image.
func mtype(t *testing.T, disk, path string) string {
	t.Helper()
	cmd := exec.Command("mtype", "-i", disk+"@@1M", "::"+path)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("mtype %s from the disk: %v\n%s", path, err, out)
	}
	return string(out)
}

// installTimings are the figures the benchmark compares: the bare
// floor (QEMU start to a Go /init printing its marker, netbooted the same
// way, in the same run), the image write (image2disk's duration as the
// server recorded it), and the install's own times. Target: SUCCESS within
// floor + write + 2.5 s.
type installTimings struct {
	floor, write, agent, success, installed time.Duration
}

func (x installTimings) margin() time.Duration { return x.success - x.floor - x.write }

// logTimings reports the timings; with ANVIL_E2E_TIMINGS=FILE also as a
// JSON line with the server's command line (bench/install reads it and
// names that `anvil serve` in its result file). Tests do not assert
// wall-clock time.
func logTimings(t *testing.T, label string, x installTimings, server *anvil) {
	t.Helper()
	t.Logf("%s: floor %.1fs, image write %.1fs; QEMU start → agent %.1fs, → workflow SUCCESS %.1fs (floor + write + %.1fs; target 2.5s), → installed OS %.1fs",
		label, x.floor.Seconds(), x.write.Seconds(), x.agent.Seconds(), x.success.Seconds(), x.margin().Seconds(), x.installed.Seconds())
	if out := os.Getenv("ANVIL_E2E_TIMINGS"); out != "" {
		b, err := json.Marshal(map[string]any{"test": label, "floor_s": x.floor.Seconds(), "write_s": x.write.Seconds(),
			"agent_s": x.agent.Seconds(), "success_s": x.success.Seconds(), "margin_s": x.margin().Seconds(),
			"installed_s": x.installed.Seconds(), "server": append([]string{assets.anvil}, server.args...),
			"server_version": anvilVersion()})
		if err != nil {
			t.Errorf("ANVIL_E2E_TIMINGS: %v", err)
			return
		}
		line := string(b) + "\n"
		f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("ANVIL_E2E_TIMINGS: %v", err)
			return
		}
		defer f.Close()
		if _, err := f.WriteString(line); err != nil {
			t.Errorf("ANVIL_E2E_TIMINGS: %v", err)
		}
	}
}

// anvilVersion is what the binary under test says of itself: the test's
// build is removed with the test, so the timings line keeps it.
func anvilVersion() string {
	out, err := exec.Command(assets.anvil, "version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// timings gathers an install's timings, with the floor measured apart.
func timings(floor time.Duration, run installRun, wf storedWorkflow) installTimings {
	x := installTimings{floor: floor, agent: run.res.seen[markerAgent], success: run.success, installed: run.res.seen[markerInstalled]}
	// The server's own record of the end, on the same clock as QEMU's
	// start, is more exact than polling for it.
	if c := wf.Status.CompletionTime; c != nil && !run.res.start.IsZero() {
		x.success = c.Sub(run.res.start)
	}
	for _, task := range wf.Status.Tasks {
		for _, act := range task.Actions {
			if act.Name == "stream-image" && act.ExecutionStart != nil && act.ExecutionStop != nil {
				x.write = act.ExecutionStop.Sub(*act.ExecutionStart)
			}
		}
	}
	return x
}

// measureFloor netboots a VM into the test initramfs (a Go /init that
// prints a marker and powers off) through a server of its own, and returns
// the time from QEMU's start to the marker.
func measureFloor(t *testing.T, ns *netns) time.Duration {
	t.Helper()
	a := startAnvil(t, ns, serverIP)
	mac := "52:54:00:77:01:01"
	a.apply(t, provisioningYAML("node-floor", mac, "10.77.0.101", serverIP))
	res := ns.boot(vm{name: "node-floor", mac: mac, tap: "tap0", markers: []string{"ANVIL-E2E-BOOTED"}}, vmTimeout)
	assertBooted(t, res, mac, serverIP+":42113")
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	return res.seen["ANVIL-E2E-BOOTED"]
}

// TestInstall: a blank BIOS machine is installed end to end and boots the
// installed OS.
func TestInstall(t *testing.T) {
	requireLab(t)
	prepareInstall(t)
	ns := newNetns(t, "install")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	floor := measureFloor(t, ns)

	a := startAnvil(t, ns, serverIP, "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images)
	name, mac, ip := "node-install", "52:54:00:77:01:10", "10.77.0.110"
	a.apply(t, installYAML(name, mac, ip, serverIP, "http://"+serverIP+":7080/images/os.raw.zst"))

	run := runInstall(t, ns, a, name, mac, nil)
	wf := assertInstalled(t, a, run, name, mac, ip)
	logTimings(t, "install", timings(floor, run, wf), a)
	if os.Getenv("ANVIL_E2E_SERIAL") != "" {
		t.Logf("serial console:\n%s", run.res.serial)
	}
	record := a.cli(t, "logs", "hardware/"+name)
	assertRecord(t, record, "http", "initramfs-x86_64", "200")
	assertRecord(t, record, "http", "os.raw.zst", "200")
}

// TestInstallServerRestart: the server restarts while image2disk streams
// the image; the agent reconnects, the workflow finishes, and nothing runs
// twice. The image server in the lab sends the first half of the image and
// holds the rest until the restart is over, so the restart lands in the
// middle of the write — and the test checks that it did: the record the
// restarted server holds shows image2disk running with part of the image
// written (progress above zero, below the total).
func TestInstallServerRestart(t *testing.T) {
	requireLab(t)
	prepareInstall(t)
	ns := newNetns(t, "restart")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP, "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images)

	img, err := os.ReadFile(filepath.Join(installLab.images, "os.raw.zst"))
	if err != nil {
		t.Fatal(err)
	}
	half := len(img) / 2
	var gets atomic.Int32
	held := make(chan struct{})   // the first half is sent; the rest waits
	resume := make(chan struct{}) // the restart is over: send the rest
	var heldOnce, resumeOnce sync.Once
	release := func() { resumeOnce.Do(func() { close(resume) }) }
	t.Cleanup(release)
	gated := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		w.Header().Set("Content-Length", fmt.Sprint(len(img)))
		if _, err := w.Write(img[:half]); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		heldOnce.Do(func() { close(held) })
		select {
		case <-resume:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write(img[half:])
	})
	imageAddr := listenInNetns(t, ns, serverIP+":8099", gated)

	name, mac, ip := "node-restart", "52:54:00:77:01:20", "10.77.0.120"
	a.apply(t, installYAML(name, mac, ip, serverIP, "http://"+imageAddr+"/os.raw.zst"))
	restarted := make(chan struct{})
	var midWrite atomic.Bool // the restarted server's record shows the write in progress
	run := runInstall(t, ns, a, name, mac, func() {
		go func() {
			defer close(restarted)
			defer release() // whatever happens, let the install finish
			select {
			case <-held:
			case <-time.After(installTimeout):
				t.Error("image2disk never fetched the image")
				return
			}
			// The agent reports progress every few seconds
			// (PROGRESS_INTERVAL_SECONDS): restart once the server has
			// recorded some.
			before, err := waitProgress(a, name+"-install", "stream-image")
			if err != nil {
				t.Error(err)
				return
			}
			t.Logf("restarting anvil serve while image2disk has fetched %d of %d bytes", before.Bytes, before.TotalBytes)
			if err := a.restart(); err != nil {
				t.Error(err)
				return
			}
			wf, err := readWorkflow(a, name+"-install")
			if err != nil {
				t.Error(err)
				return
			}
			act, ok := findAction(wf, "stream-image")
			switch {
			case !ok:
				t.Errorf("the restarted server's record has no stream-image action")
			case act.State != "RUNNING" || act.Progress == nil || act.Progress.Bytes <= 0 || act.Progress.Bytes >= act.Progress.TotalBytes:
				t.Errorf("after the restart the record shows stream-image %s with progress %+v; want RUNNING with 0 < bytes < total (the restart mid-write)",
					act.State, act.Progress)
			default:
				t.Logf("after the restart the record shows stream-image RUNNING at %d of %d bytes", act.Progress.Bytes, act.Progress.TotalBytes)
				midWrite.Store(true)
			}
		}()
	})
	<-restarted
	wf := assertInstalled(t, a, run, name, mac, ip)
	if !midWrite.Load() {
		t.Error("the restart did not land in the middle of the image write")
	}
	t.Logf("install through a restart: QEMU start → workflow SUCCESS %.1fs, → installed OS %.1fs",
		run.success.Seconds(), run.res.seen[markerInstalled].Seconds())
	if n := gets.Load(); n != 1 {
		t.Errorf("the image was fetched %d times; want 1 (image2disk ran again?)", n)
	}
	for _, task := range wf.Status.Tasks {
		for _, act := range task.Actions {
			if act.Attempt > 1 {
				t.Errorf("action %s ran %d times; want once", act.Name, act.Attempt)
			}
		}
	}
}

// findAction returns the action named name of wf.
func findAction(wf storedWorkflow, name string) (actionRecord, bool) {
	for _, task := range wf.Status.Tasks {
		for _, act := range task.Actions {
			if act.Name == name {
				return act, true
			}
		}
	}
	return actionRecord{}, false
}

// waitProgress polls the workflow until its action reports progress (bytes
// fetched above zero) and returns it.
func waitProgress(a *anvil, workflow, action string) (progress, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		wf, err := readWorkflow(a, workflow)
		if err == nil {
			if act, ok := findAction(wf, action); ok && act.Progress != nil && act.Progress.Bytes > 0 {
				return *act.Progress, nil
			}
		}
		if time.Now().After(deadline) {
			return progress{}, fmt.Errorf("%s of %s reported no progress within 2 minutes (last error: %v)", action, workflow, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// inNetns runs fn on a thread switched into ns, and returns fn's error (or
// the switch's). Sockets fn makes belong to ns for their whole life, after
// the thread has switched back.
func inNetns(ns *netns, fn func() error) error {
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the thread is left to exit in the namespace's stead if switching back fails
		orig, oerr := os.Open("/proc/thread-self/ns/net")
		if oerr != nil {
			err = oerr
			return
		}
		defer orig.Close()
		target, terr := os.Open("/var/run/netns/" + ns.name)
		if terr != nil {
			err = terr
			return
		}
		defer target.Close()
		if err = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			return
		}
		err = fn()
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr != nil {
			return // leave the thread locked: it dies with this goroutine
		}
		runtime.UnlockOSThread()
	}()
	<-done
	return err
}

// listenInNetns serves h on addr inside ns from this test process.
func listenInNetns(t *testing.T, ns *netns, addr string, h http.Handler) string {
	t.Helper()
	var ln net.Listener
	err := inNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns.name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}
