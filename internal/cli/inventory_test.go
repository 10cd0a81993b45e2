package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
)

// describe hardware shows the agent's inventory readably: the recorded
// R610 (two packages, a udev WWN, NICs down and up, a TPM 1.2) and the
// UEFI VM (Secure Boot off).
func TestDescribeInventory(t *testing.T) {
	for _, tc := range []struct {
		machine string
		want    []string
	}{
		{"dell-r610", []string{
			"Inventory:   (the agent's last report; all of it: get -o yaml, status.attributes)",
			"  Product:   Dell Inc. PowerEdge R610, serial ANV0R61, UUID 4c4c4544-004e-5610-8030-c1c04f523631",
			"  Firmware:  BIOS; Dell Inc. 6.4.0 (07/23/2013)",
			"  TPM:       1.2",
			"  CPU:       12 cores, 24 threads: 2 x GenuineIntel Intel(R) Xeon(R) CPU           L5640  @ 2.27GHz",
			"  Memory:    47GB",
			"sda HDD SCSI 465GB DELL PERC 6/i -",
			"eno1 00:26:b9:4f:10:a0 1000Mb/s bnx2 up",
			"eno3 00:26:b9:4f:10:a4 - bnx2 down",
			"  GPUs:      102b 0532 (mgag200)",
		}},
		{"qemu-q35-uefi", []string{
			"  Product:   QEMU Standard PC (Q35 + ICH9, 2009), serial anvil-qemu-0002, UUID 9b0c4a6e-2f1d-4e8a-b7c3-5d6e7f8a9b02",
			"  Firmware:  UEFI, Secure Boot disabled; EFI Development Kit II / OVMF 0.0.0 (02/06/2015)",
			"  CPU:       2 cores, 2 threads: 1 x AuthenticAMD QEMU Virtual CPU version 2.5+",
			"vda HDD virtio 8GB - anvil-disk-0002",
		}},
	} {
		t.Run(tc.machine, func(t *testing.T) {
			b, err := os.ReadFile("../hwinfo/testdata/" + tc.machine + ".golden.json")
			if err != nil {
				t.Fatal(err)
			}
			h := &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "m", Namespace: "default"}}
			if err := json.Unmarshal(b, &h.Status.Attributes); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			describeHardware(&out, h, nil, time.Now())
			// Lines compared with their runs of spaces as one: the tables'
			// column widths are tabwriter's.
			var lines []string
			for l := range strings.Lines(out.String()) {
				lines = append(lines, strings.Join(strings.Fields(l), " "))
			}
			for _, w := range tc.want {
				if !slices.Contains(lines, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("describe output lacks the line %q:\n%s", w, out.String())
				}
			}
		})
	}
	// No inventory yet: no section.
	var out bytes.Buffer
	describeHardware(&out, &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "m"}}, nil, time.Now())
	if strings.Contains(out.String(), "Inventory:") {
		t.Errorf("a Hardware without attributes shows an inventory:\n%s", out.String())
	}
}

// describe hardware lists the commissioning checks, one a line, with the
// result and why.
func TestDescribeCommissioning(t *testing.T) {
	now := time.Date(2026, 11, 28, 9, 10, 0, 0, time.UTC)
	at := now.Add(-2 * time.Minute)
	h := &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "m", Namespace: "default",
		Labels: map[string]string{model.LabelCommissioning: model.CommissioningFailed}}}
	h.Status.Commissioning = &model.Commissioning{Result: "failed", Workflow: "default/commission-m", Message: "failed: smart/nvme0n1", UpdatedAt: &at,
		Checks: []model.CommissioningCheck{
			{Name: "smart/nvme0n1", Result: "failed", Detail: "critical warning 0x04 (reliability degraded by media or internal errors)"},
			{Name: "smart/vda", Result: "unsupported", Detail: "neither NVMe nor SCSI"},
		}}
	var out bytes.Buffer
	describeHardware(&out, h, nil, now)
	for _, want := range []string{
		"Labels:      anvil.io/commissioning=failed\n",
		"Commissioning: failed, by workflow default/commission-m, 2m ago\n  failed: smart/nvme0n1\n",
		"  smart/nvme0n1  failed       critical warning 0x04 (reliability degraded by media or internal errors)\n",
		"  smart/vda      unsupported  neither NVMe nor SCSI\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, out.String())
		}
	}
}

