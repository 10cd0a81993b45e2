package actions

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sysTree is a machine's /sys, /proc and /dev as files under a directory:
// the commissioning actions' Config.SysRoot in tests.
type sysTree struct {
	t    *testing.T
	root string
}

func newSysTree(t *testing.T) *sysTree {
	return &sysTree{t: t, root: t.TempDir()}
}

func (s *sysTree) write(p, content string) {
	s.t.Helper()
	full := filepath.Join(s.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// disk adds a disk: its sysfs directory (with a device unless virtual),
// its size in sectors as the kernel gives it, and a /dev node that is a
// regular file of fileBytes.
func (s *sysTree) disk(name string, sectors int64, fileBytes int, virtual bool) {
	s.t.Helper()
	s.write("sys/block/"+name+"/size", fmt.Sprintf("%d\n", sectors))
	s.write("sys/block/"+name+"/removable", "0\n")
	if !virtual {
		s.write("sys/block/"+name+"/device/model", "test disk\n")
	}
	b := make([]byte, fileBytes)
	for i := range b {
		b[i] = byte(i * 7)
	}
	s.write("dev/"+name, string(b))
}

// nic adds a NIC; carrier "" leaves the file out, as a down interface
// cannot be read.
func (s *sysTree) nic(name, mac, carrier, speed string, physical bool) {
	s.write("sys/class/net/"+name+"/address", mac+"\n")
	s.write("sys/class/net/"+name+"/operstate", map[bool]string{true: "up\n", false: "down\n"}[carrier == "1"])
	if carrier != "" {
		s.write("sys/class/net/"+name+"/carrier", carrier+"\n")
	}
	if speed != "" {
		s.write("sys/class/net/"+name+"/speed", speed+"\n")
	}
	if physical {
		s.write("sys/class/net/"+name+"/device/vendor", "0x1af4\n")
	}
}

// fakeIoctls answers NVMe Get Log Page and SG_IO by device name.
type fakeIoctls struct {
	nvme map[string][]byte // log page by device base name
	sg   map[string][]byte // sense data by device base name
	err  map[string]error
}

func (f *fakeIoctls) nvmeLog(file *os.File, id uint8, buf []byte) error {
	name := filepath.Base(file.Name())
	if err := f.err[name]; err != nil {
		return err
	}
	if id != nvmeLogSMART {
		return fmt.Errorf("log page %d asked, want the SMART page", id)
	}
	page, ok := f.nvme[name]
	if !ok {
		return fmt.Errorf("%w: ENOTTY", errNotSupported)
	}
	copy(buf, page)
	return nil
}

func (f *fakeIoctls) sgIO(file *os.File, cdb, sense []byte) (int, error) {
	name := filepath.Base(file.Name())
	if err := f.err[name]; err != nil {
		return 0, err
	}
	if string(cdb) != string(ataSMARTReturnStatus) {
		return 0, fmt.Errorf("unexpected command % x", cdb)
	}
	s, ok := f.sg[name]
	if !ok {
		return 0, fmt.Errorf("%w: ENOTTY", errNotSupported)
	}
	return copy(sense, s), nil
}

// nvmePage is a SMART / Health Information log page.
func nvmePage(critical, used byte, mediaErrors uint64, tempK uint16) []byte {
	b := make([]byte, nvmeLogSMARTSize)
	b[0] = critical
	binary.LittleEndian.PutUint16(b[1:], tempK)
	b[3], b[4], b[5] = 100, 10, used
	binary.LittleEndian.PutUint64(b[128:], 1234) // power-on hours
	binary.LittleEndian.PutUint64(b[160:], mediaErrors)
	return b
}

// ataSense is descriptor-format sense data with an ATA Status Return
// descriptor carrying LBA mid and high.
func ataSense(mid, high byte) []byte {
	d := []byte{0x09, 0x0c, 0, 0, 0, 0, 0, 0, 0, mid, 0, high, 0, 0x50}
	return append([]byte{0x72, 0x01, 0x00, 0x1d, 0, 0, 0, byte(len(d))}, d...)
}

func (s *sysTree) catalog(io *fakeIoctls) *Catalog {
	cfg := newMachine(s.t).config()
	cfg.SysRoot = s.root
	if io != nil {
		cfg.NVMeLog, cfg.SGIO = io.nvmeLog, io.sgIO
	}
	return New(cfg)
}

func runCommission(t *testing.T, c *Catalog, image string, env map[string]string) (Result, *recorder, error) {
	t.Helper()
	out := &recorder{}
	res, err := runAction(t, c, image, Spec{Env: env}, out)
	return res, out, err
}

// checkResults maps each check's name to its result.
func checkResults(res Result) map[string]string {
	m := map[string]string{}
	for _, c := range res.Checks {
		m[c.Name] = c.Result
	}
	return m
}

func findCheck(t *testing.T, res Result, name string) Check {
	t.Helper()
	for _, c := range res.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %s in %+v", name, res.Checks)
	return Check{}
}

func TestCommissionSmart(t *testing.T) {
	s := newSysTree(t)
	s.disk("nvme0n1", 8, 4096, false)
	s.disk("sda", 8, 4096, false)
	s.disk("vda", 8, 4096, false)
	s.disk("loop0", 8, 4096, true) // virtual: not checked
	io := &fakeIoctls{
		nvme: map[string][]byte{"nvme0n1": nvmePage(0, 3, 0, 310)},
		sg:   map[string][]byte{"sda": ataSense(0x4f, 0xc2)},
	}
	res, out, err := runCommission(t, s.catalog(io), "anvil/commission-smart:v1", nil)
	if err != nil {
		t.Fatalf("smart: %v\n%s", err, out.text(""))
	}
	want := map[string]string{"smart/nvme0n1": CheckPassed, "smart/sda": CheckPassed, "smart/vda": CheckUnsupported}
	if got := checkResults(res); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	nv := findCheck(t, res, "smart/nvme0n1")
	for k, v := range map[string]string{"percentageUsed": "3", "mediaErrors": "0", "temperatureCelsius": "37", "powerOnHours": "1234", "criticalWarning": "0x00"} {
		if nv.Values[k] != v {
			t.Errorf("nvme0n1 %s = %q, want %q (values %v)", k, nv.Values[k], v, nv.Values)
		}
	}
	if nv.Time.IsZero() {
		t.Error("a check has no time")
	}
	if !strings.Contains(out.text(StreamAction), "smart/vda: unsupported") {
		t.Errorf("no line for the unsupported disk:\n%s", out.text(""))
	}
}

func TestCommissionSmartFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		io   fakeIoctls
		env  map[string]string
		want string // in the failed check's detail
	}{
		{"critical warning", fakeIoctls{nvme: map[string][]byte{"nvme0n1": nvmePage(0x04, 3, 0, 300)}}, nil, "reliability degraded"},
		{"media errors", fakeIoctls{nvme: map[string][]byte{"nvme0n1": nvmePage(0, 3, 2, 300)}}, nil, "2 media errors"},
		{"media errors allowed", fakeIoctls{nvme: map[string][]byte{"nvme0n1": nvmePage(0, 3, 2, 300)}}, map[string]string{"SMART_MAX_MEDIA_ERRORS": "2"}, ""},
		{"worn out", fakeIoctls{nvme: map[string][]byte{"nvme0n1": nvmePage(0, 100, 0, 300)}}, nil, "100% of its rated endurance"},
		{"worn below limit", fakeIoctls{nvme: map[string][]byte{"nvme0n1": nvmePage(0, 85, 0, 300)}}, map[string]string{"SMART_MAX_PERCENTAGE_USED": "80"}, "85% of its rated endurance"},
		{"ata threshold", fakeIoctls{sg: map[string][]byte{"sda": ataSense(0xf4, 0x2c)}}, map[string]string{"DISKS": "/dev/sda"}, "threshold was exceeded"},
		{"ata odd answer", fakeIoctls{sg: map[string][]byte{"sda": ataSense(0x00, 0x00)}}, map[string]string{"DISKS": "sda"}, "neither healthy"},
		{"ioctl I/O error", fakeIoctls{err: map[string]error{"nvme0n1": syscall.EIO}}, map[string]string{"DISKS": "nvme0n1"}, "input/output error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSysTree(t)
			s.disk("nvme0n1", 8, 4096, false)
			s.disk("sda", 8, 4096, false)
			env := map[string]string{"DISKS": "nvme0n1"}
			for k, v := range tc.env {
				env[k] = v
			}
			res, _, err := runCommission(t, s.catalog(&tc.io), NameCommissionSmart, env)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want a pass, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if len(res.Checks) != 1 || res.Checks[0].Result != CheckFailed || !strings.Contains(res.Checks[0].Detail, tc.want) {
				t.Fatalf("checks %+v, want one failed saying %q", res.Checks, tc.want)
			}
		})
	}
}

