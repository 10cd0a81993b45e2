package kmod

import (
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"testing/fstest"
)

// Real modaliases of QEMU's devices (pc machine), as sysfs shows them.
const (
	aliasVirtioNetPCI = "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"
	aliasVirtioBlkPCI = "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00"
	aliasVirtioNet    = "virtio:d00000001v00001AF4"
	aliasVirtioBlk    = "virtio:d00000002v00001AF4"
	aliasE1000        = "pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00"
	aliasPIIXIDE      = "pci:v00008086d00007010sv00001AF4sd00001100bc01sc01i80"
	aliasHostBridge   = "pci:v00008086d00001237sv00001AF4sd00001100bc06sc00i00"
)

func openMini(t *testing.T) *Index {
	t.Helper()
	x, err := Open(filepath.Join("testdata", "mini"))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestIndexLoadOrder(t *testing.T) {
	x := openMini(t)
	tests := []struct {
		module  string
		want    []string
		wantErr error
	}{
		{"virtio_ring", []string{"virtio_ring"}, nil},
		{"virtio_net", []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net"}, nil},
		{"virtio-net", []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net"}, nil},
		{"virtio_pci", []string{"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci"}, nil},
		{"vfat", []string{"fat", "vfat"}, nil},
		{"ext4", []string{"jbd2", "mbcache", "crc16", "ext4"}, nil},
		{"ahci", []string{"scsi_common", "scsi_mod", "libata", "libahci", "ahci"}, nil},
		{"8250", nil, nil}, // built in
		{"nope", nil, ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.module, func(t *testing.T) {
			got, err := x.LoadOrder(tc.module)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("LoadOrder(%q) error %v; want %v", tc.module, err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("LoadOrder(%q) = %q; want %q", tc.module, got, tc.want)
			}
		})
	}
}

// TestIndexLoadOrderRespectsDeps checks every module of the fixture: each
// module in a load order comes after everything modules.dep says it needs.
func TestIndexLoadOrderRespectsDeps(t *testing.T) {
	x := openMini(t)
	for _, name := range x.Modules() {
		order, err := x.LoadOrder(name)
		if err != nil {
			t.Fatalf("LoadOrder(%s): %v", name, err)
		}
		if order[len(order)-1] != name {
			t.Errorf("LoadOrder(%s) = %q: does not end with the module", name, order)
		}
		for i, m := range order {
			for _, d := range x.mods[m].deps {
				if j := slices.Index(order, d); j < 0 || j > i {
					t.Errorf("LoadOrder(%s) = %q: %s before its dependency %s", name, order, m, d)
				}
			}
		}
	}
}

func TestIndexLookup(t *testing.T) {
	x := openMini(t)
	tests := []struct {
		name, modalias string
		want           []string
		wantBuiltin    bool
	}{
		{"virtio-net-pci", aliasVirtioNetPCI, []string{"virtio_pci"}, false},
		{"virtio-blk-pci", aliasVirtioBlkPCI, []string{"virtio_pci"}, false},
		{"virtio net device", aliasVirtioNet, []string{"virtio_net"}, false},
		{"virtio blk device", aliasVirtioBlk, []string{"virtio_blk"}, false},
		{"e1000", aliasE1000, []string{"e1000"}, false},
		{"piix ide", aliasPIIXIDE, []string{"ata_piix"}, false},
		{"host bridge", aliasHostBridge, nil, false},
		{"crc32c alias, two modules", "crypto-crc32c", []string{"crc32c_intel", "crc32c_generic"}, false},
		{"alias spelled with underscores", "crypto_crc32c", []string{"crc32c_intel", "crc32c_generic"}, false},
		{"builtin alias", "crypto-sha256", nil, true},
		{"builtin alias glob", "char-major-4-64", nil, true},
		{"scsi disk", "scsi:t-0x00", []string{"sd_mod"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, builtin := x.Lookup(tc.modalias)
			if !reflect.DeepEqual(got, tc.want) || builtin != tc.wantBuiltin {
				t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tc.modalias, got, builtin, tc.want, tc.wantBuiltin)
			}
		})
	}
}

func TestIndexAccessors(t *testing.T) {
	x := openMini(t)
	if got, want := x.Path("virtio_net"), filepath.Join("testdata", "mini", "kernel/drivers/net/virtio_net.ko"); got != want {
		t.Errorf("Path(virtio_net) = %q; want %q", got, want)
	}
	if got := x.Path("nope"); got != "" {
		t.Errorf("Path(nope) = %q; want \"\"", got)
	}
	if !x.IsBuiltin("8250") || !x.IsBuiltin("sha256-generic") || x.IsBuiltin("virtio_net") {
		t.Error("IsBuiltin wrong for 8250, sha256_generic or virtio_net")
	}
	if got, want := x.Softdep("ext4"), (Softdep{Pre: []string{"crypto-crc32c"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("Softdep(ext4) = %+v; want %+v", got, want)
	}
	if got := len(x.Modules()); got != 31 {
		t.Errorf("len(Modules()) = %d; want 31", got)
	}
}

func TestReadIndexErrors(t *testing.T) {
	tests := []struct {
		name string
		fs   fstest.MapFS
	}{
		{"no modules.dep", fstest.MapFS{"modules.alias": {Data: []byte("alias a b\n")}}},
		{"dependency without a line", fstest.MapFS{"modules.dep": {Data: []byte("a.ko: b.ko\n")}}},
		{"module twice", fstest.MapFS{"modules.dep": {Data: []byte("x/a.ko:\ny/a.ko:\n")}}},
		{"bad alias", fstest.MapFS{"modules.dep": {Data: []byte("a.ko:\n")}, "modules.alias": {Data: []byte("alias a\n")}}},
		{"bad builtin.modinfo", fstest.MapFS{"modules.dep": {Data: []byte("a.ko:\n")}, "modules.builtin.modinfo": {Data: []byte("junk\x00")}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadIndex(tc.fs); err == nil {
				t.Error("ReadIndex succeeded; want an error")
			}
		})
	}
}

func TestLoadOrderCycle(t *testing.T) {
	x, err := ReadIndex(fstest.MapFS{"modules.dep": {Data: []byte("a.ko: b.ko\nb.ko: a.ko\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.LoadOrder("a"); err == nil {
		t.Error("LoadOrder succeeded on a dependency cycle")
	}
}
