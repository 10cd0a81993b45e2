package kmod

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

// virtioMods is a small module set in modinfo form.
func virtioMods() []ModuleFile {
	return []ModuleFile{
		{Path: "kernel/drivers/virtio/virtio_ring.ko", Info: Modinfo{Name: "virtio_ring"}},
		{Path: "kernel/drivers/virtio/virtio.ko", Info: Modinfo{Name: "virtio", Depends: []string{"virtio_ring"}}},
		{Path: "kernel/net/core/failover.ko", Info: Modinfo{Name: "failover"}},
		{Path: "kernel/drivers/net/net_failover.ko", Info: Modinfo{Name: "net_failover", Depends: []string{"failover"}}},
		{Path: "kernel/drivers/net/virtio_net.ko", Info: Modinfo{Name: "virtio_net",
			Depends: []string{"net_failover", "virtio", "virtio_ring"}, Aliases: []string{"virtio:d00000001v*"}}},
		{Path: "kernel/fs/ext4/ext4.ko", Info: Modinfo{Name: "ext4", Aliases: []string{"fs-ext4"},
			Softdep: Softdep{Pre: []string{"crypto-crc32c"}}}},
	}
}

func TestGenerateIndex(t *testing.T) {
	files, err := GenerateIndex(virtioMods())
	if err != nil {
		t.Fatal(err)
	}
	wantDep := "kernel/drivers/virtio/virtio_ring.ko:\n" +
		"kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/net/core/failover.ko:\n" +
		"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\n" +
		"kernel/drivers/net/virtio_net.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\n" +
		"kernel/fs/ext4/ext4.ko:\n"
	if string(files.Dep) != wantDep {
		t.Errorf("modules.dep =\n%s\nwant\n%s", files.Dep, wantDep)
	}
	wantAlias := "# Aliases extracted from modules themselves.\nalias virtio:d00000001v* virtio_net\nalias fs-ext4 ext4\n"
	if string(files.Alias) != wantAlias {
		t.Errorf("modules.alias =\n%s\nwant\n%s", files.Alias, wantAlias)
	}
	wantSoft := "# Soft dependencies extracted from modules themselves.\nsoftdep ext4 pre: crypto-crc32c\n"
	if string(files.Softdep) != wantSoft {
		t.Errorf("modules.softdep =\n%s\nwant\n%s", files.Softdep, wantSoft)
	}

	// What Open reads from the files is what NewIndex builds directly.
	fromFiles, err := ReadIndex(fstest.MapFS{
		DepFile: {Data: files.Dep}, AliasFile: {Data: files.Alias}, SoftdepFile: {Data: files.Softdep},
	})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := NewIndex(virtioMods())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Index{fromFiles, direct} {
		if got, want := mustOrder(t, x, "virtio_net"), []string{"failover", "net_failover", "virtio_ring", "virtio", "virtio_net"}; !reflect.DeepEqual(got, want) {
			t.Errorf("LoadOrder(virtio_net) = %q; want %q", got, want)
		}
		if got, _ := x.Lookup("fs_ext4"); !reflect.DeepEqual(got, []string{"ext4"}) {
			t.Errorf("Lookup(fs_ext4) = %q; want [ext4]", got)
		}
		if got := x.Softdep("ext4").Pre; !reflect.DeepEqual(got, []string{"crypto-crc32c"}) {
			t.Errorf("Softdep(ext4).Pre = %q", got)
		}
		if got := x.Path("ext4"); got != "kernel/fs/ext4/ext4.ko" {
			t.Errorf("Path(ext4) = %q", got)
		}
	}
	// And the text parses back to the same lines.
	entries, err := ParseDep(bytes.NewReader(files.Dep))
	if err != nil || len(entries) != 6 {
		t.Errorf("ParseDep of the generated file: %d entries, %v", len(entries), err)
	}
}

func mustOrder(t *testing.T, x *Index, name string) []string {
	t.Helper()
	o, err := x.LoadOrder(name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestGenerateIndexErrors(t *testing.T) {
	tests := []struct {
		name    string
		mods    []ModuleFile
		wantErr string
	}{
		{"missing dependency", []ModuleFile{{Path: "a.ko", Info: Modinfo{Name: "a", Depends: []string{"b"}}}}, "needs b"},
		{"twice", []ModuleFile{{Path: "x/a.ko"}, {Path: "y/a.ko"}}, "module a twice"},
		{"cycle", []ModuleFile{
			{Path: "a.ko", Info: Modinfo{Depends: []string{"b"}}},
			{Path: "b.ko", Info: Modinfo{Depends: []string{"a"}}},
		}, "dependency cycle"},
		{"alias with a space", []ModuleFile{{Path: "a.ko", Info: Modinfo{Aliases: []string{"pci:v* x"}}}}, "white space"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := GenerateIndex(tc.mods)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("GenerateIndex error %v; want one containing %q", err, tc.wantErr)
			}
			if _, err := NewIndex(tc.mods); err == nil {
				t.Error("NewIndex succeeded; want the same error")
			}
		})
	}
}
