package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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

// TestDiscoveryProxyDHCP: in proxy mode, next to the network's own DHCP
// server (dnsmasq), --discovery makes Anvil answer an unknown machine's
// PXE client with iPXE (as auto-proxy does) and boot it for discovery;
// dnsmasq gives every address, Anvil none, and the Hardware reserves
// none. The firmware's SMBIOS UUID is all zeros, a placeholder: the
// Hardware is named by the MAC. The VM is stopped once its Hardware
// exists (it would wait for work).
func TestDiscoveryProxyDHCP(t *testing.T) {
	requireLab(t)
	prepareInstall(t)
	ns := newNetns(t, "disc-proxy")
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	peer := peerHost(t, ns, "br0", "disc-dhcp", "vdhcp", "10.77.0.2/24")
	dnsmasq := startDnsmasqDHCP(peer, "vdhcp", "10.77.0.100,10.77.0.150,255.255.255.0,10m", serverIP)
	a := startAnvil(t, ns, serverIP, "--dhcp-mode", "proxy", "--discovery", "--bootenv-dir", installLab.bootEnv)
	const mac = "52:54:00:77:03:20"
	name := "discovery-525400770320"

	stop := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go func() { // stop the VM once its Hardware is there
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			out, err := a.ns.exec(ctx, assets.anvil, append(a.clientArgs(), "get", "hardware", name, "-o", "name")...)
			cancel()
			if err == nil && strings.Contains(out, name) {
				close(stop)
				return
			}
		}
	}()
	res := ns.boot(vm{name: "proxy-discovered", mac: mac, tap: "tap0", uefi: true, stop: stop,
		markers:  []string{markerAgent},
		qemuArgs: []string{"-smbios", "type=1,uuid=00000000-0000-0000-0000-000000000000"}}, installTimeout)
	select {
	case <-stop:
	default:
		t.Fatalf("no Hardware %s was made (VM: %v); serial tail:\n%s\nanvil:\n%s", name, res.err, tail(res.serial, 60), tail(a.p.output(), 40))
	}

	out := a.cli(t, "get", "hardware", name, "-o", "json")
	var hw model.Hardware
	if err := json.Unmarshal([]byte(out), &hw); err != nil {
		t.Fatalf("hardware %s: %v\n%s", name, err, out)
	}
	if hw.Labels[model.LabelDiscovered] != "true" || len(hw.MACs()) == 0 || hw.MACs()[0].String() != mac {
		t.Errorf("Hardware %s: labels %v, MACs %v; want discovered, %s first", name, hw.Labels, hw.MACs(), mac)
	}
	if ips := hw.IPs(); len(ips) != 0 {
		t.Errorf("in proxy mode the discovered Hardware reserves %v; want no address", ips)
	}
	if at := hw.Status.Attributes; at == nil || at.Anvil == nil || at.Anvil.Firmware != "uefi" {
		t.Errorf("status.attributes %+v; want the inventory, UEFI", at)
	} else {
		t.Logf("the inventory's UUID: %q (the placeholder, or none)", at.Anvil.UUID)
	}
	lease := dnsmasqLease(dnsmasq.output(), "vdhcp", mac)
	if lease == "" {
		t.Errorf("dnsmasq acknowledged no address to %s; its log:\n%s", mac, tail(dnsmasq.output(), 40))
	}
	record := a.cli(t, "logs", "hardware/"+name)
	assertRecord(t, record, "dhcp", "PXEClient", "ipxe.efi")
	assertRecord(t, record, "http", "auto.ipxe", "discovery boot")
	assertRecord(t, record, "discovery", "discovered", name)
	if strings.Contains(record, "discovery pool") {
		t.Errorf("proxy mode leased from a pool; record:\n%s", record)
	}
}
