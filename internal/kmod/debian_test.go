package kmod

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/anvilproj/anvil/internal/testtool"
)

// debianModules returns the module directory that scripts/fetch-kernel.sh
// unpacks from Debian's linux-image package. Missing, the test fails in CI
// and is skipped elsewhere.
func debianModules(t *testing.T) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join("..", "..", ".cache", "kernel", "modules", "lib", "modules", "*"))
	if len(matches) != 1 {
		testtool.Need(t, "Debian's kernel modules in .cache/kernel (run `make kernel`, i.e. scripts/fetch-kernel.sh)")
	}
	return matches[0]
}

// readTree reads every module of a module directory, in modules.order
// order, then the rest by path.
func readTree(t *testing.T, dir string) []ModuleFile {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && IsModuleFile(d.Name()) {
			rel, _ := filepath.Rel(dir, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rank := map[string]int{}
	if data, err := os.ReadFile(filepath.Join(dir, OrderFile)); err == nil {
		for i, line := range strings.Fields(string(data)) {
			rank[line] = i + 1
		}
	}
	sort.SliceStable(paths, func(i, j int) bool {
		ri, rj := rank[paths[i]], rank[paths[j]]
		if (ri == 0) != (rj == 0) {
			return ri != 0
		}
		if ri != rj {
			return ri < rj
		}
		return paths[i] < paths[j]
	})
	mods := make([]ModuleFile, 0, len(paths))
	for _, p := range paths {
		mi, machine, err := ReadModuleFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if machine != elf.EM_X86_64 {
			t.Fatalf("%s: machine %v; want EM_X86_64", p, machine)
		}
		mods = append(mods, ModuleFile{Path: p, Info: mi})
	}
	return mods
}

// TestDebianTree generates the index of Debian's whole module tree and
// uses it: the virtio, disk and filesystem modules resolve as on a real
// machine.
func TestDebianTree(t *testing.T) {
	dir := debianModules(t)
	mods := readTree(t, dir)
	if len(mods) < 3000 {
		t.Fatalf("%d modules in %s; Debian's amd64 kernel has about 4,000", len(mods), dir)
	}
	files, err := GenerateIndex(mods)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for name, data := range map[string][]byte{DepFile: files.Dep, AliasFile: files.Alias, SoftdepFile: files.Softdep} {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{BuiltinFile, BuiltinModinfoFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	x, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}

	// LAB-NOTES.md names the order depmod's files give; any order that
	// loads each module after what it needs is as good.
	orders := []struct {
		module string
		want   []string // in depmod's order
	}{
		{"virtio_pci", []string{"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci"}},
		{"virtio_net", []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net"}},
		{"virtio_blk", []string{"virtio_ring", "virtio", "virtio_blk"}},
		{"vfat", []string{"fat", "vfat"}},
		{"ext4", []string{"jbd2", "mbcache", "crc16", "ext4"}},
	}
	for _, tc := range orders {
		got, err := x.LoadOrder(tc.module)
		if err != nil || !reflect.DeepEqual(sorted(got), sorted(tc.want)) {
			t.Errorf("LoadOrder(%s) = %q, %v; want the modules %q", tc.module, got, err, tc.want)
			continue
		}
		for i, m := range got {
			for _, d := range x.mods[m].deps {
				if j := slices.Index(got, d); j > i {
					t.Errorf("LoadOrder(%s) = %q: %s before its dependency %s", tc.module, got, m, d)
				}
			}
		}
	}
	lookups := []struct {
		modalias string
		want     string
	}{
		{aliasVirtioNetPCI, "virtio_pci"},
		{aliasVirtioNet, "virtio_net"},
		{aliasVirtioBlk, "virtio_blk"},
		{aliasE1000, "e1000"},
		{aliasPIIXIDE, "ata_piix"},
		{"pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01", "ahci"},         // QEMU q35's ICH9 AHCI
		{"pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02", "nvme"},         // QEMU's NVMe
		{"pci:v00001000d00000097sv00001000sd00003090bc01sc07i00", "mpt3sas"},      // LSI SAS3008
		{"pci:v00001000d0000005Dsv00001028sd00001F49bc01sc04i00", "megaraid_sas"}, // Dell PERC H730
		{"fs-vfat", "vfat"},
		{"crypto-crc32c", "crc32c_intel"},
	}
	for _, tc := range lookups {
		if got, _ := x.Lookup(tc.modalias); !slices.Contains(got, tc.want) {
			t.Errorf("Lookup(%s) = %q; want it to include %s", tc.modalias, got, tc.want)
		}
	}
	if !x.IsBuiltin("unix") {
		t.Error("IsBuiltin(unix) = false; Debian builds unix sockets in")
	}
}

// TestDebianTreeMatchesDepmod compares GenerateIndex with kmod's depmod on
// the same tree: every module needs the same set of modules, has the same
// aliases and the same soft dependencies. depmod comes from Debian's kmod
// package (scripts/install-deps.sh).
func TestDebianTreeMatchesDepmod(t *testing.T) {
	dir := debianModules(t)
	depmod, err := exec.LookPath("depmod")
	if err != nil {
		for _, p := range []string{"/usr/sbin/depmod", "/sbin/depmod"} {
			if _, serr := os.Stat(p); serr == nil {
				depmod, err = p, nil
			}
		}
	}
	if err != nil {
		testtool.Need(t, "depmod (Debian package kmod; scripts/install-deps.sh installs it)")
	}
	// depmod -b BASE writes into BASE/lib/modules/RELEASE: give it a
	// directory whose kernel/ links to the real tree.
	release := filepath.Base(dir)
	base := t.TempDir()
	ref := filepath.Join(base, "lib", "modules", release)
	if err := os.MkdirAll(ref, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Join(dir, "kernel"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(ref, "kernel")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{OrderFile, BuiltinFile, BuiltinModinfoFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ref, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(depmod, "-b", base, release).CombinedOutput(); err != nil {
		t.Fatalf("depmod: %v\n%s", err, out)
	}

	files, err := GenerateIndex(readTree(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(ref, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	wantDeps, err := ParseDep(bytes.NewReader(read(DepFile)))
	if err != nil {
		t.Fatalf("parse depmod's %s: %v", DepFile, err)
	}
	gotDeps, err := ParseDep(bytes.NewReader(files.Dep))
	if err != nil {
		t.Fatal(err)
	}
	if len(gotDeps) != len(wantDeps) {
		t.Errorf("%d modules.dep lines; depmod wrote %d", len(gotDeps), len(wantDeps))
	}
	got := map[string][]string{}
	for _, d := range gotDeps {
		got[d.Path] = sorted(d.Deps)
	}
	for i, d := range wantDeps {
		if i < len(gotDeps) && gotDeps[i].Path != d.Path {
			t.Errorf("modules.dep line %d is %s; depmod's is %s (modules.order)", i+1, gotDeps[i].Path, d.Path)
		}
		if g, ok := got[d.Path]; !ok {
			t.Errorf("%s: missing", d.Path)
		} else if w := sorted(d.Deps); !reflect.DeepEqual(g, w) {
			t.Errorf("%s needs %q; depmod says %q", d.Path, g, w)
		}
	}

	if g, w := lines(files.Alias), lines(read(AliasFile)); !reflect.DeepEqual(g, w) {
		t.Errorf("modules.alias: %d lines differ from depmod's %d (first difference: %s)", len(g), len(w), firstDiff(g, w))
	}
	wantSoft, err := ParseSoftdep(bytes.NewReader(read(SoftdepFile)))
	if err != nil {
		t.Fatalf("parse depmod's %s: %v", SoftdepFile, err)
	}
	gotSoft, err := ParseSoftdep(bytes.NewReader(files.Softdep))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotSoft, wantSoft) {
		t.Errorf("modules.softdep = %+v;\ndepmod's %+v", gotSoft, wantSoft)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// lines returns the non-comment lines of data, sorted.
func lines(data []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + " vs " + b[i]
		}
	}
	return "one is a prefix of the other"
}

// TestReadCompressedModule reads a real module compressed the three ways
// distributions ship them (Debian from trixie on: .ko.xz) and checks
// what comes out is the module.
func TestReadCompressedModule(t *testing.T) {
	dir := debianModules(t)
	src := filepath.Join(dir, "kernel", "drivers", "net", "virtio_net.ko")
	plain, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := ReadModuleFile(src)
	if err != nil {
		t.Fatal(err)
	}
	writers := map[string]func(io.Writer) (io.WriteCloser, error){
		".xz":  func(w io.Writer) (io.WriteCloser, error) { return xz.NewWriter(w) },
		".zst": func(w io.Writer) (io.WriteCloser, error) { return zstd.NewWriter(w) },
		".gz":  func(w io.Writer) (io.WriteCloser, error) { return gzip.NewWriter(w), nil },
	}
	for ext, newWriter := range writers {
		t.Run(ext, func(t *testing.T) {
			var b bytes.Buffer
			w, err := newWriter(&b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(plain); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "virtio_net.ko"+ext)
			if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			got, machine, err := ReadModuleFile(p)
			if err != nil || machine != elf.EM_X86_64 || !reflect.DeepEqual(got, want) {
				t.Errorf("ReadModuleFile(%s) = %+v, %v, %v; want %+v", p, got, machine, err, want)
			}
			data, err := ReadModule(p)
			if err != nil || !bytes.Equal(data, plain) {
				t.Errorf("ReadModule(%s): %d bytes, %v; want the %d bytes of the module", p, len(data), err, len(plain))
			}
			if UncompressedPath(p) != strings.TrimSuffix(p, ext) || ModuleName(p) != "virtio_net" {
				t.Errorf("UncompressedPath/ModuleName of %s wrong", p)
			}
		})
	}
}
