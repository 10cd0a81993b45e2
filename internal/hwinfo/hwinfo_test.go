package hwinfo

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/testtool"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the collector's output")

// machines are the recorded trees under testdata (testdata/README.md says
// where each came from).
var machines = []string{"dell-r610", "laptop-xps15", "qemu-q35", "qemu-q35-uefi", "this-machine"}

// Each recorded machine gives its golden inventory.
func TestGolden(t *testing.T) {
	for _, m := range machines {
		t.Run(m, func(t *testing.T) {
			a, err := Collect(filepath.Join("testdata", m))
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(a, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", m+".golden.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Collect(%s) differs from %s (go test -update rewrites it):\n%s", m, golden, got)
			}
		})
	}
}

// The facts set on QEMU's command line (-smp 2, -m 2048, -smbios
// type=1,serial=..., a virtio disk of 8 GiB with serial=..., a MAC) are
// where Tinkerbell's shape puts them, under SeaBIOS and under OVMF; the
// golden files hold the rest.
func TestQEMUFacts(t *testing.T) {
	for _, tc := range []struct {
		dir, serial, disk, mac, firmware, secureBoot string
		memKiB                                       uint64
	}{
		{"qemu-q35", "anvil-qemu-0001", "anvil-disk-0001", "52:54:00:12:34:56", "bios", "", 2014136},
		{"qemu-q35-uefi", "anvil-qemu-0002", "anvil-disk-0002", "52:54:00:12:34:57", "uefi", "disabled", 2007700},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			a, err := Collect(filepath.Join("testdata", tc.dir))
			if err != nil {
				t.Fatal(err)
			}
			if a.CPU == nil || a.CPU.TotalThreads != 2 || a.CPU.TotalCores != 2 || len(a.CPU.Processors) != 1 {
				t.Errorf("cpu = %+v; want one package of 2 cores, 2 threads", a.CPU)
			}
			if a.Product == nil || a.Product.SerialNumber != tc.serial || a.Product.Vendor != "QEMU" {
				t.Errorf("product = %+v; want QEMU's with serial %s", a.Product, tc.serial)
			}
			i := slices.IndexFunc(a.BlockDevices, func(b model.BlockDevice) bool { return b.Name == "vda" })
			if i < 0 {
				t.Fatalf("blockDevices = %+v; want a vda", a.BlockDevices)
			}
			if vda := a.BlockDevices[i]; vda.SerialNumber != tc.disk || vda.Size != "8GB" || vda.ControllerType != "virtio" || vda.Vendor != "" ||
				a.Anvil.BlockDevices[i].SizeBytes != 8<<30 {
				t.Errorf("vda = %+v, %+v; want virtio, 8 GiB, serial %s, no vendor ID as a vendor", vda, a.Anvil.BlockDevices[i], tc.disk)
			}
			if len(a.NetworkInterfaces) != 1 || a.NetworkInterfaces[0].MAC != tc.mac || a.Anvil.NetworkInterfaces[0].Driver != "virtio_net" {
				t.Errorf("NICs = %+v, %+v; want eth0 (virtio_net) with MAC %s", a.NetworkInterfaces, a.Anvil.NetworkInterfaces, tc.mac)
			}
			if a.Anvil.MemoryBytes != tc.memKiB<<10 || a.Memory.Total != "2GB" {
				t.Errorf("memory = %+v, %d bytes; want MemTotal's %d kB, 2GB", a.Memory, a.Anvil.MemoryBytes, tc.memKiB)
			}
			if a.Anvil.Firmware != tc.firmware || a.Anvil.SecureBoot != tc.secureBoot || a.Anvil.TPM != "" {
				t.Errorf("firmware %q, secure boot %q, tpm %q; want %q, %q, none", a.Anvil.Firmware, a.Anvil.SecureBoot, a.Anvil.TPM, tc.firmware, tc.secureBoot)
			}
		})
	}
}

