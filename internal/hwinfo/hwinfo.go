// Package hwinfo collects a machine's hardware inventory from the files the
// Linux kernel shows about it, in the shape of Tinkerbell's agent
// attributes (model.Attributes): what the agent sends with its first call
// on each boot.
//
// It owns the reading of those files and nothing else: CPUs and memory
// from /proc (cpuinfo, meminfo), disks from /sys/block, NICs from
// /sys/class/net, PCI devices (and GPUs, those of display class) from
// /sys/bus/pci/devices with names from a pci.ids when the machine has one,
// SMBIOS facts from /sys/class/dmi/id, UEFI and Secure Boot from
// /sys/firmware/efi, the TPM from /sys/class/tpm, and the udev database
// (/run/udev/data) for a disk serial or WWN sysfs lacks, when it exists.
//
// Everything is read below a root directory ("/" on a machine, a recorded
// tree in tests) through os.Root, so a symbolic link cannot lead out of
// it. The boot environment has no udev, so the readers take sysfs first.
// These are our own small readers, not a library's (github.com/jaypipes/ghw
// resolves, but reads files and directories whole, takes disk serials from
// the udev database the boot environment has not got, and fetches pci.ids
// from the network when the machine has none): a tree that lies or is huge
// must give a bounded answer, so every read is capped where it is made.
//
// The caps (a fact beyond them is left out and the list named in
// Anvil.Truncated): MaxString bytes per string, the Max* counts per list,
// and MaxBytes for the whole result as JSON, kept by halving
// the longest lists.
package hwinfo

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/anvilproj/anvil/internal/model"
)

// Caps on what Collect returns, whatever the tree holds.
const (
	// MaxString bounds each string (a model name, a serial).
	MaxString = 256
	// MaxBlockDevices, MaxNetworkInterfaces, MaxPCIDevices, MaxGPUDevices
	// and MaxProcessors bound their lists, taken in natural name order (eth2 before eth10).
	MaxBlockDevices      = 128
	MaxNetworkInterfaces = 64
	MaxPCIDevices        = 256
	MaxGPUDevices        = 16
	MaxProcessors        = 16
	// MaxCapabilities bounds each processor's flags (an x86 CPU has about
	// 150 today).
	MaxCapabilities = 256
	// MaxBytes bounds the result as JSON: the server keeps at most 64 KiB
	// of attributes on a Hardware.
	MaxBytes = 48 << 10
)

// Caps on the reads themselves.
const (
	// maxAttrFile bounds the read of one sysfs attribute file.
	maxAttrFile = 4 << 10
	// maxProcFile bounds the read of /proc/cpuinfo (about 1.5 KiB per
	// logical CPU) and /proc/meminfo.
	maxProcFile = 16 << 20
	// maxPCIIDs bounds the scan of pci.ids (1.5 MB today).
	maxPCIIDs = 32 << 20
	// maxLine bounds one line of cpuinfo or pci.ids.
	maxLine = 64 << 10
	// maxDirEntries bounds the entries read of one directory (sysfs has
	// one per device), before they are sorted and the list caps applied.
	maxDirEntries = 4096
)

// Where the facts are, relative to the root.
const (
	cpuinfoPath = "proc/cpuinfo"
	meminfoPath = "proc/meminfo"
	blockDir    = "sys/block"
	netDir      = "sys/class/net"
	pciDir      = "sys/bus/pci/devices"
	dmiDir      = "sys/class/dmi/id"
	efiDir      = "sys/firmware/efi"
	dmiFWDir    = "sys/firmware/dmi"
	tpmDir      = "sys/class/tpm"
	udevDataDir = "run/udev/data"
	efiVarsDir  = "sys/firmware/efi/efivars"
)

// pciIDsPaths are where distributions keep pci.ids, in the order tried.
var pciIDsPaths = []string{"usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids", "usr/share/pci.ids"}

// sectorSize is the unit of /sys/block/X/size, whatever the disk's own.
const sectorSize = 512