// TestCommissionBadEnv: an environment the action cannot use fails it
// with a failed check that says why, so that the machine is marked.
func TestCommissionBadEnv(t *testing.T) {
	s := newSysTree(t)
	s.disk("sda", 8, 4096, false)
	s.nic("eth0", "52:54:00:00:00:01", "1", "1000", true)
	s.write("proc/meminfo", "MemTotal: 1000 kB\n")
	for _, tc := range []struct{ image, key, value, want string }{
		{NameCommissionSmart, "SMART_MAX_MEDIA_ERRORS", "-1", "SMART_MAX_MEDIA_ERRORS"},
		{NameCommissionSmart, "DISKS", "sdz", "sdz is not a disk of this machine"},
		{NameCommissionSmart, "DISKS", "../etc", "not a disk"},
		{NameCommissionDiskRead, "DISK_READ_MIB", "0", "DISK_READ_MIB"},
		{NameCommissionMemory, "MIN_MEMORY", "lots", `"lots" is not a size`},
		{NameCommissionNICLink, "NIC_LINK_REQUIRED", "eth9", "eth9 is not a physical NIC of this machine (it has eth0 (52:54:00:00:00:01))"},
	} {
		res, _, err := runCommission(t, s.catalog(&fakeIoctls{}), tc.image, map[string]string{tc.key: tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s=%q: error %v, want one saying %q", tc.image, tc.key, tc.value, err, tc.want)
			continue
		}
		if len(res.Checks) != 1 || res.Checks[0].Name != tc.image || res.Checks[0].Result != CheckFailed {
			t.Errorf("%s %s=%q: checks %+v, want one failed check named %s", tc.image, tc.key, tc.value, res.Checks, tc.image)
		}
	}
}

func TestCommissionDiskRead(t *testing.T) {
	s := newSysTree(t)
	const size = 64 << 20
	s.disk("sda", size/512, size, false)
	s.disk("vda", 3*4096/512, 3*4096, false) // smaller than the read size
	res, out, err := runCommission(t, s.catalog(nil), NameCommissionDiskRead, map[string]string{"DISK_READ_MIB": "2"})
	if err != nil {
		t.Fatalf("disk-read: %v\n%s", err, out.text(""))
	}
	sda := findCheck(t, res, "disk-read/sda")
	if sda.Result != CheckPassed || sda.Values["bytesRead"] != fmt.Sprint(3*2<<20) || sda.Values["readMBps"] == "" {
		t.Errorf("sda: %+v; want passed, 6 MiB read and a rate", sda)
	}
	if vda := findCheck(t, res, "disk-read/vda"); vda.Result != CheckPassed || vda.Values["bytesRead"] != fmt.Sprint(3*3*4096) {
		t.Errorf("vda: %+v; want passed, the whole small disk read at each place", vda)
	}
}

// TestCommissionDiskReadShort: a disk that ends before the size the
// kernel gives it fails with a short read.
func TestCommissionDiskReadShort(t *testing.T) {
	s := newSysTree(t)
	s.disk("sda", (16<<20)/512, 12<<20, false)
	res, _, err := runCommission(t, s.catalog(nil), NameCommissionDiskRead, map[string]string{"DISK_READ_MIB": "1"})
	if err == nil || !strings.Contains(err.Error(), "short read at byte") {
		t.Fatalf("error %v, want a short read", err)
	}
	c := findCheck(t, res, "disk-read/sda")
	// The start and middle (8 MiB) are inside the file's 12 MiB; the end
	// (15 MiB) is past it.
	if c.Result != CheckFailed || !strings.Contains(c.Detail, "short read at byte 15728640 (end): 0 of 1048576 bytes") {
		t.Fatalf("check %+v: want a short read at the end", c)
	}
}

// erringDisk fails every read that reaches failAt with EIO.
type erringDisk struct {
	*os.File
	failAt int64
}

func (d erringDisk) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > d.failAt {
		n, _ := d.File.ReadAt(p[:max(d.failAt-off, 0)], off)
		return n, &os.PathError{Op: "read", Path: d.Name(), Err: syscall.EIO}
	}
	return d.File.ReadAt(p, off)
}