// describeLines is describe hardware's output for h, its runs of spaces
// as one (the tables' column widths are tabwriter's).
func describeLines(h *model.Hardware) (string, []string) {
	var out bytes.Buffer
	describeHardware(&out, h, nil, time.Now())
	var lines []string
	for l := range strings.Lines(out.String()) {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return out.String(), lines
}

// describe hardware shows the BMC's inventory (as the poller stored it
// from the simulator's R640) in a section of its own: with no agent
// report, alone; beside the agent's report of another machine (the
// R610), with a line for each identity that differs; beside the agent's
// report of the same machine, with none.
func TestDescribeOutOfBand(t *testing.T) {
	b, err := os.ReadFile("testdata/outofband-r640.json")
	if err != nil {
		t.Fatal(err)
	}
	var oob model.OutOfBand
	if err := json.Unmarshal(b, &oob); err != nil {
		t.Fatal(err)
	}
	section := []string{
		"Out-of-band: (the BMC's: Machine bmc-node08, redfish, read 2026-11-28T09:35:15Z; all of it: get -o yaml, status.attributes.outOfBand)",
		"  System:    Dell Inc. PowerEdge R640, serial 7XK2Q53, UUID 4c4c4544-0058-4b10-8032-b7c04f513533, SKU 7XK2Q53",
		"  BIOS:      2.19.1",
		"  Power:     Off (when read)",
		"  CPU:       2 x Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz (20 cores, 40 threads)",
		"  Memory:    96GB: 3 x 32GB DDR4 2933MHz Hynix",
		"    SSD   447GB  MZ7KH480HAHQ0D3  S47MNY0M123456",
		"    HDD   2TB    ST2000NM0055     ZC20ABCD",
		"    1   e4:43:4b:1a:2b:3c  10000Mb/s  LinkUp",
		"    2   e4:43:4b:1a:2b:3d  -          LinkDown",
	}
	mismatch := []string{
		`  Mismatch:  serial number: agent "ANV0R61", BMC "7XK2Q53": spec.bmcRef may name another machine's BMC`,
		`  Mismatch:  UUID: agent "4c4c4544-004e-5610-8030-c1c04f523631", BMC "4c4c4544-0058-4b10-8032-b7c04f513533": spec.bmcRef may name another machine's BMC`,
	}
	has := func(lines []string, want string) bool {
		return slices.Contains(lines, strings.Join(strings.Fields(want), " "))
	}

	h := &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "node08", Namespace: "default"},
		Status: model.HardwareStatus{Attributes: &model.Attributes{OutOfBand: &oob}}}
	out, lines := describeLines(h)
	for _, w := range section {
		if !has(lines, w) {
			t.Errorf("describe output lacks the line %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "Inventory:") || strings.Contains(out, "Mismatch") {
		t.Errorf("an out-of-band inventory alone shows an agent's section or a mismatch:\n%s", out)
	}

	r610, err := os.ReadFile("../hwinfo/testdata/dell-r610.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(r610, &h.Status.Attributes); err != nil {
		t.Fatal(err)
	}
	h.Status.Attributes.OutOfBand = &oob
	out, lines = describeLines(h)
	for _, w := range append(append([]string{"  Product:   Dell Inc. PowerEdge R610, serial ANV0R61, UUID 4c4c4544-004e-5610-8030-c1c04f523631"}, section...), mismatch...) {
		if !has(lines, w) {
			t.Errorf("describe output lacks the line %q:\n%s", w, out)
		}
	}

	h.Status.Attributes.Product.SerialNumber = "7xk2q53" // case aside, the same
	h.Status.Attributes.Anvil.UUID = oob.UUID
	if out, _ = describeLines(h); strings.Contains(out, "Mismatch") {
		t.Errorf("the same machine shows a mismatch:\n%s", out)
	}
}
