package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// TestDiscoveryInstall: a machine Anvil has no Hardware for is discovered,
// inventoried, enrolled by a rule and installed, with no reboot between
// the discovery and the install. The server runs with --discovery and a
// pool; the BIOS VM, with 2 vCPUs, 640 MiB, an SMBIOS serial and UUID and
// a 64 MiB disk with a serial of its own, gets a pool address, boots the
// boot environment in discovery mode, and its agent reports. The test
// checks the Hardware Anvil made (named by the UUID; the CPUs, memory,
// disk size and serial, and product serial QEMU was given; the pool
// lease as its reservation), that the WorkflowRuleSet enrolled it, that
// the workflow ran to SUCCESS and that the machine then booted its disk
// (the enrolment's workflow turns netboot off when it succeeds).
func TestDiscoveryInstall(t *testing.T) {
	requireLab(t)
	prepareInstall(t)
	ns := newNetns(t, "discovery")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP, "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images,
		"--discovery", "--discovery-pool", "10.77.0.150-10.77.0.159")

	const (
		uuid       = "5C0FFEE0-1234-4A5B-8C6D-0E1F2A3B4C5D"
		serial     = "anvil-e2e-discovered"
		diskSerial = "ANVIL-DISK-7"
		mac        = "52:54:00:77:03:10"
		hostname   = "discovered-node"
		memoryMiB  = 640
	)
	name := "discovery-" + strings.ToLower(uuid)
	a.apply(t, discoveryRuleYAML(hostname, "http://"+serverIP+":7080/images/"+biosOS.file))

	run := runWorkflowOS(t, ns, a, "enroll-"+name, biosOS, vm{name: "discovered", mac: mac, tap: "tap0",
		cpus: 2, memoryMiB: memoryMiB, diskSerial: diskSerial,
		qemuArgs: []string{"-smbios", "type=1,serial=" + serial + ",uuid=" + uuid}}, installTimeout, nil)
	t.Logf("discovery install: QEMU start → agent %.1fs, → workflow SUCCESS %.1fs, → installed OS %.1fs",
		run.res.seen[markerAgent].Seconds(), run.success.Seconds(), run.res.seen[markerInstalled].Seconds())
	if !strings.Contains(run.res.serial, markerInstalled+" hostname="+hostname) {
		t.Fatalf("the installed OS did not boot (err %v); serial tail:\n%s", run.res.err, tail(run.res.serial, 80))
	}
	for _, l := range strings.Split(run.res.serial, "\n") {
		if strings.Contains(l, "anvil agent: discovery") {
			t.Logf("console: %s", strings.TrimSpace(l))
		}
	}
	if wf := getWorkflow(t, a, "enroll-"+name); wf.Status.State != "SUCCESS" {
		t.Errorf("workflow enroll-%s is %s; want SUCCESS", name, wf.Status.State)
	}
	if !strings.Contains(run.res.serial, "this machine is now Hardware default/"+name) {
		t.Errorf("the agent did not say it was discovered as %s; serial tail:\n%s", name, tail(run.res.serial, 80))
	}

	// The Hardware, as the selector lists it.
	out := a.cli(t, "get", "hardware", "-l", model.LabelDiscovered+"=true", "-o", "json")
	var list struct {
		Items []model.Hardware `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("anvil get hardware -l %s=true: %v; want one Hardware:\n%s", model.LabelDiscovered, err, out)
	}
	hw := list.Items[0]
	if hw.Name != name {
		t.Errorf("discovered Hardware %s; want %s (the SMBIOS UUID, lower case)", hw.Name, name)
	}
	if hw.Annotations[model.AnnotationEnrolledBy] != "default/discovered-vms#rules[0]" {
		t.Errorf("annotation %s = %q; want the rule that enrolled it", model.AnnotationEnrolledBy, hw.Annotations[model.AnnotationEnrolledBy])
	}
	if len(hw.Spec.Interfaces) == 0 || hw.Spec.Interfaces[0].MAC().String() != mac {
		t.Fatalf("interfaces %+v; want the booting NIC %s first", hw.Spec.Interfaces, mac)
	}
	if ips := hw.IPs(); len(ips) != 1 || !strings.HasPrefix(ips[0], "10.77.0.15") {
		t.Errorf("reserved addresses %v; want the pool lease (10.77.0.150-159)", ips)
	}
	if len(hw.Spec.Disks) != 1 || hw.Spec.Disks[0].Device != "/dev/vda" {
		t.Errorf("disks %+v; want /dev/vda", hw.Spec.Disks)
	}
	at := hw.Status.Attributes
	if at == nil || at.Anvil == nil {
		t.Fatalf("no status.attributes:\n%s", out)
	}
	if at.CPU == nil || at.CPU.TotalThreads != 2 {
		t.Errorf("cpu %+v; want the VM's 2 vCPUs", at.CPU)
	}
	// MemTotal is what the kernel manages: the RAM less the firmware's and
	// the kernel's own reservations, some tens of MiB.
	if mib := at.Anvil.MemoryBytes >> 20; mib > memoryMiB || mib < memoryMiB*3/4 {
		t.Errorf("memory %d MiB; want a little under the VM's %d MiB", mib, memoryMiB)
	}
	if at.Product == nil || at.Product.SerialNumber != serial {
		t.Errorf("product %+v; want serial %s", at.Product, serial)
	}
	if at.Anvil.UUID != strings.ToLower(uuid) {
		t.Errorf("uuid %q; want %s", at.Anvil.UUID, strings.ToLower(uuid))
	}
	var disk *model.BlockDevice
	for i := range at.BlockDevices {
		if at.BlockDevices[i].Name == "vda" {
			disk = &at.BlockDevices[i]
		}
	}
	var size uint64
	for _, d := range at.Anvil.BlockDevices {
		if d.Name == "vda" {
			size = d.SizeBytes
		}
	}
	if disk == nil || disk.SerialNumber != diskSerial || size != 64<<20 {
		t.Errorf("disk vda %+v, %d bytes; want serial %s, %d bytes", disk, size, diskSerial, 64<<20)
	}

	// The machine's record says it was discovered, enrolled and installed.
	record := a.cli(t, "logs", "hardware/"+name)
	for _, l := range strings.Split(record, "\n") {
		if strings.Contains(l, "discovery") || strings.Contains(l, "enroll") {
			t.Logf("record: %s", l)
		}
	}
	assertRecord(t, record, "discovery", "discovered", name)
	assertRecord(t, record, "enroll", "enroll-"+name)
	assertRecord(t, record, "dhcp", "discovery pool 10.77.0.150-10.77.0.159/24")
	assertRecord(t, record, "http", "auto.ipxe", "discovery boot")
	// The enrolment's workflow turned netboot off once it succeeded
	// (toggleAllowNetboot), so the second boot went to the disk.
	if hw.Spec.Interfaces[0].Netboot == nil || model.BoolValue(hw.Spec.Interfaces[0].Netboot.AllowPXE, true) {
		t.Errorf("after the install, allowPXE is not false: %+v", hw.Spec.Interfaces[0].Netboot)
	}
}

// discoveryRuleYAML is a Template that installs the BIOS test OS from
// imageURL onto the machine's first disk, naming it hostname (a kvs entry
// of the rule), and a WorkflowRuleSet that gives it to every QEMU machine.
func discoveryRuleYAML(hostname, imageURL string) string {
	cfg := make([]string, len(biosOS.bootConfigText))
	for i, l := range biosOS.bootConfigText {
		cfg[i] = strings.ReplaceAll(l, "{{ .hardware.metadata.instance.hostname }}", "{{ .hostname }}")
	}
	return `apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata:
  name: discovered-install
spec:
  data: |
    version: "0.1"
    name: discovered-install
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
              IMG_URL: ` + imageURL + `
              DEST_DISK: {{ index .Hardware.Disks 0 }}
              COMPRESSED: true
          - name: hostname
            image: quay.io/tinkerbell/actions/writefile:v1.0.0
            timeout: 60
            environment:
              DEST_DISK: {{ formatPartition (index .Hardware.Disks 0) 1 }}
              FS_TYPE: vfat
              DEST_PATH: ` + biosOS.bootConfig + `
              MODE: "0755"
              CONTENTS: |
                ` + strings.Join(cfg, "\n                ") + `
          - name: reboot
            image: reboot
            timeout: 30
---
apiVersion: tinkerbell.org/v1alpha1
kind: WorkflowRuleSet
metadata:
  name: discovered-vms
spec:
  rules:
    - '{"product": {"vendor": ["QEMU"]}, "blockDevices": {"serialNumber": [{"exists": true}]}}'
  workflow:
    template:
      ref: discovered-install
      kvs:
        hostname: ` + hostname + `
`
}