func TestCommissionDiskReadIOError(t *testing.T) {
	s := newSysTree(t)
	s.disk("sda", (16<<20)/512, 16<<20, false)
	cfg := newMachine(t).config()
	cfg.SysRoot = s.root
	var flags []int
	cfg.OpenDisk = func(path string, fl int) (DiskReader, error) {
		flags = append(flags, fl)
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		return erringDisk{f, 8<<20 + 4096}, nil
	}
	res, _, err := runCommission(t, New(cfg), NameCommissionDiskRead, map[string]string{"DISK_READ_MIB": "1"})
	if err == nil || !strings.Contains(err.Error(), "read error at byte 8392704 (middle)") || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("error %v, want an I/O error in the middle at byte 8392704", err)
	}
	if c := findCheck(t, res, "disk-read/sda"); c.Result != CheckFailed || c.Values["failedAtByte"] != "8392704" {
		t.Fatalf("check %+v", c)
	}
	if len(flags) != 1 || flags[0]&openDirect != openDirect {
		t.Errorf("opened with flags %v, want O_DIRECT", flags)
	}
}

func TestCommissionMemory(t *testing.T) {
	dimm := func(mib uint16) string {
		b := make([]byte, 0x28)
		b[0], b[1] = 17, 0x28
		binary.LittleEndian.PutUint16(b[0x0c:], mib)
		return string(b) + "DIMM 0\x00\x00"
	}
	// A table: BIOS (type 0, no strings), the devices, the end.
	table := func(dimms []string) string {
		t := "\x00\x04\x00\x00\x00\x00"
		for _, d := range dimms {
			t += d
		}
		return t + "\x7f\x04\x00\x00\x00\x00"
	}
	for _, tc := range []struct {
		name, memTotalKB string
		dimms            []string
		env              map[string]string
		want, detail     string
	}{
		{"matches SMBIOS", "1000000", []string{dimm(512), dimm(512), dimm(0)}, nil, CheckPassed, "of 1.0 GiB installed (2 modules, SMBIOS)"},
		{"module missing", "600000", []string{dimm(512), dimm(512)}, nil, CheckFailed, "less than 90% of the installed memory"},
		{"tolerance", "600000", []string{dimm(512), dimm(512)}, map[string]string{"MEMORY_TOLERANCE_PERCENT": "50"}, CheckPassed, "MemTotal 585.9 MiB"},
		{"no SMBIOS, minimum met", "16000000", nil, map[string]string{"MIN_MEMORY": "15GiB"}, CheckPassed, "installed memory unknown"},
		{"below minimum", "16000000", nil, map[string]string{"MIN_MEMORY": "16GB"}, CheckFailed, "below MIN_MEMORY 16.0 GiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSysTree(t)
			s.write("proc/meminfo", "MemTotal:       "+tc.memTotalKB+" kB\nMemFree: 1 kB\n")
			if tc.dimms != nil {
				s.write("sys/firmware/dmi/tables/DMI", table(tc.dimms))
			}
			res, _, err := runCommission(t, s.catalog(nil), "quay.io/anvil/commission-memory", tc.env)
			c := findCheck(t, res, "memory")
			if c.Result != tc.want || !strings.Contains(c.Detail, tc.detail) {
				t.Fatalf("check %+v, want %s saying %q", c, tc.want, tc.detail)
			}
			if (err != nil) != (tc.want == CheckFailed) {
				t.Fatalf("error %v with a %s check", err, c.Result)
			}
			if c.Values["memTotalBytes"] != fmt.Sprint(mustAtoi(t, tc.memTotalKB)*1024) {
				t.Errorf("memTotalBytes %q", c.Values["memTotalBytes"])
			}
		})
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCommissionNICLink(t *testing.T) {
	s := newSysTree(t)
	s.nic("eth0", "52:54:00:00:00:01", "1", "1000", true)
	s.nic("eth1", "52:54:00:00:00:02", "", "", true) // down
	s.nic("lo", "00:00:00:00:00:00", "1", "", false)
	s.nic("br0", "52:54:00:00:00:09", "1", "", false)
	for _, tc := range []struct {
		env  map[string]string
		want map[string]string
		err  string
	}{
		{nil, map[string]string{"nic-link/eth0": CheckPassed, "nic-link/eth1": CheckPassed}, ""},
		{map[string]string{"NIC_LINK_REQUIRED": "eth0"}, map[string]string{"nic-link/eth0": CheckPassed, "nic-link/eth1": CheckPassed}, ""},
		{map[string]string{"NIC_LINK_REQUIRED": "52:54:00:00:00:02"}, map[string]string{"nic-link/eth0": CheckPassed, "nic-link/eth1": CheckFailed}, "nic-link/eth1: no link (operstate down), and NIC_LINK_REQUIRED names it"},
		{map[string]string{"NIC_LINK_REQUIRED": "all"}, map[string]string{"nic-link/eth0": CheckPassed, "nic-link/eth1": CheckFailed}, "1 of 2 checks failed"},
		{map[string]string{"NIC_MIN_SPEED_MBPS": "10000"}, map[string]string{"nic-link/eth0": CheckFailed, "nic-link/eth1": CheckPassed}, "link up at 1000 Mb/s, below NIC_MIN_SPEED_MBPS 10000"},
	} {
		res, _, err := runCommission(t, s.catalog(nil), NameCommissionNICLink, tc.env)
		if got := checkResults(res); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v: results %v, want %v", tc.env, got, tc.want)
		}
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: error %v, want %q", tc.env, err, tc.err)
		}
	}
	res, _, _ := runCommission(t, s.catalog(nil), NameCommissionNICLink, nil)
	if v := findCheck(t, res, "nic-link/eth0").Values; v["speedMbps"] != "1000" || v["carrier"] != "true" || v["mac"] != "52:54:00:00:00:01" {
		t.Errorf("eth0 values %v", v)
	}
}

