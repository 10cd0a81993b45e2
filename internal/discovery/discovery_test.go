package discovery

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
)

func TestID(t *testing.T) {
	mac := macaddr.MustParse("52:54:00:AB:CD:01")
	tests := []struct {
		name string
		uuid string
		want string
	}{
		{name: "uuid, lower-cased", uuid: "4C4C4544-0042-3510-8052-B7C04F4E3232", want: "4c4c4544-0042-3510-8052-b7c04f4e3232"},
		{name: "no uuid: the MAC", uuid: "", want: "525400abcd01"},
		{name: "all zero", uuid: "00000000-0000-0000-0000-000000000000", want: "525400abcd01"},
		{name: "all f", uuid: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", want: "525400abcd01"},
		{name: "firmware placeholder", uuid: "03000200-0400-0500-0006-000700080009", want: "525400abcd01"},
		{name: "not a uuid", uuid: "To Be Filled By O.E.M.", want: "525400abcd01"},
		{name: "a uuid with junk after it", uuid: "4c4c4544-0042-3510-8052-b7c04f4e3232/../x", want: "525400abcd01"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			attrs := &model.Attributes{Anvil: &model.AnvilAttributes{UUID: tc.uuid}}
			if got := ID(attrs, mac); got != tc.want {
				t.Errorf("ID(uuid %q) = %q; want %q", tc.uuid, got, tc.want)
			}
			hw := Machine{Namespace: "default", BootMAC: mac, Attributes: attrs}.Hardware()
			if err := model.Validate(hw); err != nil {
				t.Errorf("the Hardware of uuid %q does not validate: %v", tc.uuid, err)
			}
		})
	}
	if got := ID(nil, mac); got != "525400abcd01" {
		t.Errorf("ID(nil attributes) = %q; want the MAC", got)
	}
}

func TestHardware(t *testing.T) {
	boot := macaddr.MustParse("52:54:00:00:00:01")
	attrs := &model.Attributes{
		NetworkInterfaces: []model.NetworkInterface{
			{Name: "eth0", MAC: "52:54:00:00:00:01"}, // the boot NIC again
			{Name: "eth1", MAC: "52:54:00:00:00:02"},
			{Name: "bad", MAC: "not-a-mac"},
			{Name: "zero", MAC: "00:00:00:00:00:00"},
		},
		BlockDevices: []model.BlockDevice{
			{Name: "sda", Size: "32GB"}, // a USB stick
			{Name: "sr0", Size: "1024MB", DriveType: "ODD"},
			{Name: "vda", Size: "8GB"},
			{Name: "vdb", Size: ""}, // no medium
			{Name: "../etc/passwd", Size: "1GB"},
		},
		Anvil: &model.AnvilAttributes{UUID: "9e8f3c36-0d3f-4a8e-9b6c-2f1d3c4b5a69", Firmware: "uefi",
			BlockDevices: []model.AnvilBlockDevice{{Name: "sda", Removable: true}, {Name: "vda"}}},
	}
	hw := Machine{Namespace: "lab", BootMAC: boot, IP: &model.IP{Address: "10.0.0.150", Netmask: "255.255.255.0"}, Attributes: attrs}.Hardware()
	if hw.Name != "discovery-9e8f3c36-0d3f-4a8e-9b6c-2f1d3c4b5a69" || hw.Namespace != "lab" {
		t.Errorf("name = %s; want lab/discovery-<uuid>", hw.Key())
	}
	if hw.Labels[model.LabelDiscovered] != "true" || hw.Labels[LabelTinkerbell] != "true" {
		t.Errorf("labels = %v; want both discovery labels", hw.Labels)
	}
	if got := fmt.Sprint(hw.MACs()); got != "[52:54:00:00:00:01 52:54:00:00:00:02]" {
		t.Errorf("MACs = %s; want the boot MAC first, then eth1, no invalid ones", got)
	}
	b := hw.Spec.Interfaces[0]
	if !model.BoolValue(b.Netboot.AllowPXE, false) || b.DHCP.IP.Address != "10.0.0.150" || !model.BoolValue(b.DHCP.UEFI, false) {
		t.Errorf("boot interface = %+v %+v; want netboot allowed, the lease as its address, UEFI", b.DHCP, b.Netboot)
	}
	if o := hw.Spec.Interfaces[1]; o.Netboot != nil || o.DHCP.IP != nil {
		t.Errorf("second interface = %+v; want its MAC only", o)
	}
	if got := fmt.Sprint(hw.Spec.Disks); got != "[{/dev/vda} {/dev/sda}]" {
		t.Errorf("disks = %s; want the fixed disk vda, then the removable sda: no CD-ROM, nothing without a size or a plain name", got)
	}
	if hw.Status.Attributes != attrs {
		t.Error("status.attributes is not the inventory")
	}
	if err := model.Validate(hw); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestHardwareCaps: an inventory that claims thousands of NICs and disks
// gives a Hardware of bounded size that still validates.
func TestHardwareCaps(t *testing.T) {
	attrs := &model.Attributes{}
	for i := range 5000 {
		attrs.NetworkInterfaces = append(attrs.NetworkInterfaces, model.NetworkInterface{MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff)})
		attrs.BlockDevices = append(attrs.BlockDevices, model.BlockDevice{Name: fmt.Sprintf("sd%d", i), Size: "1TB"})
	}
	hw := Machine{Namespace: "default", BootMAC: macaddr.MustParse("52:54:00:00:00:01"), Attributes: attrs}.Hardware()
	if len(hw.Spec.Interfaces) != MaxInterfaces || len(hw.Spec.Disks) != MaxDisks {
		t.Errorf("%d interfaces, %d disks; want %d and %d", len(hw.Spec.Interfaces), len(hw.Spec.Disks), MaxInterfaces, MaxDisks)
	}
	if err := model.Validate(hw); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if !strings.HasPrefix(hw.Name, NamePrefix) {
		t.Errorf("name %q", hw.Name)
	}
}

