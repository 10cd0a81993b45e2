package kmod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recordingLoader records the modules it is asked to load and can fail
// some, or run a hook (a driver making devices appear) after loading one.
type recordingLoader struct {
	mu     sync.Mutex
	loads  []string
	fail   map[string]error
	onLoad map[string]func()
}

func (l *recordingLoader) Load(path string) error {
	name := ModuleName(path)
	l.mu.Lock()
	l.loads = append(l.loads, name)
	err := l.fail[name]
	hook := l.onLoad[name]
	l.mu.Unlock()
	if err == nil && hook != nil {
		hook()
	}
	return err
}

func (l *recordingLoader) loaded() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.loads...)
}

func TestProbe(t *testing.T) {
	errBoom := errors.New("Unknown symbol in module")
	tests := []struct {
		name       string
		probes     []string
		fail       map[string]error
		wantLoads  []string // every Load call, in order
		wantResult []string // what the last Probe returned
		wantErr    string   // of the last Probe
	}{
		{
			name:       "module with dependencies",
			probes:     []string{"virtio_net"},
			wantLoads:  []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net"},
			wantResult: []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net"},
		},
		{
			name:       "shared dependencies load once",
			probes:     []string{"virtio_net", "virtio_blk"},
			wantLoads:  []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net", "virtio_blk"},
			wantResult: []string{"virtio_blk"},
		},
		{
			name:       "a module probed twice loads once",
			probes:     []string{"vfat", "vfat"},
			wantLoads:  []string{"fat", "vfat"},
			wantResult: nil,
		},
		{
			name:   "pre soft dependency by alias loads every module it matches",
			probes: []string{"ext4"},
			wantLoads: []string{"crc32c_intel", "crc32c_generic", // softdep pre: crypto-crc32c
				"jbd2", "mbcache", "crc16", "ext4"},
			wantResult: []string{"crc32c_intel", "crc32c_generic", "jbd2", "mbcache", "crc16", "ext4"},
		},
		{
			name:       "a failing soft dependency does not fail the module",
			probes:     []string{"ext4"},
			fail:       map[string]error{"crc32c_intel": errBoom},
			wantLoads:  []string{"crc32c_intel", "crc32c_generic", "jbd2", "mbcache", "crc16", "ext4"},
			wantResult: []string{"crc32c_generic", "jbd2", "mbcache", "crc16", "ext4"},
		},
		{
			name:       "a failing dependency fails the module and is tried once",
			probes:     []string{"virtio_net", "virtio_blk"},
			fail:       map[string]error{"virtio": errBoom},
			wantLoads:  []string{"virtio_ring", "virtio"},
			wantResult: nil,
			wantErr:    "module virtio_blk: needs virtio: module virtio: Unknown symbol in module",
		},
		{
			name:       "by modalias",
			probes:     []string{aliasVirtioNetPCI},
			wantLoads:  []string{"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci"},
			wantResult: []string{"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci"},
		},
		{
			name:       "built-in module",
			probes:     []string{"8250"},
			wantLoads:  nil,
			wantResult: nil,
		},
		{
			name:       "built-in alias",
			probes:     []string{"crypto-sha256"},
			wantLoads:  nil,
			wantResult: nil,
		},
		{
			name:    "unknown",
			probes:  []string{"fs-zfs"},
			wantErr: "module fs-zfs: not found",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &recordingLoader{fail: tc.fail}
			p := NewProber(ProberConfig{Index: openMini(t), Loader: l})
			var got []string
			var err error
			for _, name := range tc.probes {
				got, err = p.Probe(name)
			}
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Fatalf("Probe error %v; want %q", err, tc.wantErr)
			}
			if !reflect.DeepEqual(l.loaded(), tc.wantLoads) {
				t.Errorf("loads = %q; want %q", l.loaded(), tc.wantLoads)
			}
			if !reflect.DeepEqual(got, tc.wantResult) {
				t.Errorf("Probe = %q; want %q", got, tc.wantResult)
			}
		})
	}
}