// TestCommissionRealIoctls: the ioctls themselves, on a loop device
// (neither NVMe nor SCSI): both say "not supported", which is how the
// action tells an unsupported disk from a failing one.
func TestCommissionRealIoctls(t *testing.T) {
	needRoot(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dev := loopDevice(t, img)
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := sgIO(f, ataSMARTReturnStatus, make([]byte, 64)); !errors.Is(err, errNotSupported) {
		t.Errorf("SG_IO on %s: %v, want not supported", dev, err)
	}
	if err := nvmeLog(f, nvmeLogSMART, make([]byte, nvmeLogSMARTSize)); !errors.Is(err, errNotSupported) {
		t.Errorf("NVMe admin on %s: %v, want not supported", dev, err)
	}
	// And O_DIRECT reads of a real block device.
	s := newSysTree(t)
	s.write("sys/block/loop9/size", "2048\n")
	s.write("sys/block/loop9/device/x", "")
	cfg := newMachine(t).config()
	cfg.SysRoot = s.root
	cfg.OpenDisk = func(_ string, flags int) (DiskReader, error) { return openDisk(dev, flags) }
	res, _, err := runCommission(t, New(cfg), NameCommissionDiskRead, map[string]string{"DISK_READ_MIB": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if c := findCheck(t, res, "disk-read/loop9"); c.Values["direct"] != "true" {
		t.Errorf("check %+v, want an O_DIRECT read", c)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"16GiB": 16 << 30, "16G": 16 << 30, "16gb": 16 << 30, "512MiB": 512 << 20, "1024": 1024, "7 K": 7 << 10, "3B": 3, "2TiB": 2 << 40} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "16X", "16iB", "-1G", "1.5G", "99999999999999999999", "16384P"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
}

func TestParseATAStatusFixedFormat(t *testing.T) {
	// Fixed-format sense as libata writes it when D_SENSE is off: ASC/ASCQ
	// 00h/1Dh, LBA mid and high in the command-specific information.
	sense := []byte{0x70, 0, 0x01, 0, 0x50, 0, 0, 10, 0, 0, 0xf4, 0x2c, 0x00, 0x1d, 0, 0, 0, 0}
	if st, mid, high := parseATAStatus(sense); st != ataThreshold || mid != 0xf4 || high != 0x2c {
		t.Fatalf("parseATAStatus = %v %x %x", st, mid, high)
	}
	// ILLEGAL REQUEST: a SAS disk does not take ATA PASS-THROUGH.
	sense = []byte{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0x00, 0, 0, 0, 0}
	if st, _, _ := parseATAStatus(sense); st != ataNoAnswer {
		t.Fatalf("illegal request: %v, want no answer", st)
	}
}

// TestCommissionWaitsForNVMe: an NVMe controller still being reset, its
// namespace not yet scanned, is waited for: the check covers the disk
// that appears meanwhile.
func TestCommissionWaitsForNVMe(t *testing.T) {
	s := newSysTree(t)
	s.disk("vda", 8, 4096, false)
	s.write("sys/class/nvme/nvme0/state", "resetting\n")
	cfg := newMachine(t).config()
	cfg.SysRoot, cfg.Clock = s.root, nil // the real clock: the disk appears in real time
	io := &fakeIoctls{nvme: map[string][]byte{"nvme0n1": nvmePage(0, 1, 0, 300)}}
	cfg.NVMeLog, cfg.SGIO = io.nvmeLog, io.sgIO
	go func() {
		time.Sleep(50 * time.Millisecond)
		s.disk("nvme0n1", 8, 4096, false)
		s.write("sys/class/nvme/nvme0/nvme0c0n1/size", "8\n")
		s.write("sys/class/nvme/nvme0/state", "live\n")
	}()
	res, _, err := runCommission(t, New(cfg), NameCommissionSmart, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := checkResults(res); got["smart/nvme0n1"] != CheckPassed || got["smart/vda"] != CheckUnsupported {
		t.Fatalf("results %v; want the NVMe disk that appeared checked", got)
	}
}

func TestScansDevices(t *testing.T) {
	for image, want := range map[string]bool{"anvil/commission-smart:v1": true, "commission-disk-read": true,
		"commission-nic-link": true, "commission-memory": false, "image2disk": false} {
		if got := ScansDevices(Spec{Image: image}); got != want {
			t.Errorf("ScansDevices(%s) = %v", image, got)
		}
	}
}
