package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/anvilproj/anvil/internal/model"
)

// maxRedfishBody caps one Redfish answer the inventory reads. A system or
// a collection page is a few KiB; a BMC answering more is broken or
// hostile, and the read fails saying so rather than holding it all.
const maxRedfishBody = 4 << 20

// maxStorages caps the Storage subsystems whose drives are read: a
// server has one to a few controllers.
const maxStorages = 16

// The resources the inventory reads, with only the properties it keeps.
// Its own small types rather than gofish's: gofish reads every member of
// a collection (all 10,000 drives a broken BMC lists) and every property,
// where the inventory wants the first few and a handful of each.
type (
	rfLink struct {
		ID string `json:"@odata.id"`
	}
	rfCollection struct {
		Members []rfLink
		Count   *float64 `json:"Members@odata.count"`
	}
	rfSystem struct {
		Manufacturer, Model, SerialNumber, UUID, SKU, BiosVersion, PowerState string
		ProcessorSummary                                                      struct {
			Count *float64
			Model string
		}
		MemorySummary struct {
			TotalSystemMemoryGiB *float64
		}
		Processors, Memory, Storage, EthernetInterfaces rfLink
	}
	rfProcessor struct {
		Socket, Manufacturer, Model string
		TotalCores, TotalThreads    *float64
	}
	rfMemory struct {
		DeviceLocator, MemoryDeviceType, Manufacturer, PartNumber, SerialNumber string
		CapacityMiB, OperatingSpeedMhz                                          *float64
	}
	rfStorage struct {
		Drives []rfLink
	}
	rfDrive struct {
		Model, SerialNumber, MediaType string
		CapacityBytes                  *float64
	}
	rfEthernet struct {
		ID                              string `json:"Id"`
		MACAddress, PermanentMACAddress string
		SpeedMbps                       *float64
		LinkStatus                      string
	}
)

// Inventory implements InventorySession: the chosen ComputerSystem, then
// the first model.OOBMaxItems members of its Processors, Memory and
// EthernetInterfaces, and the first drives of its Storage (the first
// maxStorages subsystems), one request at a time on the session's one
// connection. A collection's further pages (Members@odata.nextLink) are
// not read: the first holds more than the caps on the BMCs seen. Any
// request that fails fails the read, naming the resource: a half
// inventory would look like a machine that lost its disks.
func (s *redfishSession) Inventory(ctx context.Context) (*model.OutOfBand, error) {
	var sys rfSystem
	if err := s.getJSON(ctx, s.system, &sys); err != nil {
		return nil, err
	}
	o := &model.OutOfBand{
		Manufacturer: sys.Manufacturer, Model: sys.Model, SerialNumber: sys.SerialNumber,
		UUID: strings.ToLower(sys.UUID), SKU: sys.SKU, BIOSVersion: sys.BiosVersion, PowerState: sys.PowerState,
	}
	if ps := sys.ProcessorSummary; ps.Count != nil || ps.Model != "" {
		o.ProcessorSummary = &model.OOBProcessorSummary{Count: u32(ps.Count), Model: ps.Model}
	}
	if gib := sys.MemorySummary.TotalSystemMemoryGiB; gib != nil && *gib > 0 && !math.IsInf(*gib, 0) {
		o.MemorySummary = &model.OOBMemorySummary{TotalGiB: *gib}
	}
	truncated := func(name string) { o.Truncated = append(o.Truncated, name) }

	procs, more, err := members[rfProcessor](ctx, s, sys.Processors.ID, model.OOBMaxItems)
	if err != nil {
		return nil, err
	}
	if more {
		truncated("processors")
	}
	for _, p := range procs {
		o.Processors = append(o.Processors, model.OOBProcessor{Socket: p.Socket, Manufacturer: p.Manufacturer,
			Model: p.Model, Cores: u32(p.TotalCores), Threads: u32(p.TotalThreads)})
	}

	dimms, more, err := members[rfMemory](ctx, s, sys.Memory.ID, model.OOBMaxItems)
	if err != nil {
		return nil, err
	}
	if more {
		truncated("memory")
	}
	for _, m := range dimms {
		if m.CapacityMiB == nil || *m.CapacityMiB <= 0 {
			continue // an empty slot: Redfish lists them too
		}
		o.Memory = append(o.Memory, model.OOBMemory{Locator: m.DeviceLocator, Type: m.MemoryDeviceType,
			CapacityMiB: u64(m.CapacityMiB), SpeedMHz: u32(m.OperatingSpeedMhz), Manufacturer: m.Manufacturer,
			PartNumber: m.PartNumber, SerialNumber: m.SerialNumber})
	}

	storages, more, err := members[rfStorage](ctx, s, sys.Storage.ID, maxStorages)
	if err != nil {
		return nil, err
	}
	if more {
		truncated("storage")
	}
drives:
	for _, st := range storages {
		for _, l := range st.Drives {
			if len(o.Drives) == model.OOBMaxItems {
				truncated("drives")
				break drives
			}
			var d rfDrive
			if err := s.getJSON(ctx, l.ID, &d); err != nil {
				return nil, err
			}
			o.Drives = append(o.Drives, model.OOBDrive{Model: d.Model, SerialNumber: d.SerialNumber,
				CapacityBytes: u64(d.CapacityBytes), MediaType: d.MediaType})
		}
	}

	nics, more, err := members[rfEthernet](ctx, s, sys.EthernetInterfaces.ID, model.OOBMaxItems)
	if err != nil {
		return nil, err
	}
	if more {
		truncated("ethernetInterfaces")
	}
	for _, n := range nics {
		mac := n.MACAddress
		if mac == "" {
			mac = n.PermanentMACAddress
		}
		o.EthernetInterfaces = append(o.EthernetInterfaces, model.OOBEthernet{ID: n.ID, MAC: strings.ToLower(mac),
			SpeedMbps: u32(n.SpeedMbps), LinkStatus: n.LinkStatus})
	}
	return o, nil
}