// What each fixture is there to show, besides its golden file: the
// packages and their cores, the skipped virtual devices, udev's WWN,
// pci.ids names, UEFI with Secure Boot and both TPM versions.
func TestMachineFacts(t *testing.T) {
	r610, err := Collect("testdata/dell-r610")
	if err != nil {
		t.Fatal(err)
	}
	if len(r610.CPU.Processors) != 2 || r610.CPU.TotalCores != 12 || r610.CPU.TotalThreads != 24 {
		t.Errorf("R610 cpu = %d packages, %d cores, %d threads; want 2, 12, 24", len(r610.CPU.Processors), r610.CPU.TotalCores, r610.CPU.TotalThreads)
	}
	var disks []string
	for _, b := range r610.BlockDevices {
		disks = append(disks, b.Name)
	}
	if !slices.Equal(disks, []string{"sda", "sr0"}) {
		t.Errorf("R610 disks %v; want sda and sr0 (dm-*, zram0 have no device)", disks)
	}
	if sda := r610.BlockDevices[0]; sda.WWN != "0xCAFE" || sda.Vendor != "DELL" || sda.Model != "PERC 6/i" || sda.DriveType != "HDD" {
		t.Errorf("R610 sda = %+v; want DELL PERC 6/i, HDD, WWN from the udev database", sda)
	}
	if sr0 := r610.BlockDevices[1]; sr0.DriveType != "ODD" || !r610.Anvil.BlockDevices[1].Removable {
		t.Errorf("R610 sr0 = %+v, %+v; want a removable ODD", sr0, r610.Anvil.BlockDevices[1])
	}
	if n := len(r610.NetworkInterfaces); n != 4 || r610.NetworkInterfaces[0].Speed != "1000Mb/s" || r610.NetworkInterfaces[2].Speed != "" ||
		r610.Anvil.NetworkInterfaces[0].Driver != "bnx2" || !r610.Anvil.NetworkInterfaces[0].Carrier || r610.Anvil.NetworkInterfaces[2].State != "down" {
		t.Errorf("R610 NICs = %+v, %+v; want eno1-4 (bnx2), two up at 1000Mb/s, two down", r610.NetworkInterfaces, r610.Anvil.NetworkInterfaces)
	}
	if r610.Anvil.TPM != "1.2" || r610.Anvil.Firmware != "bios" || r610.Anvil.UUID != "4c4c4544-004e-5610-8030-c1c04f523631" {
		t.Errorf("R610 tpm %q, firmware %q, uuid %q", r610.Anvil.TPM, r610.Anvil.Firmware, r610.Anvil.UUID)
	}

	xps, err := Collect("testdata/laptop-xps15")
	if err != nil {
		t.Fatal(err)
	}
	if len(xps.GPUDevices) != 2 || xps.GPUDevices[1].Product != "GA107M [GeForce RTX 3050 Ti Mobile]" ||
		xps.GPUDevices[1].Vendor != "NVIDIA Corporation" || xps.GPUDevices[1].Class != "Display controller" || xps.GPUDevices[1].Driver != "nvidia" {
		t.Errorf("laptop GPUs = %+v; want Intel's and NVIDIA's, named from pci.ids", xps.GPUDevices)
	}
	if len(xps.BlockDevices) != 1 || xps.BlockDevices[0].ControllerType != "NVMe" || xps.BlockDevices[0].SerialNumber != "S64ANS0T000001" ||
		xps.BlockDevices[0].WWN != "eui.002538b211000001" || xps.BlockDevices[0].DriveType != "SSD" {
		t.Errorf("laptop disks = %+v; want one NVMe SSD with serial and WWN", xps.BlockDevices)
	}
	if xps.Anvil.Firmware != "uefi" || xps.Anvil.SecureBoot != "enabled" || xps.Anvil.TPM != "2.0" {
		t.Errorf("laptop firmware %q, secure boot %q, tpm %q; want uefi, enabled, 2.0", xps.Anvil.Firmware, xps.Anvil.SecureBoot, xps.Anvil.TPM)
	}
}

