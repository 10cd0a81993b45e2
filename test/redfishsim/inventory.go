package redfishsim

import (
	"fmt"
	"net/http"
	"strconv"
)

// Inventory is what a system's BMC says of its hardware: the
// ComputerSystem's identity, and its Processors, Memory, Storage (one
// subsystem, "1", holding every drive) and EthernetInterfaces collections.
// The ComputerSystem's ProcessorSummary and MemorySummary are summed from
// the lists.
type Inventory struct {
	Manufacturer, Model, SerialNumber, UUID, SKU, BiosVersion string
	Processors                                                []Processor
	DIMMs                                                     []DIMM
	Drives                                                    []Drive
	NICs                                                      []NIC
}

// Processor is a member of Processors.
type Processor struct {
	Socket, Manufacturer, Model string
	Cores, Threads              int
}

// DIMM is a member of Memory; CapacityMiB 0 is an empty slot.
type DIMM struct {
	Locator, Type, Manufacturer, PartNumber, SerialNumber string
	CapacityMiB, SpeedMHz                                 int
}

// Drive is a drive of Storage/1; MediaType is HDD, SSD or SMR.
type Drive struct {
	Model, SerialNumber, MediaType string
	CapacityBytes                  int64
}

// NIC is a member of EthernetInterfaces; LinkStatus is LinkUp, LinkDown or
// NoLink.
type NIC struct {
	MAC, LinkStatus string
	SpeedMbps       int
}

// ExampleInventory is a server as its BMC describes it: a Dell PowerEdge
// R640 with two sockets, three DIMMs and an empty slot, two drives, two
// NICs (one without a link). The tests' and `redfishsim -inventory`'s.
func ExampleInventory() *Inventory {
	return &Inventory{
		Manufacturer: "Dell Inc.", Model: "PowerEdge R640", SerialNumber: "7XK2Q53",
		UUID: "4C4C4544-0058-4B10-8032-B7C04F513533", SKU: "7XK2Q53", BiosVersion: "2.19.1",
		Processors: []Processor{
			{Socket: "CPU.Socket.1", Manufacturer: "Intel", Model: "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz", Cores: 20, Threads: 40},
			{Socket: "CPU.Socket.2", Manufacturer: "Intel", Model: "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz", Cores: 20, Threads: 40},
		},
		DIMMs: []DIMM{
			{Locator: "A1", Type: "DDR4", Manufacturer: "Hynix", PartNumber: "HMA84GR7CJR4N-XN", SerialNumber: "3A1F22C1", CapacityMiB: 32768, SpeedMHz: 2933},
			{Locator: "A2", Type: "DDR4", Manufacturer: "Hynix", PartNumber: "HMA84GR7CJR4N-XN", SerialNumber: "3A1F22C2", CapacityMiB: 32768, SpeedMHz: 2933},
			{Locator: "A3"},
			{Locator: "B1", Type: "DDR4", Manufacturer: "Hynix", PartNumber: "HMA84GR7CJR4N-XN", SerialNumber: "3A1F22C3", CapacityMiB: 32768, SpeedMHz: 2933},
		},
		Drives: []Drive{
			{Model: "MZ7KH480HAHQ0D3", SerialNumber: "S47MNY0M123456", MediaType: "SSD", CapacityBytes: 480103981056},
			{Model: "ST2000NM0055", SerialNumber: "ZC20ABCD", MediaType: "HDD", CapacityBytes: 2000398934016},
		},
		NICs: []NIC{
			{MAC: "E4:43:4B:1A:2B:3C", LinkStatus: "LinkUp", SpeedMbps: 10000},
			{MAC: "E4:43:4B:1A:2B:3D", LinkStatus: "LinkDown"},
		},
	}
}

// inventoryFields adds the inventory's properties and links to a
// ComputerSystem's body.
func inventoryFields(body map[string]any, uri string, inv *Inventory) {
	body["Manufacturer"], body["Model"], body["SerialNumber"] = inv.Manufacturer, inv.Model, inv.SerialNumber
	body["UUID"], body["SKU"], body["BiosVersion"] = inv.UUID, inv.SKU, inv.BiosVersion
	cpuModel := ""
	if len(inv.Processors) > 0 {
		cpuModel = inv.Processors[0].Model
	}
	body["ProcessorSummary"] = map[string]any{"Count": len(inv.Processors), "Model": cpuModel}
	mib := 0
	for _, d := range inv.DIMMs {
		mib += d.CapacityMiB
	}
	body["MemorySummary"] = map[string]any{"TotalSystemMemoryGiB": float64(mib) / 1024}
	for _, c := range []string{"Processors", "Memory", "Storage", "EthernetInterfaces"} {
		body[c] = link(uri + "/" + c)
	}
}