// FuzzHardware: whatever UUID, MACs and disk names an inventory claims,
// the Hardware made of it is valid (its name a Kubernetes name within
// limits), named by a usable UUID in lower case or else by the boot MAC,
// with the boot MAC first and no more interfaces and disks than the caps.
func FuzzHardware(f *testing.F) {
	f.Add("4C4C4544-0042-3510-8052-B7C04F4E3232", []byte{0x52, 0x54, 0, 0, 0, 1}, "52:54:00:00:00:02", "vda", "8GB")
	f.Add("03000200-0400-0500-0006-000700080009", []byte{0, 0, 0, 0, 0, 0}, "zz", "../x", "1")
	f.Add("", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "", "sr0", "")
	f.Add("ffffffff-ffff-ffff-ffff-ffffffffffff\n", []byte{1, 2, 3, 4, 5, 6}, "01:02:03:04:05:06", "nvme0n1", "1TB")
	f.Fuzz(func(t *testing.T, uuid string, macBytes []byte, otherMAC, disk, size string) {
		if len(macBytes) != macaddr.Len {
			return
		}
		boot := macaddr.From([macaddr.Len]byte(macBytes))
		attrs := &model.Attributes{
			NetworkInterfaces: []model.NetworkInterface{{MAC: otherMAC}, {MAC: boot.String()}},
			BlockDevices:      []model.BlockDevice{{Name: disk, Size: size}},
			Anvil:             &model.AnvilAttributes{UUID: uuid},
		}
		hw := Machine{Namespace: "default", BootMAC: boot, Attributes: attrs}.Hardware()
		if err := model.Validate(hw); err != nil {
			t.Fatalf("Hardware of uuid %q, MAC %s, disk %q: %v", uuid, boot, disk, err)
		}
		if u := UsableUUID(attrs); u != "" && hw.Name != NamePrefix+u || u == "" && hw.Name != NamePrefix+strings.ReplaceAll(boot.String(), ":", "") {
			t.Fatalf("name %q for uuid %q (usable %q), MAC %s", hw.Name, uuid, u, boot)
		}
		if hw.MACs()[0] != boot || len(hw.Spec.Interfaces) > MaxInterfaces || len(hw.Spec.Disks) > MaxDisks {
			t.Fatalf("interfaces %+v, disks %+v", hw.Spec.Interfaces, hw.Spec.Disks)
		}
	})
}