// A tree that lies or is huge gives a bounded answer: thousands of disks
// and NICs, megabyte strings, garbage in /proc, a FIFO where an attribute
// should be, a link out of the tree.
func TestHostileTree(t *testing.T) {
	root := t.TempDir()
	put := func(name, data string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	huge := strings.Repeat("Ω", 1<<19) // a megabyte
	for i := range 1000 {
		d := "sys/block/sd" + strconv.Itoa(i)
		if err := os.MkdirAll(filepath.Join(root, d, "device"), 0o755); err != nil {
			t.Fatal(err)
		}
		if i < 8 { // megabytes each: a few show the cap, thousands would only be slow
			put(d+"/device/model", huge)
			put(d+"/serial", "\x00\x01bad\xffutf8\n"+huge)
			put(d+"/size", "99999999999999999999999\n")
		}
	}
	for i := range 300 {
		put("sys/class/net/eth"+strconv.Itoa(i)+"/address", huge)
		if err := os.MkdirAll(filepath.Join(root, "sys/class/net/eth"+strconv.Itoa(i), "device"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 600 {
		p := "sys/bus/pci/devices/0000:00:" + strconv.Itoa(i)
		put(p+"/vendor", "0x8086\n")
		put(p+"/device", "0x"+strconv.FormatInt(int64(i%0xffff), 16)+"\n")
		put(p+"/class", "0x030000\n")
		put(p+"/uevent", "DRIVER="+huge[:8192]+"\n")
	}
	var cpuinfo strings.Builder
	for i := range 300 {
		cpuinfo.WriteString("processor : " + strconv.Itoa(i) + "\nphysical id : " + strconv.Itoa(i) + "\nmodel name : " + huge[:4096] + "\nflags : " + strings.Repeat("f ", 5000) + "\n\n")
	}
	put("proc/cpuinfo", cpuinfo.String())
	put("proc/meminfo", "MemTotal: 18446744073709551615 kB\n")
	if err := syscall.Mkfifo(filepath.Join(root, "sys/class/dmi/id/product_name"), 0o644); err != nil {
		if err := os.MkdirAll(filepath.Join(root, "sys/class/dmi/id"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(root, "sys/class/dmi/id/product_name"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("outside the tree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "sys/class/dmi/id/product_serial")); err != nil {
		t.Fatal(err)
	}

	a, err := Collect(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxBytes {
		t.Errorf("inventory is %d bytes as JSON; the cap is %d", len(b), MaxBytes)
	}
	if len(a.BlockDevices) > MaxBlockDevices || len(a.NetworkInterfaces) > MaxNetworkInterfaces ||
		len(a.PCIDevices) > MaxPCIDevices || len(a.GPUDevices) > MaxGPUDevices || len(a.CPU.Processors) > MaxProcessors {
		t.Errorf("lists over their caps: %d disks, %d NICs, %d PCI, %d GPUs, %d processors",
			len(a.BlockDevices), len(a.NetworkInterfaces), len(a.PCIDevices), len(a.GPUDevices), len(a.CPU.Processors))
	}
	for _, s := range allStrings(a) {
		if len(s) > MaxString {
			t.Fatalf("a %d-byte string; the cap is %d", len(s), MaxString)
		}
		if strings.ContainsAny(s, "\x00\x01\ufffd") {
			t.Fatalf("string %q keeps control characters or invalid UTF-8", s)
		}
	}
	for _, want := range []string{"blockDevices", "networkInterfaces", "pciDevices", "gpuDevices", "cpu.processors"} {
		if !slices.Contains(a.Anvil.Truncated, want) {
			t.Errorf("truncated = %v; want it to name %s", a.Anvil.Truncated, want)
		}
	}
	if a.Product != nil {
		t.Errorf("product = %+v; a FIFO and a link out of the tree are no facts", a.Product)
	}
	if a.Anvil.MemoryBytes != 0 {
		t.Errorf("memoryBytes = %d from a MemTotal that overflows; want none", a.Anvil.MemoryBytes)
	}
}

// allStrings is every string in a, through its JSON.
func allStrings(a *model.Attributes) []string {
	b, _ := json.Marshal(a)
	var v any
	_ = json.Unmarshal(b, &v)
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// fit halves the lists that take the most room until the whole fits.
func TestFit(t *testing.T) {
	a := &model.Attributes{Anvil: &model.AnvilAttributes{}}
	long := strings.Repeat("x", MaxString)
	for range 500 {
		a.BlockDevices = append(a.BlockDevices, model.BlockDevice{Name: "sdx", Model: long, SerialNumber: long})
		a.Anvil.BlockDevices = append(a.Anvil.BlockDevices, model.AnvilBlockDevice{Name: "sdx"})
	}
	a.NetworkInterfaces = []model.NetworkInterface{{Name: "eth0"}}
	fit(a)
	if n := jsonSize(a); n > MaxBytes {
		t.Errorf("after fit %d bytes; want at most %d", n, MaxBytes)
	}
	if len(a.BlockDevices) == 0 || len(a.BlockDevices) != len(a.Anvil.BlockDevices) {
		t.Errorf("fit left %d disks and %d of Anvil's additions; want some, the same number", len(a.BlockDevices), len(a.Anvil.BlockDevices))
	}
	if len(a.NetworkInterfaces) != 1 || !slices.Equal(a.Anvil.Truncated, []string{"blockDevices"}) {
		t.Errorf("fit cut %v, left %d NICs; want only the disks cut", a.Anvil.Truncated, len(a.NetworkInterfaces))
	}
}

func TestHumanBytes(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want string
	}{{0, "0B"}, {1023, "1023B"}, {1024, "1KB"}, {1535, "1KB"}, {1536, "2KB"}, {8 << 30, "8GB"},
		{2014252 << 10, "2GB"}, {499558383616, "465GB"}, {1<<64 - 1, "16EB"}} {
		if got := HumanBytes(tc.in); got != tc.want {
			t.Errorf("HumanBytes(%d) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestNaturalCompare(t *testing.T) {
	names := []string{"eth10", "eth2", "nvme10n1", "nvme2n1", "sdb", "sda", "eth02"}
	slices.SortFunc(names, naturalCompare)
	want := []string{"eth02", "eth2", "eth10", "nvme2n1", "nvme10n1", "sda", "sdb"}
	if !slices.Equal(names, want) {
		t.Errorf("sorted %v; want %v", names, want)
	}
}

// scripts/capture-hwinfo.sh copies every file Collect reads: this
// machine's inventory from / and from its capture are the same.
func TestCaptureScriptCopiesWhatCollectReads(t *testing.T) {
	testtool.RequireBinary(t, "bash", "bash")
	if _, err := os.Stat("/sys/block"); err != nil {
		testtool.Need(t, "a Linux /sys")
	}
	dest := t.TempDir()
	cmd := exec.Command("bash", "../../scripts/capture-hwinfo.sh", dest)
	cmd.Env = append(os.Environ(), "CAPTURE_PCI_IDS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("capture-hwinfo.sh: %v\n%s", err, out)
	}
	live, err := Collect("/")
	if err != nil {
		t.Fatal(err)
	}
	captured, err := Collect(dest)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := json.MarshalIndent(live, "", " ")
	c, _ := json.MarshalIndent(captured, "", " ")
	if !bytes.Equal(l, c) {
		t.Errorf("from /:\n%s\nfrom the capture:\n%s", l, c)
	}
}

func TestSecureBootState(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{[]byte{6, 0, 0, 0, 1}, "enabled"},
		{[]byte{6, 0, 0, 0, 0}, "disabled"},
		{[]byte{6, 0, 0, 0}, ""},       // no data byte
		{[]byte{6, 0, 0, 0, 1, 1}, ""}, // not a one-byte variable
		{nil, ""},
	} {
		if got := SecureBootState(tc.in); got != tc.want {
			t.Errorf("SecureBootState(%v) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
