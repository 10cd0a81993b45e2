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
