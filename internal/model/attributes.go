package model

// Attributes is what a machine's agent found out about its hardware, in
// the JSON shape of Tinkerbell's agent attributes (tink-agent's
// AgentAttributes as Tinkerbell keeps them on a Hardware: cpu, memory,
// blockDevices, networkInterfaces, pciDevices, gpuDevices, chassis, bios,
// baseboard, product), so that tools and templates written for Tinkerbell
// read it here too. What Tinkerbell's shape has no field for (firmware
// mode, Secure Boot, TPM, the system UUID, exact sizes, NIC drivers and
// link state) is under Anvil alone, never added to Tinkerbell's objects;
// what the BMC says (OutOfBand) is beside it.
type Attributes struct {
	CPU               *CPUAttributes     `json:"cpu,omitempty"`
	Memory            *MemoryAttributes  `json:"memory,omitempty"`
	BlockDevices      []BlockDevice      `json:"blockDevices,omitempty"`
	NetworkInterfaces []NetworkInterface `json:"networkInterfaces,omitempty"`
	PCIDevices        []PCIDevice        `json:"pciDevices,omitempty"`
	GPUDevices        []PCIDevice        `json:"gpuDevices,omitempty"`
	Chassis           *Chassis           `json:"chassis,omitempty"`
	BIOS              *BIOS              `json:"bios,omitempty"`
	Baseboard         *Baseboard         `json:"baseboard,omitempty"`
	Product           *Product           `json:"product,omitempty"`
	// Anvil holds Anvil's additions. Anvil's.
	Anvil *AnvilAttributes `json:"anvil,omitempty"`
	// OutOfBand is what the machine's BMC says of it, read by the BMC
	// poller through the Hardware's spec.bmcRef. Anvil's; the one part
	// of the attributes the agent's report does not write.
	OutOfBand *OutOfBand `json:"outOfBand,omitempty"`
}

// CPUAttributes sums the machine's processors (packages).
type CPUAttributes struct {
	TotalCores   uint32      `json:"totalCores,omitempty"`
	TotalThreads uint32      `json:"totalThreads,omitempty"`
	Processors   []Processor `json:"processors,omitempty"`
}

// Processor is one physical package (socket).
type Processor struct {
	ID      uint32 `json:"id,omitempty"`
	Cores   uint32 `json:"cores,omitempty"`
	Threads uint32 `json:"threads,omitempty"`
	Vendor  string `json:"vendor,omitempty"`
	Model   string `json:"model,omitempty"`
	// Capabilities are the CPU's flags (x86) or features (Arm).
	Capabilities []string `json:"capabilities,omitempty"`
}

// MemoryAttributes are sizes as human-readable strings ("16GB"), as
// Tinkerbell's agent reports them; AnvilAttributes.MemoryBytes is exact.
type MemoryAttributes struct {
	Total  string `json:"total,omitempty"`
	Usable string `json:"usable,omitempty"`
}

// BlockDevice is one disk.
type BlockDevice struct {
	Name string `json:"name,omitempty"`
	// ControllerType is how the disk is attached: SCSI, IDE, virtio, MMC,
	// NVMe or Unknown.
	ControllerType string `json:"controllerType,omitempty"`
	// DriveType is HDD, SSD, ODD (optical), FDD or Unknown.
	DriveType         string `json:"driveType,omitempty"`
	Size              string `json:"size,omitempty"`
	PhysicalBlockSize string `json:"physicalBlockSize,omitempty"`
	Vendor            string `json:"vendor,omitempty"`
	Model             string `json:"model,omitempty"`
	WWN               string `json:"wwn,omitempty"`
	SerialNumber      string `json:"serialNumber,omitempty"`
}

// NetworkInterface is one NIC.
type NetworkInterface struct {
	Name string `json:"name,omitempty"`
	MAC  string `json:"mac,omitempty"`
	// Speed is the link speed ("1000Mb/s"), empty when the link is down.
	Speed               string   `json:"speed,omitempty"`
	EnabledCapabilities []string `json:"enabledCapabilities,omitempty"`
}

// PCIDevice is one PCI function (gpuDevices: those of display class):
// names from pci.ids when the machine has one, else the IDs ("0x8086").
type PCIDevice struct {
	Vendor  string `json:"vendor,omitempty"`
	Product string `json:"product,omitempty"`
	Class   string `json:"class,omitempty"`
	Driver  string `json:"driver,omitempty"`
}

// Chassis is SMBIOS's chassis (type 3).
type Chassis struct {
	Serial string `json:"serial,omitempty"`
	Vendor string `json:"vendor,omitempty"`
}

// BIOS is SMBIOS's firmware information (type 0).
type BIOS struct {
	Vendor      string `json:"vendor,omitempty"`
	Version     string `json:"version,omitempty"`
	ReleaseDate string `json:"releaseDate,omitempty"`
}

// Baseboard is SMBIOS's baseboard (type 2).
type Baseboard struct {
	Vendor       string `json:"vendor,omitempty"`
	Product      string `json:"product,omitempty"`
	Version      string `json:"version,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
}

// Product is SMBIOS's system (type 1).
type Product struct {
	Name         string `json:"name,omitempty"`
	Vendor       string `json:"vendor,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
}

// AnvilAttributes are the facts Tinkerbell's attributes have no field for.
type AnvilAttributes struct {
	// UUID is SMBIOS's system UUID, lower case.
	UUID string `json:"uuid,omitempty"`
	// Firmware is "uefi" or "bios".
	Firmware string `json:"firmware,omitempty"`
	// SecureBoot is "enabled" or "disabled" under UEFI (from the
	// SecureBoot EFI variable), empty when unknown.
	SecureBoot string `json:"secureBoot,omitempty"`
	// TPM is the version of the machine's TPM ("2.0", "1.2"), "present"
	// when the version is unknown, empty when there is none.
	TPM string `json:"tpm,omitempty"`
	// MemoryBytes is the memory the kernel manages (MemTotal).
	MemoryBytes       uint64              `json:"memoryBytes,omitempty"`
	BlockDevices      []AnvilBlockDevice  `json:"blockDevices,omitempty"`
	NetworkInterfaces []AnvilNetInterface `json:"networkInterfaces,omitempty"`
	PCIDevices        []AnvilPCIDevice    `json:"pciDevices,omitempty"`
	// Truncated names each list or string the collector cut short to keep
	// within its caps ("blockDevices", "pciDevices", ...), when any.
	Truncated []string `json:"truncated,omitempty"`
}

// AnvilBlockDevice adds to the BlockDevice of the same name.
type AnvilBlockDevice struct {
	Name       string `json:"name"`
	SizeBytes  uint64 `json:"sizeBytes"`
	Rotational bool   `json:"rotational,omitempty"`
	Removable  bool   `json:"removable,omitempty"`
}

// AnvilNetInterface adds to the NetworkInterface of the same name.
type AnvilNetInterface struct {
	Name   string `json:"name"`
	Driver string `json:"driver,omitempty"`
	// State is the kernel's operstate ("up", "down", ...).
	State string `json:"state,omitempty"`
	// Carrier reports whether the link has a carrier.
	Carrier bool `json:"carrier,omitempty"`
}

// AnvilPCIDevice is a PCI function by address and IDs (lower-case hex
// without 0x), whether or not pci.ids named it.
type AnvilPCIDevice struct {
	Address  string `json:"address"`
	VendorID string `json:"vendorID,omitempty"`
	DeviceID string `json:"deviceID,omitempty"`
	ClassID  string `json:"classID,omitempty"`
}
