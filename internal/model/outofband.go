package model

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// OutOfBand is what a machine's BMC says of it (a Redfish ComputerSystem
// and its Processors, Memory, Storage drives and EthernetInterfaces), kept
// as status.attributes.outOfBand. It is Anvil's addition inside
// Tinkerbell's attributes: the BMC poller (internal/bmc) writes it and
// nothing else of the attributes, the agent's report writes everything
// else and never it, so neither erases the other.
type OutOfBand struct {
	Source       OutOfBandSource `json:"source"`
	Manufacturer string          `json:"manufacturer,omitempty"`
	Model        string          `json:"model,omitempty"`
	SerialNumber string          `json:"serialNumber,omitempty"`
	// UUID is the system's UUID, lower case (SMBIOS's, as the agent's
	// anvil.uuid: the two are compared).
	UUID        string `json:"uuid,omitempty"`
	SKU         string `json:"sku,omitempty"`
	BIOSVersion string `json:"biosVersion,omitempty"`
	// PowerState is the system's Redfish PowerState when it was read
	// ("On", "Off", ...): a snapshot, the Machine's status.powerState is
	// the current one.
	PowerState         string               `json:"powerState,omitempty"`
	ProcessorSummary   *OOBProcessorSummary `json:"processorSummary,omitempty"`
	MemorySummary      *OOBMemorySummary    `json:"memorySummary,omitempty"`
	Processors         []OOBProcessor       `json:"processors,omitempty"`
	Memory             []OOBMemory          `json:"memory,omitempty"`
	Drives             []OOBDrive           `json:"drives,omitempty"`
	EthernetInterfaces []OOBEthernet        `json:"ethernetInterfaces,omitempty"`
	// Truncated names each list or string cut short to stay within the
	// caps (OOBMaxItems, OOBMaxString), when any.
	Truncated []string `json:"truncated,omitempty"`
}

// OutOfBandSource says where and when the out-of-band inventory was read.
type OutOfBandSource struct {
	// Machine is the name of the Machine (bmc.tinkerbell.org, the
	// Hardware's spec.bmcRef) whose BMC answered.
	Machine string `json:"machine"`
	// Provider is the protocol it was read with ("redfish").
	Provider string `json:"provider"`
	// ReadAt is when this content was first read: a read that finds the
	// same writes nothing, so it is not refreshed by each read.
	ReadAt time.Time `json:"readAt"`
}

// OOBProcessorSummary is the system's ProcessorSummary.
type OOBProcessorSummary struct {
	Count uint32 `json:"count,omitempty"`
	Model string `json:"model,omitempty"`
}

// OOBMemorySummary is the system's MemorySummary.
type OOBMemorySummary struct {
	TotalGiB float64 `json:"totalGiB,omitempty"`
}

// OOBProcessor is one member of the system's Processors.
type OOBProcessor struct {
	Socket       string `json:"socket,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	Cores        uint32 `json:"cores,omitempty"`
	Threads      uint32 `json:"threads,omitempty"`
}

// OOBMemory is one member of the system's Memory (a DIMM).
type OOBMemory struct {
	Locator      string `json:"locator,omitempty"`
	Type         string `json:"type,omitempty"`
	CapacityMiB  uint64 `json:"capacityMiB,omitempty"`
	SpeedMHz     uint32 `json:"speedMHz,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	PartNumber   string `json:"partNumber,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
}

// OOBDrive is one drive of the system's Storage.
type OOBDrive struct {
	Model         string `json:"model,omitempty"`
	SerialNumber  string `json:"serialNumber,omitempty"`
	CapacityBytes uint64 `json:"capacityBytes,omitempty"`
	// MediaType is Redfish's: HDD, SSD or SMR.
	MediaType string `json:"mediaType,omitempty"`
}

// OOBEthernet is one member of the system's EthernetInterfaces.
type OOBEthernet struct {
	ID        string `json:"id,omitempty"`
	MAC       string `json:"mac,omitempty"`
	SpeedMbps uint32 `json:"speedMbps,omitempty"`
	// LinkStatus is Redfish's: LinkUp, LinkDown, NoLink.
	LinkStatus string `json:"linkStatus,omitempty"`
}

// Caps of an OutOfBand, in the spirit of internal/hwinfo's: a BMC is
// trusted to describe its machine, not to size a Hardware object. 64 of
// each list is more than any one server has (DIMM slots included); 256
// bytes holds any model or serial number.
const (
	OOBMaxItems  = 64
	OOBMaxString = 256
)

