package bootenv

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/anvilproj/anvil/internal/kmod"
)

// DefaultModules chooses the modules of the boot environment: what a
// machine needs to reach the network and its disks, and to read and write
// the filesystems an installation touches. A pattern with a '/' matches
// the module's path below the module directory's kernel/ (e.g.
// "drivers/net/ethernet/*"); any other matches its name ("virtio_net",
// "xhci_*"). Patterns follow fnmatch(3) ('*' crosses '/'). Every module
// these need (modules.dep) and their soft dependencies come along.
var DefaultModules = []string{
	// Network: every wired Ethernet driver and the PHY, MDIO and PCS
	// drivers they attach; virtual NICs (virtio, Hyper-V, Xen; vmxnet3,
	// ena and gve live under ethernet/); USB network adapters; bonding
	// and VLANs for the kernel arguments that ask for them.
	"drivers/net/ethernet/*", "drivers/net/phy/*", "drivers/net/mdio/*", "drivers/net/pcs/*",
	"drivers/net/usb/*", "virtio_net", "hv_netvsc", "xen_netfront", "bonding", "8021q",

	// Disks: virtio, NVMe (PCIe, and over TCP; not over RDMA or FC, which
	// would bring the InfiniBand and FC stacks), Intel VMD, SATA/PATA, SCSI
	// disks and CD-ROMs, USB storage, SD/eMMC, and the server RAID/HBA
	// families (Broadcom/LSI MegaRAID, SAS2/3 and fusion MPT, Microchip
	// SmartPQI and Adaptec, HPE Smart Array, Areca, 3ware, Intel SCU,
	// Marvell, PMC, ATTO, HighPoint, Promise), plus Hyper-V, Xen and
	// VMware virtual controllers.
	"virtio_blk", "virtio_scsi", "nvme", "nvme_tcp", "vmd", "drivers/ata/*",
	"sd_mod", "sr_mod", "sg", "usb_storage", "uas", "drivers/mmc/*",
	"megaraid", "drivers/scsi/megaraid/*", "drivers/scsi/mpt3sas/*", "drivers/scsi/mpi3mr/*",
	"drivers/message/fusion/*", "drivers/scsi/smartpqi/*", "drivers/scsi/aacraid/*", "hpsa",
	"drivers/scsi/arcmsr/*", "3w_*", "drivers/scsi/isci/*", "drivers/scsi/mvsas/*",
	"drivers/scsi/pm8001/*", "drivers/scsi/esas2r/*", "hptiop", "stex",
	"hv_storvsc", "xen_blkfront", "vmw_pvscsi", "loop",

	// Software RAID and the device mapper (md raid0/1/10/456, LVM).
	"drivers/md/*",

	// Filesystems an installation writes or reads, with the code pages
	// FAT needs to mount; efivarfs for UEFI boot entries; overlay for the
	// writable layer of actions that run in containers.
	"ext4", "xfs", "btrfs", "vfat", "isofs", "squashfs", "efivarfs", "fs/nls/*", "overlay",

	// Buses: virtio (PCI, MMIO) and its entropy source, USB host
	// controllers and keyboards for the debug shell on a real console.
	"drivers/virtio/*", "virtio_rng", "xhci_*", "ehci_*", "ohci_*", "uhci_hcd", "usbhid", "hid_generic",
}

// moduleTree is every module of a module directory, with its modinfo.
type moduleTree struct {
	dir     string // …/lib/modules/RELEASE
	release string
	mods    []kmod.ModuleFile // modules.order order, then by path
	idx     *kmod.Index       // over mods
}