// TestProbePaths checks the loader gets the module files of the index.
func TestProbePaths(t *testing.T) {
	var paths []string
	p := NewProber(ProberConfig{Index: openMini(t), Loader: LoaderFunc(func(path string) error {
		paths = append(paths, path)
		return nil
	})})
	if _, err := p.Probe("vfat"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("testdata", "mini")
	want := []string{filepath.Join(dir, "kernel/fs/fat/fat.ko"), filepath.Join(dir, "kernel/fs/fat/vfat.ko")}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("paths = %q; want %q", paths, want)
	}
}

// fakeSys is a sysfs tree in a temporary directory.
type fakeSys struct {
	t   *testing.T
	dir string
}

func newFakeSys(t *testing.T) *fakeSys {
	return &fakeSys{t: t, dir: t.TempDir()}
}

// device adds a device directory with a modalias file.
func (s *fakeSys) device(path, modalias string) {
	s.t.Helper()
	dir := filepath.Join(s.dir, "devices", path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "modalias"), []byte(modalias+"\n"), 0o444); err != nil {
		s.t.Fatal(err)
	}
}

func TestColdplug(t *testing.T) {
	errBoom := errors.New("Invalid module format")
	tests := []struct {
		name          string
		fail          map[string]error
		wantLoaded    []string
		wantErrors    []string
		wantUnmatched []string
		wantRounds    int
	}{
		{
			name: "bus driver makes devices appear",
			wantLoaded: []string{
				"scsi_common", "scsi_mod", "libata", "ata_piix", // round 1, in sysfs order
				"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
				"failover", "net_failover", "virtio_net", "virtio_blk", // round 2: the virtio devices
			},
			wantUnmatched: []string{aliasHostBridge, "platform:i8042"},
			wantRounds:    3, // the third finds nothing new
		},
		{
			name: "a failing module is reported and the rest load",
			fail: map[string]error{"ata_piix": errBoom, "virtio_net": errBoom},
			wantLoaded: []string{
				"scsi_common", "scsi_mod", "libata",
				"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
				"failover", "net_failover", "virtio_blk",
			},
			wantErrors:    []string{"module ata_piix: Invalid module format", "module virtio_net: Invalid module format"},
			wantUnmatched: []string{aliasHostBridge, "platform:i8042"},
			wantRounds:    3,
		},
		{
			name:          "the bus driver fails: no second round",
			fail:          map[string]error{"virtio_pci": errBoom, "ata_piix": errBoom},
			wantLoaded:    []string{"scsi_common", "scsi_mod", "libata", "virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev"},
			wantErrors:    []string{"module ata_piix: Invalid module format", "module virtio_pci: Invalid module format"},
			wantUnmatched: []string{aliasHostBridge, "platform:i8042"},
			wantRounds:    2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sys := newFakeSys(t)
			sys.device("pci0000:00/0000:00:00.0", aliasHostBridge)
			sys.device("pci0000:00/0000:00:01.1", aliasPIIXIDE)
			sys.device("pci0000:00/0000:00:02.0", aliasVirtioNetPCI)
			sys.device("pci0000:00/0000:00:03.0", aliasVirtioBlkPCI)
			sys.device("platform/i8042", "platform:i8042")
			sys.device("platform/serial8250", "char-major-4-64") // a built-in's alias: not unmatched
			l := &recordingLoader{fail: tc.fail, onLoad: map[string]func(){
				"virtio_pci": func() {
					sys.device("pci0000:00/0000:00:02.0/virtio0", aliasVirtioNet)
					sys.device("pci0000:00/0000:00:03.0/virtio1", aliasVirtioBlk)
				},
			}}
			p := NewProber(ProberConfig{Index: openMini(t), Loader: l, SysDir: sys.dir, Settle: -1})
			res, err := p.Coldplug(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Loaded, tc.wantLoaded) {
				t.Errorf("Loaded = %q;\nwant %q", res.Loaded, tc.wantLoaded)
			}
			var errs []string
			for _, e := range res.Errors {
				errs = append(errs, e.Error())
			}
			if !reflect.DeepEqual(errs, tc.wantErrors) {
				t.Errorf("Errors = %q; want %q", errs, tc.wantErrors)
			}
			if !reflect.DeepEqual(res.Unmatched, tc.wantUnmatched) {
				t.Errorf("Unmatched = %q; want %q", res.Unmatched, tc.wantUnmatched)
			}
			if res.Rounds != tc.wantRounds {
				t.Errorf("Rounds = %d; want %d", res.Rounds, tc.wantRounds)
			}
			if got := p.Loaded(); !reflect.DeepEqual(got, res.Loaded) {
				t.Errorf("Prober.Loaded = %q; want what Coldplug reported, %q", got, res.Loaded)
			}
		})
	}
}