// inventoryRoute serves Systems/{id}/{collection}[/...]; parts starts
// with the collection's name.
func inventoryRoute(w http.ResponseWriter, r *http.Request, sysID string, inv *Inventory, parts []string) {
	uri := root + "/Systems/" + sysID + "/" + parts[0]
	if inv == nil || r.Method != http.MethodGet {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", uri))
		return
	}
	n := map[string]int{"Processors": len(inv.Processors), "Memory": len(inv.DIMMs), "EthernetInterfaces": len(inv.NICs), "Storage": 1}[parts[0]]
	if len(parts) == 1 {
		members := make([]map[string]string, 0, n)
		for i := range n {
			members = append(members, link(uri+"/"+strconv.Itoa(i+1)))
		}
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": uri, "@odata.type": "#" + parts[0] + "Collection." + parts[0] + "Collection",
			"Name": parts[0] + " Collection", "Members": members, "Members@odata.count": n})
		return
	}
	i, err := strconv.Atoi(parts[1])
	if err != nil || i < 1 || i > n {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s/%s was not found.", uri, parts[1]))
		return
	}
	uri += "/" + parts[1]
	id := parts[1]
	body := map[string]any{"@odata.id": uri, "Id": id, "Name": parts[0] + " " + id}
	switch {
	case parts[0] == "Processors" && len(parts) == 2:
		p := inv.Processors[i-1]
		body["@odata.type"] = "#Processor.v1_18_0.Processor"
		body["ProcessorType"], body["Socket"], body["Manufacturer"], body["Model"] = "CPU", p.Socket, p.Manufacturer, p.Model
		body["TotalCores"], body["TotalThreads"] = p.Cores, p.Threads
	case parts[0] == "Memory" && len(parts) == 2:
		d := inv.DIMMs[i-1]
		body["@odata.type"] = "#Memory.v1_17_0.Memory"
		body["DeviceLocator"], body["MemoryDeviceType"], body["CapacityMiB"], body["OperatingSpeedMhz"] = d.Locator, d.Type, d.CapacityMiB, d.SpeedMHz
		body["Manufacturer"], body["PartNumber"], body["SerialNumber"] = d.Manufacturer, d.PartNumber, d.SerialNumber
		if d.CapacityMiB == 0 {
			body["Status"] = map[string]string{"State": "Absent"}
		}
	case parts[0] == "EthernetInterfaces" && len(parts) == 2:
		e := inv.NICs[i-1]
		body["@odata.type"] = "#EthernetInterface.v1_12_0.EthernetInterface"
		body["MACAddress"], body["PermanentMACAddress"], body["SpeedMbps"], body["LinkStatus"] = e.MAC, e.MAC, e.SpeedMbps, e.LinkStatus
	case parts[0] == "Storage" && len(parts) == 2:
		drives := make([]map[string]string, 0, len(inv.Drives))
		for j := range inv.Drives {
			drives = append(drives, link(uri+"/Drives/"+strconv.Itoa(j+1)))
		}
		body["@odata.type"] = "#Storage.v1_15_0.Storage"
		body["Drives"], body["Drives@odata.count"] = drives, len(drives)
	case parts[0] == "Storage" && len(parts) == 4 && parts[2] == "Drives":
		j, err := strconv.Atoi(parts[3])
		if err != nil || j < 1 || j > len(inv.Drives) {
			redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", "No such drive.")
			return
		}
		d := inv.Drives[j-1]
		body = map[string]any{"@odata.id": uri + "/Drives/" + parts[3], "@odata.type": "#Drive.v1_17_0.Drive",
			"Id": parts[3], "Name": "Drive " + parts[3], "Model": d.Model, "SerialNumber": d.SerialNumber,
			"MediaType": d.MediaType, "CapacityBytes": d.CapacityBytes}
	default:
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", "The resource was not found.")
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// Requests is the number of requests the service has answered.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}
