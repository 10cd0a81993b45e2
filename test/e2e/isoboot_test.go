package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// isobootRedfishPort is where the Redfish simulator listens in the lab
// namespace.
const isobootRedfishPort = 8443

// TestISOBootRedfish: a VM powered off behind a Redfish BMC (test/redfishsim
// driving QEMU through QMP) is booted from virtual media and installed by
// an isoboot workflow with no isoURL. The engine writes the iso-mount Job;
// the executor, through Redfish, powers the VM off, ejects, inserts Anvil's
// boot ISO for the MAC (/iso/<mac>/anvil.iso, Debian's iPXE ISO served as
// is), sets a one-time CD boot and powers on; the simulator fetches the ISO
// and QEMU boots it; iPXE asks Anvil's DHCP, chains to the machine's
// script, boots the boot environment, which runs the workflow; the reboot
// action boots the disk (the one-time CD boot is spent), and the installed
// OS powers the VM off. After SUCCESS the iso-eject Job takes the CD out.
func TestISOBootRedfish(t *testing.T) {
	requireLab(t)
	qemu := testtool.RequireBinary(t, "qemu-system-x86_64", "qemu-system-x86")
	if _, err := os.Stat("/usr/lib/ipxe/ipxe.iso"); err != nil {
		testtool.Need(t, "Debian's iPXE ISO (apt-get install ipxe): %v", err)
	}
	prepareInstall(t)
	const name, mac, ip = "node-iso", "52:54:00:77:01:60", "10.77.0.160"

	dir := t.TempDir()
	sim := filepath.Join(dir, "redfishsim")
	if out, err := exec.Command("go", "build", "-o", sim, "../redfishsim/cmd/redfishsim").CombinedOutput(); err != nil {
		t.Fatalf("build redfishsim: %v\n%s", err, out)
	}
	disk := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}

	ns := newNetns(t, name)
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP, "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images)

	qemuSlots <- struct{}{}
	defer func() { <-qemuSlots }()
	vmDir := filepath.Join(dir, "vm")
	if err := os.Mkdir(vmDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ns.background("redfishsim", sim, "-listen", fmt.Sprintf("127.0.0.1:%d", isobootRedfishPort), "-user", labBMCUser,
		"-password", labBMCPass, "-dir", vmDir, "-qemu", qemu, "-memory", "512", "-accel", "tcg", // as every lab VM
		"-qemu-arg=-netdev", "-qemu-arg=tap,id=n0,ifname=tap0,script=no,downscript=no",
		"-qemu-arg=-device", "-qemu-arg=virtio-net-pci,netdev=n0,mac="+mac,
		"-qemu-arg=-drive", "-qemu-arg=file="+disk+",format=raw,if=virtio")
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(vmDir, "qemu.log")); err == nil && t.Failed() {
			t.Logf("qemu.log:\n%s", b)
		}
	})
	machine := "bmc-" + name
	spec := installSpec{os: biosOS, name: name, mac: mac, ip: ip, server: serverIP,
		imageURL: "http://" + serverIP + ":7080/images/os.raw.zst", bmc: machine}.yaml()
	spec = strings.Replace(spec, "  bootOptions:\n    toggleAllowNetboot: true", "  bootOptions:\n    bootMode: isoboot\n    toggleAllowNetboot: true", 1)
	if !strings.Contains(spec, "bootMode: isoboot") {
		t.Fatalf("no isoboot in the spec:\n%s", spec)
	}
	machineYAML := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %[1]s
stringData:
  username: %[2]s
  password: %[3]s
---
apiVersion: bmc.tinkerbell.org/v1alpha1
kind: Machine
metadata:
  name: %[1]s
spec:
  connection:
    host: 127.0.0.1
    port: %[4]d
    authSecretRef:
      name: %[1]s
    insecureTLS: true
    providerOptions:
      preferredOrder: [redfish]
      redfish:
        port: %[4]d
---
`, machine, labBMCUser, labBMCPass, isobootRedfishPort)
	testtool.WaitFor(t, "the Redfish simulator to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := ns.exec(ctx, "curl", "-ksf", fmt.Sprintf("https://127.0.0.1:%d/redfish/v1/", isobootRedfishPort))
		return err == nil
	})

	start := time.Now()
	a.apply(t, machineYAML+spec)
	workflow := name + "-install"
	serialPath := filepath.Join(vmDir, "console.log")
	var running, success time.Duration
	deadline := start.Add(installTimeout + time.Minute)
	for {
		s := workflowState(a, workflow)
		if running == 0 && s == "RUNNING" {
			running = time.Since(start)
		}
		if success == 0 && s == "SUCCESS" {
			success = time.Since(start)
		}
		serial, _ := os.ReadFile(serialPath)
		if success != 0 && strings.Contains(string(serial), markerInstalled) &&
			strings.Contains(a.cli(t, "describe", "workflow", workflow), "iso-eject job iso-eject-"+workflow+" completed") {
			break
		}
		if s == "FAILED" || s == "TIMEOUT" || time.Now().After(deadline) {
			fw, _ := os.ReadFile(filepath.Join(vmDir, "firmware.log"))
			t.Fatalf("workflow %s (RUNNING after %s); describe:\n%s\nserial:\n%s\nfirmware:\n%s", s, running,
				a.cli(t, "describe", "workflow", workflow), tail(string(serial), 40), tail(string(fw), 20))
		}
		time.Sleep(300 * time.Millisecond)
	}
	installed := time.Since(start)
	desc := a.cli(t, "describe", "workflow", workflow)
	for _, want := range []string{"BootJobComplete", "iso-mount job iso-mount-" + workflow + " completed",
		"iso-eject job iso-eject-" + workflow + " completed", "/iso/" + mac + "/anvil.iso"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe workflow lacks %q:\n%s", want, desc)
		}
	}
	// SeaBIOS booted the CD (the one-time boot), then, at the reboot
	// action, the disk; iPXE from the CD asked DHCP and fetched the
	// machine's script, and the boot environment streamed the image.
	fw, _ := os.ReadFile(filepath.Join(vmDir, "firmware.log"))
	iCD, iDisk := strings.Index(string(fw), "Booting from DVD/CD"), strings.LastIndex(string(fw), "Booting from Hard Disk")
	if iCD < 0 || iDisk < iCD {
		t.Errorf("firmware did not boot the CD, then the disk:\n%s", tail(string(fw), 30))
	}
	record := a.cli(t, "logs", "hardware/"+name)
	assertRecord(t, record, "dhcp", "(bios, iPXE)", "/ipxe/script/"+mac+"/auto.ipxe")
	assertRecord(t, record, "http", "auto.ipxe", "boot environment")
	assertRecord(t, record, "http", "os.raw.zst", "200")
	assertRecord(t, record, "bmc", "job iso-eject-"+workflow+" completed")
	t.Logf("describe workflow %s:\n%s", workflow, desc)
	t.Logf("isoboot: apply → workflow RUNNING (boot env from the ISO fetched its action) %.1fs, → SUCCESS %.1fs, → installed OS and CD ejected %.1fs",
		running.Seconds(), success.Seconds(), installed.Seconds())
	if os.Getenv("ANVIL_E2E_SERIAL") != "" {
		serial, _ := os.ReadFile(serialPath)
		t.Logf("serial console:\n%s", serial)
	}
}