func TestColdplugMaxRounds(t *testing.T) {
	// Every load makes a new device appear that needs another module: the
	// round limit ends it.
	sys := newFakeSys(t)
	sys.device("a", "virtio:d00000001v00001AF4")
	n := 0
	l := LoaderFunc(func(path string) error {
		n++
		return nil
	})
	p := NewProber(ProberConfig{Index: openMini(t), Loader: l, SysDir: sys.dir, Settle: -1, MaxRounds: 1})
	res, err := p.Coldplug(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Rounds != 1 || n == 0 {
		t.Errorf("Rounds = %d with %d loads; want 1 round that loaded", res.Rounds, n)
	}
}

func TestColdplugErrors(t *testing.T) {
	t.Run("no sysfs", func(t *testing.T) {
		p := NewProber(ProberConfig{Index: openMini(t), Loader: &recordingLoader{}, SysDir: filepath.Join(t.TempDir(), "none")})
		if _, err := p.Coldplug(context.Background()); err == nil || !strings.Contains(err.Error(), "devices") {
			t.Errorf("Coldplug = %v; want an error naming the missing devices directory", err)
		}
	})
	t.Run("context ended", func(t *testing.T) {
		sys := newFakeSys(t)
		sys.device("a", aliasVirtioNetPCI)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		l := &recordingLoader{}
		p := NewProber(ProberConfig{Index: openMini(t), Loader: l, SysDir: sys.dir})
		if _, err := p.Coldplug(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Coldplug = %v; want context.Canceled", err)
		}
		if got := l.loaded(); len(got) != 0 {
			t.Errorf("loaded %q after the context ended", got)
		}
	})
}

// The network drivers first: only the network controller's chain loads,
// the disk controllers wait for the full coldplug.
func TestColdplugNetworkFirst(t *testing.T) {
	sys := newFakeSys(t)
	sys.device("pci0000:00/0000:00:01.1", aliasPIIXIDE)
	sys.device("pci0000:00/0000:00:02.0", aliasVirtioNetPCI)
	sys.device("pci0000:00/0000:00:03.0", aliasVirtioBlkPCI)
	l := &recordingLoader{onLoad: map[string]func(){
		"virtio_pci": func() {
			sys.device("pci0000:00/0000:00:02.0/virtio0", aliasVirtioNet)
			sys.device("pci0000:00/0000:00:03.0/virtio1", aliasVirtioBlk)
		},
	}}
	p := NewProber(ProberConfig{Index: openMini(t), Loader: l, SysDir: sys.dir, Settle: -1})
	res, err := p.ColdplugWith(context.Background(), ColdplugOptions{Keep: IsNetworkDevice})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
		"failover", "net_failover", "virtio_net"}
	if !reflect.DeepEqual(res.Loaded, want) {
		t.Errorf("network first: Loaded = %q;\nwant %q", res.Loaded, want)
	}
	if res.Rounds != 3 {
		t.Errorf("network first: %d rounds; want 3 (the last finds nothing new)", res.Rounds)
	}
	rest, err := p.Coldplug(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The virtio disk's driver before the IDE controller's, though the
	// controller comes first in sysfs: paravirtual devices go first.
	want = []string{"virtio_blk", "scsi_common", "scsi_mod", "libata", "ata_piix"}
	if !reflect.DeepEqual(rest.Loaded, want) {
		t.Errorf("then the rest: Loaded = %q;\nwant %q", rest.Loaded, want)
	}
}

func TestIsNetworkDevice(t *testing.T) {
	for alias, want := range map[string]bool{
		aliasVirtioNetPCI: true,
		aliasVirtioNet:    true,
		aliasVirtioBlkPCI: false,
		aliasVirtioBlk:    false,
		aliasPIIXIDE:      false,
		"pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00": true, // e1000
		"usb:v0BDAp8153d3000dc00dsc00dp00icFFisc00ip00in00":     false,
		"usb:v0BDAp8153d3000dc00dsc00dp00ic02isc06ip00in00":     true, // CDC Ethernet
		"platform:i8042": false,
	} {
		if got := IsNetworkDevice(alias); got != want {
			t.Errorf("IsNetworkDevice(%q) = %v; want %v", alias, got, want)
		}
	}
}

// Until ends a coldplug after the round that made it true.
func TestColdplugUntil(t *testing.T) {
	sys := newFakeSys(t)
	sys.device("pci0000:00/0000:00:02.0", aliasVirtioNetPCI)
	netUp := false
	l := &recordingLoader{onLoad: map[string]func(){
		"virtio_pci": func() { sys.device("pci0000:00/0000:00:02.0/virtio0", aliasVirtioNet) },
		"virtio_net": func() { netUp = true },
	}}
	p := NewProber(ProberConfig{Index: openMini(t), Loader: l, SysDir: sys.dir, Settle: -1})
	res, err := p.ColdplugWith(context.Background(), ColdplugOptions{Keep: IsNetworkDevice, Until: func() bool { return netUp }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rounds != 2 || !slices.Contains(res.Loaded, "virtio_net") {
		t.Errorf("Until: %d rounds, loaded %q; want 2 rounds ending with virtio_net", res.Rounds, res.Loaded)
	}
}

// link puts the device at path on a bus, as sysfs does:
// SYSDIR/bus/BUS/devices/NAME is a link to it.
func (s *fakeSys) link(bus, name, path string) {
	s.t.Helper()
	dir := filepath.Join(s.dir, "bus", bus, "devices")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "..", "devices", path), filepath.Join(dir, name)); err != nil {
		s.t.Fatal(err)
	}
}

// With a bus directory, the devices on buses and the CPU are read, not the
// whole tree (a device on no bus, like the i8042 here, is not).
func TestModaliasesByBus(t *testing.T) {
	sys := newFakeSys(t)
	sys.device("pci0000:00/0000:00:01.1", aliasPIIXIDE)
	sys.device("pci0000:00/0000:00:02.0", aliasVirtioNetPCI)
	sys.device("pci0000:00/0000:00:02.0/virtio0", aliasVirtioNet)
	sys.device("system/cpu", "cpu:type:x86,ven0000fam0006mod003F:feature:,0000,0001")
	sys.device("platform/i8042", "platform:i8042")
	sys.link("pci", "0000:00:01.1", "pci0000:00/0000:00:01.1")
	sys.link("pci", "0000:00:02.0", "pci0000:00/0000:00:02.0")
	sys.link("virtio", "virtio0", "pci0000:00/0000:00:02.0/virtio0")
	p := NewProber(ProberConfig{Index: openMini(t), Loader: &recordingLoader{}, SysDir: sys.dir, Settle: -1})
	got, err := p.modaliases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{aliasPIIXIDE, aliasVirtioNetPCI, aliasVirtioNet, "cpu:type:x86,ven0000fam0006mod003F:feature:,0000,0001"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("modaliases = %q;\nwant %q", got, want)
	}
}
