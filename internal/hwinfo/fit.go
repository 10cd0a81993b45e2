package hwinfo

import (
	"encoding/json"
	"slices"

	"github.com/anvilproj/anvil/internal/model"
)

// fit makes a's JSON at most MaxBytes by halving, again and again, the
// list that takes the most room (Tinkerbell's list and Anvil's additions
// to it together), naming each list it cut in a.Anvil.Truncated. The
// per-list caps keep a real machine far below MaxBytes; this is for a
// tree that lies (a thousand disks with 256-byte models).
func fit(a *model.Attributes) {
	if a.Anvil == nil {
		a.Anvil = &model.AnvilAttributes{}
	}
	for jsonSize(a) > MaxBytes {
		lists := []struct {
			name string
			size int
			n    int
			cut  func(n int)
		}{
			{"pciDevices", jsonSize(a.PCIDevices) + jsonSize(a.Anvil.PCIDevices), len(a.PCIDevices), func(n int) {
				a.PCIDevices, a.Anvil.PCIDevices = a.PCIDevices[:n], a.Anvil.PCIDevices[:min(n, len(a.Anvil.PCIDevices))]
			}},
			{"blockDevices", jsonSize(a.BlockDevices) + jsonSize(a.Anvil.BlockDevices), len(a.BlockDevices), func(n int) {
				a.BlockDevices, a.Anvil.BlockDevices = a.BlockDevices[:n], a.Anvil.BlockDevices[:min(n, len(a.Anvil.BlockDevices))]
			}},
			{"networkInterfaces", jsonSize(a.NetworkInterfaces) + jsonSize(a.Anvil.NetworkInterfaces), len(a.NetworkInterfaces), func(n int) {
				a.NetworkInterfaces, a.Anvil.NetworkInterfaces = a.NetworkInterfaces[:n], a.Anvil.NetworkInterfaces[:min(n, len(a.Anvil.NetworkInterfaces))]
			}},
			{"gpuDevices", jsonSize(a.GPUDevices), len(a.GPUDevices), func(n int) { a.GPUDevices = a.GPUDevices[:n] }},
			{"cpu.capabilities", capabilitiesSize(a), maxCapabilities(a), func(n int) {
				for i := range a.CPU.Processors {
					p := &a.CPU.Processors[i]
					p.Capabilities = p.Capabilities[:min(n, len(p.Capabilities))]
				}
			}},
		}
		best := -1
		for i, l := range lists {
			if l.n > 0 && (best < 0 || l.size > lists[best].size) {
				best = i
			}
		}
		if best < 0 {
			return // nothing left to cut: the caps keep this below MaxBytes
		}
		lists[best].cut(lists[best].n / 2)
		if !slices.Contains(a.Anvil.Truncated, lists[best].name) {
			a.Anvil.Truncated = append(a.Anvil.Truncated, lists[best].name)
			slices.Sort(a.Anvil.Truncated)
		}
	}
}

// jsonSize is the length of v as JSON.
func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

func capabilitiesSize(a *model.Attributes) int {
	if a.CPU == nil {
		return 0
	}
	n := 0
	for _, p := range a.CPU.Processors {
		n += jsonSize(p.Capabilities)
	}
	return n
}

func maxCapabilities(a *model.Attributes) int {
	if a.CPU == nil {
		return 0
	}
	n := 0
	for _, p := range a.CPU.Processors {
		n = max(n, len(p.Capabilities))
	}
	return n
}