// members reads the collection at uri ("" when the system has none: no
// members) and its first max members, and says whether it has more.
func members[T any](ctx context.Context, s *redfishSession, uri string, max int) ([]T, bool, error) {
	if uri == "" {
		return nil, false, nil
	}
	var c rfCollection
	if err := s.getJSON(ctx, uri, &c); err != nil {
		return nil, false, err
	}
	more := len(c.Members) > max || (c.Count != nil && *c.Count > float64(max))
	links := c.Members[:min(len(c.Members), max)]
	out := make([]T, 0, len(links))
	for _, l := range links {
		var v T
		if err := s.getJSON(ctx, l.ID, &v); err != nil {
			return nil, false, err
		}
		out = append(out, v)
	}
	return out, more, nil
}

// getJSON reads the resource at uri into v, refusing an answer over
// maxRedfishBody.
func (s *redfishSession) getJSON(ctx context.Context, uri string, v any) error {
	if uri == "" || !strings.HasPrefix(uri, "/") {
		return fmt.Errorf("read inventory: the BMC links to %q, not a path of the service", truncate(uri, 80))
	}
	where := "read " + truncate(uri, 200)
	resp, err := s.client(ctx).Get(uri)
	defer schemas.DeferredCleanupHTTPResponse(resp)
	if err != nil {
		return explainRedfish(where, err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRedfishBody+1))
	if err != nil {
		return explainRedfish(where, err)
	}
	if len(b) > maxRedfishBody {
		return fmt.Errorf("%s: the BMC answered more than %d MiB, more than any Redfish resource needs", where, maxRedfishBody>>20)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: the BMC's answer is not the Redfish resource expected: %w", where, err)
	}
	return nil
}

// u32 and u64 turn a Redfish number (absent, null, negative, fractional
// or huge on a broken BMC) into a count: 0 unless it is one.
func u32(f *float64) uint32 {
	if f == nil || *f < 0 || *f > math.MaxUint32 || math.IsNaN(*f) {
		return 0
	}
	return uint32(*f)
}

func u64(f *float64) uint64 {
	if f == nil || *f < 0 || *f >= math.MaxUint64 || math.IsNaN(*f) {
		return 0
	}
	return uint64(*f)
}

// truncate cuts s to n bytes for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