// Bound cuts o's lists to OOBMaxItems and its strings to OOBMaxString
// bytes (on a UTF-8 boundary), naming in Truncated each list or field it
// cut.
func (o *OutOfBand) Bound() {
	var cut []string
	str := func(name string, s *string) {
		if len(*s) <= OOBMaxString {
			return
		}
		n := OOBMaxString
		for n > 0 && !utf8.RuneStart((*s)[n]) {
			n--
		}
		*s = (*s)[:n]
		cut = append(cut, name)
	}
	for _, f := range []struct {
		name string
		s    *string
	}{{"source.machine", &o.Source.Machine}, {"source.provider", &o.Source.Provider},
		{"manufacturer", &o.Manufacturer}, {"model", &o.Model}, {"serialNumber", &o.SerialNumber},
		{"uuid", &o.UUID}, {"sku", &o.SKU}, {"biosVersion", &o.BIOSVersion}, {"powerState", &o.PowerState}} {
		str(f.name, f.s)
	}
	if o.ProcessorSummary != nil {
		str("processorSummary.model", &o.ProcessorSummary.Model)
	}
	if len(o.Processors) > OOBMaxItems {
		o.Processors, cut = o.Processors[:OOBMaxItems], append(cut, "processors")
	}
	for i := range o.Processors {
		p := &o.Processors[i]
		for _, s := range []*string{&p.Socket, &p.Manufacturer, &p.Model} {
			str("processors[].strings", s)
		}
	}
	if len(o.Memory) > OOBMaxItems {
		o.Memory, cut = o.Memory[:OOBMaxItems], append(cut, "memory")
	}
	for i := range o.Memory {
		m := &o.Memory[i]
		for _, s := range []*string{&m.Locator, &m.Type, &m.Manufacturer, &m.PartNumber, &m.SerialNumber} {
			str("memory[].strings", s)
		}
	}
	if len(o.Drives) > OOBMaxItems {
		o.Drives, cut = o.Drives[:OOBMaxItems], append(cut, "drives")
	}
	for i := range o.Drives {
		d := &o.Drives[i]
		for _, s := range []*string{&d.Model, &d.SerialNumber, &d.MediaType} {
			str("drives[].strings", s)
		}
	}
	if len(o.EthernetInterfaces) > OOBMaxItems {
		o.EthernetInterfaces, cut = o.EthernetInterfaces[:OOBMaxItems], append(cut, "ethernetInterfaces")
	}
	for i := range o.EthernetInterfaces {
		e := &o.EthernetInterfaces[i]
		for _, s := range []*string{&e.ID, &e.MAC, &e.LinkStatus} {
			str("ethernetInterfaces[].strings", s)
		}
	}
	for _, c := range cut {
		if !slices.Contains(o.Truncated, c) {
			o.Truncated = append(o.Truncated, c)
		}
	}
}

// SameContent reports whether o and p say the same of the machine,
// ignoring when each was read.
func (o *OutOfBand) SameContent(p *OutOfBand) bool {
	if o == nil || p == nil {
		return o == p
	}
	a, b := *o, *p
	a.Source.ReadAt, b.Source.ReadAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// IdentityMismatch compares what the agent found (SMBIOS's system serial
// number and UUID) with what the BMC says (outOfBand), where both say
// something, and describes each difference ("serial number: agent X, BMC
// Y"). A difference means the Hardware's spec.bmcRef names another
// machine's BMC, and power actions would hit that machine.
func (a *Attributes) IdentityMismatch() []string {
	if a == nil || a.OutOfBand == nil {
		return nil
	}
	var out []string
	diff := func(what, agent, bmc string) {
		agent, bmc = strings.TrimSpace(agent), strings.TrimSpace(bmc)
		if agent != "" && bmc != "" && !strings.EqualFold(agent, bmc) {
			out = append(out, fmt.Sprintf("%s: agent %q, BMC %q", what, agent, bmc))
		}
	}
	if a.Product != nil {
		diff("serial number", a.Product.SerialNumber, a.OutOfBand.SerialNumber)
	}
	if a.Anvil != nil {
		diff("UUID", a.Anvil.UUID, a.OutOfBand.UUID)
	}
	return out
}