// scanTree reads the modinfo of every module under dir (…/lib/modules/
// RELEASE) and checks they are built for arch.
func scanTree(ctx context.Context, dir, arch string) (*moduleTree, error) {
	t := &moduleTree{dir: dir, release: filepath.Base(dir)}
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "build" || d.Name() == "source") && filepath.Dir(p) == dir {
			return fs.SkipDir // kernel headers, on a real system
		}
		if d.Type().IsRegular() && kmod.IsModuleFile(d.Name()) {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("modules %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("modules %s: no kernel modules (*.ko) in it", dir)
	}
	rank := map[string]int{}
	if data, err := os.ReadFile(filepath.Join(dir, kmod.OrderFile)); err == nil {
		for i, p := range strings.Fields(string(data)) {
			rank[p] = i + 1
		}
	}
	sort.SliceStable(paths, func(i, j int) bool {
		ri, rj := rank[kmod.UncompressedPath(paths[i])], rank[kmod.UncompressedPath(paths[j])]
		if ri == 0 || rj == 0 {
			if ri != rj {
				return ri != 0 // listed ones first
			}
			return paths[i] < paths[j]
		}
		return ri < rj
	})
	want := archMachines[arch]
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mi, machine, err := kmod.ReadModuleFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return nil, err
		}
		if machine != want {
			return nil, fmt.Errorf("modules %s: %s is built for %v, the boot environment is %s", dir, p, machine, arch)
		}
		t.mods = append(t.mods, kmod.ModuleFile{Path: p, Info: mi})
	}
	if t.idx, err = kmod.NewIndex(t.mods); err != nil {
		return nil, fmt.Errorf("modules %s: %w", dir, err)
	}
	return t, nil
}

// selection is the modules chosen for the initramfs.
type selection struct {
	mods []kmod.ModuleFile // in tree order
	// dropped are modules the patterns chose that need an excluded one.
	dropped []string
}

// matchModule reports whether a selection pattern matches a module.
func matchModule(pattern string, m kmod.ModuleFile) bool {
	if strings.Contains(pattern, "/") {
		p := kmod.UncompressedPath(m.Path)
		return kmod.Match(pattern, strings.TrimPrefix(p, "kernel/")) || kmod.Match(pattern, p)
	}
	return kmod.Match(strings.ReplaceAll(pattern, "-", "_"), kmod.ModuleName(m.Info.Name))
}

// choose picks the modules matching DefaultModules (unless noDefaults) or
// include, without those matching exclude, adds what they need and their
// soft dependencies, and leaves out every module that needs an excluded
// one. An include or exclude pattern matching no module is an error: it
// is a typo or a different kernel.
func (t *moduleTree) choose(include, exclude []string, noDefaults bool) (selection, error) {
	for _, list := range []struct {
		flag     string
		patterns []string
	}{{"--modules-include", include}, {"--modules-exclude", exclude}} {
		for _, p := range list.patterns {
			if !slices.ContainsFunc(t.mods, func(m kmod.ModuleFile) bool { return matchModule(p, m) }) {
				return selection{}, fmt.Errorf("%s %q matches no module of %s", list.flag, p, t.release)
			}
		}
	}
	matchAny := func(patterns []string, m kmod.ModuleFile) bool {
		return slices.ContainsFunc(patterns, func(p string) bool { return matchModule(p, m) })
	}
	byName := map[string]kmod.ModuleFile{}
	excluded := map[string]bool{}
	for _, m := range t.mods {
		name := kmod.ModuleName(m.Info.Name)
		byName[name] = m
		if matchAny(exclude, m) {
			excluded[name] = true
		}
	}
	// unusable: excluded, or needing an excluded module.
	unusable := func(name string) bool {
		if excluded[name] {
			return true
		}
		order, err := t.idx.LoadOrder(name)
		if err != nil {
			return true
		}
		return slices.ContainsFunc(order, func(n string) bool { return excluded[n] })
	}

	var sel selection
	chosen := map[string]bool{}
	var add func(name string)
	add = func(name string) {
		if chosen[name] || unusable(name) {
			return
		}
		order, _ := t.idx.LoadOrder(name) // no error: usable
		for _, n := range order {
			if chosen[n] {
				continue
			}
			chosen[n] = true
			sd := t.idx.Softdep(n)
			for _, s := range append(slices.Clone(sd.Pre), sd.Post...) {
				if t.idx.Has(s) {
					add(kmod.ModuleName(s))
					continue
				}
				mods, _ := t.idx.Lookup(s)
				for _, m := range mods {
					add(m)
				}
			}
		}
	}
	for _, m := range t.mods {
		name := kmod.ModuleName(m.Info.Name)
		if !(matchAny(include, m) || (!noDefaults && matchAny(DefaultModules, m))) {
			continue
		}
		if unusable(name) {
			if !excluded[name] {
				sel.dropped = append(sel.dropped, name)
			}
			continue
		}
		add(name)
	}
	for _, m := range t.mods {
		if chosen[kmod.ModuleName(m.Info.Name)] {
			sel.mods = append(sel.mods, m)
		}
	}
	return sel, nil
}