// Collect reads the inventory of the machine whose files are below root.
// A fact it cannot read is left out; the error is only for a root that
// cannot be opened. Safe for concurrent use.
func Collect(root string) (*model.Attributes, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("hardware inventory: %w", err)
	}
	defer r.Close()
	c := &collector{root: r, truncated: map[string]bool{}}
	a := &model.Attributes{Anvil: &model.AnvilAttributes{}}
	c.cpu(a)
	c.memory(a)
	c.blocks(a)
	c.network(a)
	c.pci(a)
	c.dmi(a)
	c.firmware(a)
	for k := range c.truncated {
		a.Anvil.Truncated = append(a.Anvil.Truncated, k)
	}
	slices.Sort(a.Anvil.Truncated)
	fit(a)
	return a, nil
}

// collector reads one tree.
type collector struct {
	root *os.Root
	// truncated names what a cap cut short.
	truncated map[string]bool
}

// open opens a regular file for reading, refusing anything else (a FIFO
// in a lying tree would block the read forever).
func (c *collector) open(name string) (*os.File, error) {
	f, err := c.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	return f, nil
}

// read returns at most max bytes of a file.
func (c *collector) read(name string, max int64) ([]byte, error) {
	f, err := c.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// str returns a sysfs attribute as a clean string, or "".
func (c *collector) str(name, what string) string {
	b, err := c.read(name, maxAttrFile)
	if err != nil {
		return ""
	}
	s, ok := cleanString(string(b))
	if !ok {
		c.truncated[what] = true
	}
	return s
}

// uint reads a sysfs attribute holding a decimal number.
func (c *collector) uint(name string) (uint64, bool) {
	b, err := c.read(name, maxAttrFile)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// exists reports whether name is there (a link counts, followed or not).
func (c *collector) exists(name string) bool {
	_, err := c.root.Lstat(name)
	return err == nil
}

// dir returns the names in a directory, sorted by order, of the first
// maxDirEntries read; what is named in truncated when there were more
// than max.
func (c *collector) dir(name string, max int, what string, order func(a, b string) int) []string {
	f, err := c.root.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	names, err := f.Readdirnames(maxDirEntries)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	if len(names) == maxDirEntries {
		c.truncated[what] = true
	}
	slices.SortFunc(names, order)
	if len(names) > max {
		c.truncated[what] = true
		names = names[:max]
	}
	return names
}

// naturalCompare orders names with their numbers as numbers: eth2
// before eth10, nvme2n1 before nvme10n1. Names whose numbers are equal
// (eth02, eth2) are in byte order, so that any two differ.
func naturalCompare(a, b string) int {
	return cmp.Or(numbersCompare(a, b), strings.Compare(a, b))
}

// numbersCompare is naturalCompare without its tie-break.
func numbersCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Or(len(na)-len(nb), strings.Compare(na, nb)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

// digits is the length of the run of decimal digits s starts with.
func digits(s string) int {
	n := 0
	for n < len(s) && '0' <= s[n] && s[n] <= '9' {
		n++
	}
	return n
}

// cpu fills the processors, one per physical package.
func (c *collector) cpu(a *model.Attributes) {
	b, err := c.read(cpuinfoPath, maxProcFile)
	if err != nil {
		return
	}
	cpus := parseCPUInfo(b)
	if len(cpus) == 0 {
		return
	}
	type pkg struct {
		p     model.Processor
		cores map[string]bool
		said  uint32 // "cpu cores"
	}
	var order []string
	pkgs := map[string]*pkg{}
	for _, l := range cpus {
		p, ok := pkgs[l.pkg]
		if !ok {
			if len(order) == MaxProcessors {
				c.truncated["cpu.processors"] = true
				continue
			}
			id, _ := strconv.ParseUint(l.pkg, 10, 32)
			p = &pkg{cores: map[string]bool{}}
			p.p.ID = uint32(id)
			p.p.Vendor = c.clean(l.vendor, "cpu.vendor")
			p.p.Model = c.clean(l.model, "cpu.model")
			p.p.Capabilities = c.flags(l.flags)
			pkgs[l.pkg] = p
			order = append(order, l.pkg)
		}
		p.p.Threads++
		if l.core != "" {
			p.cores[l.core] = true
		}
		p.said = max(p.said, l.cpuCores)
	}
	a.CPU = &model.CPUAttributes{}
	for _, k := range order {
		p := pkgs[k]
		switch {
		case len(p.cores) > 0:
			p.p.Cores = uint32(len(p.cores))
		case p.said > 0:
			p.p.Cores = p.said
		default: // no topology said (Arm): a core per thread
			p.p.Cores = p.p.Threads
		}
		a.CPU.TotalCores += p.p.Cores
		a.CPU.TotalThreads += p.p.Threads
		a.CPU.Processors = append(a.CPU.Processors, p.p)
	}
}

// clean is cleanString, noting a cut.
func (c *collector) clean(s, what string) string {
	s, ok := cleanString(s)
	if !ok {
		c.truncated[what] = true
	}
	return s
}

// flags splits a flags line into at most MaxCapabilities clean words.
func (c *collector) flags(s string) []string {
	var out []string
	for f := range strings.FieldsSeq(s) {
		if len(out) == MaxCapabilities {
			c.truncated["cpu.capabilities"] = true
			break
		}
		if f = c.clean(f, "cpu.capabilities"); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// memory fills the memory from MemTotal.
func (c *collector) memory(a *model.Attributes) {
	b, err := c.read(meminfoPath, maxProcFile)
	if err != nil {
		return
	}
	n := parseMemInfo(b)
	if n == 0 {
		return
	}
	// The kernel's MemTotal is also the best estimate of the installed
	// memory this can make without SMBIOS's type 17 tables: both fields
	// say it, and MemoryBytes is exact.
	a.Memory = &model.MemoryAttributes{Total: HumanBytes(n), Usable: HumanBytes(n)}
	a.Anvil.MemoryBytes = n
}

// blocks fills the disks: the block devices with a device behind them
// (not loop, ram, zram, device-mapper or md devices).
func (c *collector) blocks(a *model.Attributes) {
	for _, name := range c.dir(blockDir, maxDirEntries, "blockDevices", naturalCompare) {
		if len(a.BlockDevices) == MaxBlockDevices {
			c.truncated["blockDevices"] = true
			break
		}
		d := path.Join(blockDir, name)
		if !c.exists(path.Join(d, "device")) {
			continue
		}
		name = c.clean(name, "blockDevices.name")
		sectors, _ := c.uint(path.Join(d, "size"))
		rotational := c.str(path.Join(d, "queue/rotational"), "blockDevices") == "1"
		bd := model.BlockDevice{
			Name:           name,
			ControllerType: controllerType(name),
			DriveType:      driveType(name, rotational),
			Size:           HumanBytes(sectors * sectorSize),
			Vendor:         c.diskVendor(d, name),
			Model:          c.str(path.Join(d, "device/model"), "blockDevices.model"),
			SerialNumber:   c.diskSerial(d),
			WWN:            c.first("blockDevices.wwn", path.Join(d, "wwid"), path.Join(d, "device/wwid")),
		}
		if pbs, ok := c.uint(path.Join(d, "queue/physical_block_size")); ok {
			bd.PhysicalBlockSize = strconv.FormatUint(pbs, 10)
		}
		if bd.SerialNumber == "" || bd.WWN == "" {
			c.fromUdev(d, &bd)
		}
		a.BlockDevices = append(a.BlockDevices, bd)
		a.Anvil.BlockDevices = append(a.Anvil.BlockDevices, model.AnvilBlockDevice{
			Name:       name,
			SizeBytes:  sectors * sectorSize,
			Rotational: rotational,
			Removable:  c.str(path.Join(d, "removable"), "blockDevices") == "1",
		})
	}
}

// diskVendor is the vendor a SCSI or IDE disk names ("ATA" for a SATA
// disk behind libata). A virtio disk's device/vendor is the virtio
// vendor ID, and an NVMe namespace's device has none: neither names the
// disk's maker.
func (c *collector) diskVendor(d, name string) string {
	switch controllerType(name) {
	case "SCSI", "IDE":
		return c.str(path.Join(d, "device/vendor"), "blockDevices.vendor")
	}
	return ""
}

// first is the first of the attribute files that has a value.
func (c *collector) first(what string, names ...string) string {
	for _, n := range names {
		if s := c.str(n, what); s != "" {
			return s
		}
	}
	return ""
}

// diskSerial is a disk's serial number from sysfs: virtio's serial, NVMe's
// device/serial, or a SCSI or SATA disk's Unit Serial Number VPD page.
func (c *collector) diskSerial(d string) string {
	if s := c.first("blockDevices.serialNumber", path.Join(d, "serial"), path.Join(d, "device/serial")); s != "" {
		return s
	}
	b, err := c.read(path.Join(d, "device/vpd_pg80"), maxAttrFile)
	if err != nil {
		return ""
	}
	return c.clean(parseVPD80(b), "blockDevices.serialNumber")
}

// fromUdev fills a disk's serial and WWN from the udev database, when the
// machine runs udev and sysfs did not say them.
func (c *collector) fromUdev(d string, bd *model.BlockDevice) {
	dev := c.str(path.Join(d, "dev"), "blockDevices")
	if dev == "" || strings.ContainsAny(dev, "/.") {
		return
	}
	b, err := c.read(path.Join(udevDataDir, "b"+dev), maxAttrFile*4)
	if err != nil {
		return
	}
	props := parseKV(b, "E:")
	if bd.SerialNumber == "" {
		bd.SerialNumber = c.clean(props["ID_SERIAL_SHORT"], "blockDevices.serialNumber")
	}
	if bd.WWN == "" {
		w := props["ID_WWN_WITH_EXTENSION"]
		if w == "" {
			w = props["ID_WWN"]
		}
		bd.WWN = c.clean(w, "blockDevices.wwn")
	}
}

// controllerType names how a disk is attached, from its kernel name.
func controllerType(name string) string {
	switch {
	case strings.HasPrefix(name, "nvme"):
		return "NVMe"
	case strings.HasPrefix(name, "vd"), strings.HasPrefix(name, "xvd"):
		return "virtio"
	case strings.HasPrefix(name, "mmcblk"):
		return "MMC"
	case strings.HasPrefix(name, "hd"):
		return "IDE"
	case strings.HasPrefix(name, "sd"), strings.HasPrefix(name, "sr"):
		return "SCSI"
	}
	return "Unknown"
}

// driveType names the kind of drive: optical and floppy by name, else by
// the kernel's rotational flag.
func driveType(name string, rotational bool) string {
	switch {
	case strings.HasPrefix(name, "sr"):
		return "ODD"
	case strings.HasPrefix(name, "fd"):
		return "FDD"
	case rotational:
		return "HDD"
	}
	return "SSD"
}

// network fills the NICs: the interfaces with a device behind them (not
// loopback, bridges, bonds, VLANs or tunnels).
func (c *collector) network(a *model.Attributes) {
	for _, name := range c.dir(netDir, maxDirEntries, "networkInterfaces", naturalCompare) {
		if len(a.NetworkInterfaces) == MaxNetworkInterfaces {
			c.truncated["networkInterfaces"] = true
			break
		}
		d := path.Join(netDir, name)
		if !c.exists(path.Join(d, "device")) {
			continue
		}
		name = c.clean(name, "networkInterfaces.name")
		n := model.NetworkInterface{Name: name, MAC: c.str(path.Join(d, "address"), "networkInterfaces.mac")}
		// speed is -1, or unreadable, while the link is down.
		if s, ok := c.uint(path.Join(d, "speed")); ok && s > 0 && s < 1<<32 {
			n.Speed = strconv.FormatUint(s, 10) + "Mb/s"
		}
		a.NetworkInterfaces = append(a.NetworkInterfaces, n)
		a.Anvil.NetworkInterfaces = append(a.Anvil.NetworkInterfaces, model.AnvilNetInterface{
			Name:    name,
			Driver:  c.driver(path.Join(d, "device")),
			State:   c.str(path.Join(d, "operstate"), "networkInterfaces.state"),
			Carrier: c.str(path.Join(d, "carrier"), "networkInterfaces") == "1",
		})
	}
}

// driver is the name of the driver bound to a device: its uevent's
// DRIVER, else the name its driver link points to.
func (c *collector) driver(dev string) string {
	if b, err := c.read(path.Join(dev, "uevent"), maxAttrFile); err == nil {
		if d := parseKV(b, "")["DRIVER"]; d != "" {
			return c.clean(d, "driver")
		}
	}
	if l, err := c.root.Readlink(path.Join(dev, "driver")); err == nil {
		return c.clean(path.Base(l), "driver")
	}
	return ""
}

// pciDisplayClass is the base class of display controllers (GPUs).
const pciDisplayClass = "03"

// pci fills the PCI devices and, of them, the GPUs.
func (c *collector) pci(a *model.Attributes) {
	type dev struct {
		ids    model.AnvilPCIDevice
		driver string
	}
	var devs []dev
	want := map[string]bool{}
	// Addresses are fixed-width hex: their plain order is the bus order.
	for _, addr := range c.dir(pciDir, maxDirEntries, "pciDevices", strings.Compare) {
		if len(devs) == MaxPCIDevices {
			c.truncated["pciDevices"] = true
			break
		}
		d := path.Join(pciDir, addr)
		v := dev{ids: model.AnvilPCIDevice{
			Address:  c.clean(addr, "pciDevices.address"),
			VendorID: hexID(c.str(path.Join(d, "vendor"), "pciDevices"), 4),
			DeviceID: hexID(c.str(path.Join(d, "device"), "pciDevices"), 4),
			ClassID:  hexID(c.str(path.Join(d, "class"), "pciDevices"), 6),
		}, driver: c.driver(d)}
		if v.ids.VendorID == "" {
			continue // not a PCI function
		}
		want[v.ids.VendorID] = true
		want[v.ids.VendorID+":"+v.ids.DeviceID] = true
		if v.ids.ClassID != "" {
			want[v.ids.ClassID[:2]] = true
		}
		devs = append(devs, v)
	}
	if len(devs) == 0 {
		return
	}
	names := c.pciNames(want)
	for _, v := range devs {
		p := model.PCIDevice{
			Vendor:  or(names.vendors[v.ids.VendorID], v.ids.VendorID),
			Product: or(names.devices[v.ids.VendorID+":"+v.ids.DeviceID], v.ids.DeviceID),
			Driver:  v.driver,
		}
		if v.ids.ClassID != "" {
			base := v.ids.ClassID[:2]
			p.Class = or(names.classes[base], or(pciClasses[base], v.ids.ClassID))
		}
		a.PCIDevices = append(a.PCIDevices, p)
		a.Anvil.PCIDevices = append(a.Anvil.PCIDevices, v.ids)
		if strings.HasPrefix(v.ids.ClassID, pciDisplayClass) {
			if len(a.GPUDevices) == MaxGPUDevices {
				c.truncated["gpuDevices"] = true
				continue
			}
			a.GPUDevices = append(a.GPUDevices, p)
		}
	}
}

// or is s, or def when s is empty.
func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// pciNames reads the names of the wanted IDs from the machine's pci.ids,
// if it has one.
func (c *collector) pciNames(want map[string]bool) pciNames {
	for _, p := range pciIDsPaths {
		f, err := c.open(p)
		if err != nil {
			continue
		}
		defer f.Close()
		sc := bufio.NewScanner(io.LimitReader(f, maxPCIIDs))
		sc.Buffer(make([]byte, 0, 4096), maxLine)
		return parsePCIIDs(sc, want)
	}
	return pciNames{}
}

// pciClasses names the PCI base classes (PCI Code and ID Assignment
// Specification, section 1), for a machine without pci.ids.
var pciClasses = map[string]string{
	"00": "Unclassified device",
	"01": "Mass storage controller",
	"02": "Network controller",
	"03": "Display controller",
	"04": "Multimedia controller",
	"05": "Memory controller",
	"06": "Bridge",
	"07": "Communication controller",
	"08": "Generic system peripheral",
	"09": "Input device controller",
	"0a": "Docking station",
	"0b": "Processor",
	"0c": "Serial bus controller",
	"0d": "Wireless controller",
	"0e": "Intelligent controller",
	"0f": "Satellite communications controller",
	"10": "Encryption controller",
	"11": "Signal processing controller",
	"12": "Processing accelerators",
	"13": "Non-Essential Instrumentation",
	"40": "Coprocessor",
	"ff": "Unassigned class",
}

// dmi fills the SMBIOS facts the kernel shows in /sys/class/dmi/id.
func (c *collector) dmi(a *model.Attributes) {
	get := func(f string) string { return c.str(path.Join(dmiDir, f), "dmi."+f) }
	if bios := (model.BIOS{Vendor: get("bios_vendor"), Version: get("bios_version"), ReleaseDate: get("bios_date")}); bios != (model.BIOS{}) {
		a.BIOS = &bios
	}
	if p := (model.Product{Name: get("product_name"), Vendor: get("sys_vendor"), SerialNumber: get("product_serial")}); p != (model.Product{}) {
		a.Product = &p
	}
	if b := (model.Baseboard{Vendor: get("board_vendor"), Product: get("board_name"), Version: get("board_version"), SerialNumber: get("board_serial")}); b != (model.Baseboard{}) {
		a.Baseboard = &b
	}
	if ch := (model.Chassis{Vendor: get("chassis_vendor"), Serial: get("chassis_serial")}); ch != (model.Chassis{}) {
		a.Chassis = &ch
	}
	a.Anvil.UUID = strings.ToLower(get("product_uuid"))
}

// SecureBootVar is the name efivarfs gives the SecureBoot variable (EFI
// global variable GUID; UEFI 2.x, 3.3 "Globally Defined Variables").
const SecureBootVar = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

// Values of the SecureBoot variable as efivarfs shows it.
const (
	efiVarAttrBytes  = 4 // efivarfs puts the variable's attributes first
	secureBootActive = 1 // the data byte when Secure Boot is on
)

// SecureBootState is "enabled" or "disabled" from the SecureBoot variable
// as efivarfs shows it (b), or "" when b is not one.
func SecureBootState(b []byte) string {
	if len(b) != efiVarAttrBytes+1 {
		return ""
	}
	if b[efiVarAttrBytes] == secureBootActive {
		return "enabled"
	}
	return "disabled"
}

// firmware fills the firmware mode, Secure Boot and the TPM.
func (c *collector) firmware(a *model.Attributes) {
	switch {
	case c.exists(efiDir):
		a.Anvil.Firmware = "uefi"
		if b, err := c.read(path.Join(efiVarsDir, SecureBootVar), maxAttrFile); err == nil {
			a.Anvil.SecureBoot = SecureBootState(b)
		}
	case c.exists(dmiFWDir) || c.exists(dmiDir):
		a.Anvil.Firmware = "bios"
	}
	a.Anvil.TPM = c.tpm()
}

// tpm is the version of the first TPM, "present" when unknown, "" when
// there is none.
func (c *collector) tpm() string {
	tpms := c.dir(tpmDir, 1, "tpm", naturalCompare)
	if len(tpms) == 0 {
		return ""
	}
	d := path.Join(tpmDir, tpms[0])
	switch c.str(path.Join(d, "tpm_version_major"), "tpm") {
	case "2":
		return "2.0"
	case "1":
		return "1.2"
	}
	// Before Linux 5.6 only a TPM 1.2 shows its caps.
	if strings.Contains(c.str(path.Join(d, "device/caps"), "tpm")+c.str(path.Join(d, "caps"), "tpm"), "TCG version: 1.2") {
		return "1.2"
	}
	return "present"
}

// HumanBytes is n in the largest binary unit it fills, rounded to the
// nearest, with the unit names Tinkerbell's agent writes ("16GB",
// "512MB", "100B"): a VM given 2 GiB, of which the kernel keeps some, has
// "2GB".
func HumanBytes(n uint64) string {
	const units = "KMGTPE"
	u := -1
	for i := range len(units) {
		if n>>(10*(i+1)) == 0 {
			break
		}
		u = i
	}
	if u < 0 {
		return strconv.FormatUint(n, 10) + "B"
	}
	shift := 10 * (u + 1)
	v := n>>shift + n>>(shift-1)&1 // the bit below the unit rounds half up
	return strconv.FormatUint(v, 10) + string(units[u]) + "B"
}
