package kmod

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestModuleName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"kernel/drivers/net/virtio_net.ko", "virtio_net"},
		{"kernel/arch/x86/crypto/crc32c-intel.ko", "crc32c_intel"},
		{"kernel/fs/xfs/xfs.ko.xz", "xfs"},
		{"kernel/fs/btrfs/btrfs.ko.zst", "btrfs"},
		{"x.ko.gz", "x"},
		{"crc32c-intel", "crc32c_intel"},
		{"virtio_net", "virtio_net"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := ModuleName(tc.in); got != tc.want {
				t.Errorf("ModuleName(%q) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestNormalizeAlias(t *testing.T) {
	tests := []struct{ in, want string }{
		{"fs-ext4", "fs_ext4"},
		{"crypto-crc32c", "crypto_crc32c"},
		{"pci:v00001AF4d*sv*", "pci:v00001AF4d*sv*"},
		{"x-[a-f]-y", "x_[a-f]_y"},
		{"[]-]-", "[]-]_"},
		{"[!]-]-", "[!]-]_"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := normalizeAlias(tc.in); got != tc.want {
				t.Errorf("normalizeAlias(%q) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseDep(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []DepEntry
		wantErr string
	}{
		{
			name: "real lines",
			in: "kernel/drivers/virtio/virtio_ring.ko:\n" +
				"kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\n",
			want: []DepEntry{
				{Path: "kernel/drivers/virtio/virtio_ring.ko"},
				{Path: "kernel/drivers/net/virtio_net.ko", Deps: []string{"kernel/drivers/net/net_failover.ko", "kernel/net/core/failover.ko"}},
			},
		},
		{name: "comments and blanks", in: "# c\n\n  \nx.ko: y.ko\ny.ko:\n",
			want: []DepEntry{{Path: "x.ko", Deps: []string{"y.ko"}}, {Path: "y.ko"}}},
		{name: "empty", in: "", want: nil},
		{name: "no colon", in: "x.ko:\nkernel/y.ko z.ko\n", wantErr: "modules.dep line 2"},
		{name: "empty path", in: ": y.ko\n", wantErr: "modules.dep line 1"},
		{name: "space in path", in: "a b.ko: y.ko\n", wantErr: "modules.dep line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDep(strings.NewReader(tc.in))
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseDep = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestParseAlias(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Alias
		wantErr string
	}{
		{
			name: "real lines",
			in: "# Aliases extracted from modules themselves.\n" +
				"alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci\n" +
				"alias crc32c-intel crc32c_intel\n" +
				"alias crypto-crc32c crc32c-intel\n",
			want: []Alias{
				{Pattern: "pci:v00001AF4d*sv*sd*bc*sc*i*", Module: "virtio_pci"},
				{Pattern: "crc32c-intel", Module: "crc32c_intel"},
				{Pattern: "crypto-crc32c", Module: "crc32c_intel"},
			},
		},
		{name: "two fields", in: "alias virtio:d00000001v*\n", wantErr: "modules.alias line 1"},
		{name: "other directive", in: "alias a b\noptions x y=1\n", wantErr: "modules.alias line 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAlias(strings.NewReader(tc.in))
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseAlias = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestParseSoftdep(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]Softdep
		wantErr string
	}{
		{
			name: "real lines",
			in: "# Soft dependencies extracted from modules themselves.\n" +
				"softdep ext4 pre: crypto-crc32c\n" +
				"softdep cifs gcm\n" + // no pre:/post: — modprobe ignores the word
				"softdep cifs pre: md4 post: x\n" +
				"softdep cifs pre: arc4\n" +
				"options ext4 debug=1\n",
			want: map[string]Softdep{
				"ext4": {Pre: []string{"crypto-crc32c"}},
				"cifs": {Pre: []string{"md4", "arc4"}, Post: []string{"x"}},
			},
		},
		{name: "module only", in: "softdep\n", wantErr: "modules.softdep line 1"},
		{name: "no name left", in: "softdep x pre: y\nsoftdep .ko pre: a\n", wantErr: `modules.softdep line 2: ".ko" is not a module name`},
		{name: "a file name twice", in: "softdep x.ko.ko pre: a\n", wantErr: `"x.ko.ko" is not a module name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSoftdep(strings.NewReader(tc.in))
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseSoftdep = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestParseBuiltin(t *testing.T) {
	got, err := ParseBuiltin(strings.NewReader("kernel/drivers/tty/serial/8250/8250_base.ko\nkernel/arch/x86/crypto/crc32c-intel.ko\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"8250_base", "crc32c_intel"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ParseBuiltin = %q; want %q", got, want)
	}
	if _, err := ParseBuiltin(strings.NewReader("a.ko b.ko\n")); err == nil {
		t.Error("ParseBuiltin accepted two paths on a line")
	}
}

func TestParseModinfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Modinfo
		wantErr string
	}{
		{
			name: "virtio_pci",
			in: "alias=pci:v00001AF4d*sv*sd*bc*sc*i*\x00depends=virtio_ring,virtio_pci_modern_dev,virtio_pci_legacy_dev,virtio\x00" +
				"retpoline=Y\x00intree=Y\x00name=virtio_pci\x00vermagic=6.1.0-56-amd64 SMP preempt mod_unload modversions \x00license=GPL\x00\x00\x00",
			want: Modinfo{Name: "virtio_pci", Aliases: []string{"pci:v00001AF4d*sv*sd*bc*sc*i*"},
				Depends:  []string{"virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio"},
				Vermagic: "6.1.0-56-amd64 SMP preempt mod_unload modversions ", License: "GPL"},
		},
		{
			name: "empty depends, softdep, firmware",
			in:   "depends=\x00softdep=pre: crypto-crc32c\x00firmware=e100/d101m_ucode.bin\x00name=crc-t10dif",
			want: Modinfo{Name: "crc-t10dif", Softdep: Softdep{Pre: []string{"crypto-crc32c"}}, Firmware: []string{"e100/d101m_ucode.bin"}},
		},
		{name: "depends spelled with dash", in: "depends=crc32c-intel,,x\x00",
			want: Modinfo{Depends: []string{"crc32c_intel", "x"}}},
		{name: "not key=value", in: "name=x\x00garbage\x00", wantErr: "not key=value"},
		{name: "empty key", in: "=x\x00", wantErr: "not key=value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseModinfo([]byte(tc.in))
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseModinfo = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestParseBuiltinModinfo(t *testing.T) {
	in := "8250.alias=char-major-4-*\x008250.license=GPL\x00sha256_generic.alias=sha256\x00sha256_generic.alias=crypto-sha256\x00" +
		"nodot=1\x00"
	got, err := ParseBuiltinModinfo([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*Modinfo{
		"8250":           {Name: "8250", Aliases: []string{"char-major-4-*"}, License: "GPL"},
		"sha256_generic": {Name: "sha256_generic", Aliases: []string{"sha256", "crypto-sha256"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseBuiltinModinfo = %+v; want %+v", got, want)
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error; want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q; want one containing %q", err, want)
	}
}

// The fuzz targets feed the index parsers arbitrary text: they must not
// panic, and what they accept must survive a round trip through the text
// format depmod writes.

func FuzzParseDep(f *testing.F) {
	f.Add("kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\nkernel/net/core/failover.ko:\n")
	f.Add("# comment\n\nx.ko:y.ko\n")
	f.Add("no colon here\n")
	f.Add(":\n")
	f.Fuzz(func(t *testing.T, in string) {
		entries, err := ParseDep(strings.NewReader(in))
		if err != nil {
			return
		}
		var b bytes.Buffer
		for _, e := range entries {
			fmt.Fprintf(&b, "%s: %s\n", e.Path, strings.Join(e.Deps, " "))
		}
		again, err := ParseDep(&b)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b.String(), err)
		}
		if len(again) != len(entries) || (len(entries) > 0 && !reflect.DeepEqual(again, entries)) {
			t.Fatalf("round trip: %+v became %+v", entries, again)
		}
	})
}

func FuzzParseAlias(f *testing.F) {
	f.Add("alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci\nalias crypto-crc32c crc32c-intel\n")
	f.Add("alias a\n")
	f.Add("# c\nalias\tx\ty\n")
	f.Fuzz(func(t *testing.T, in string) {
		aliases, err := ParseAlias(strings.NewReader(in))
		if err != nil {
			return
		}
		var b bytes.Buffer
		for _, a := range aliases {
			fmt.Fprintf(&b, "alias %s %s\n", a.Pattern, a.Module)
		}
		again, err := ParseAlias(&b)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b.String(), err)
		}
		if len(again) != len(aliases) || (len(aliases) > 0 && !reflect.DeepEqual(again, aliases)) {
			t.Fatalf("round trip: %+v became %+v", aliases, again)
		}
		// A literal alias (no metacharacters) is found by its own text.
		table := newAliasTable(aliases)
		for _, a := range aliases {
			if !hasMeta(a.Pattern) && !slices.Contains(table.match(a.Pattern), a.Module) {
				t.Fatalf("alias %q of %s not found by its own text: %q", a.Pattern, a.Module, table.match(a.Pattern))
			}
		}
	})
}

func FuzzParseSoftdep(f *testing.F) {
	f.Add("softdep ext4 pre: crypto-crc32c\nsoftdep cifs gcm\nsoftdep cifs pre: md4 post: x y\n")
	f.Add("softdep\n")
	// Lines for one module merge in order; a name is canonical (dashes,
	// .ko); words before pre:/post: are ignored.
	f.Add("softdep a-b.ko pre: x y\nsoftdep a_b post: z pre: w\nsoftdep q ignored pre: r\n")
	f.Fuzz(func(t *testing.T, in string) {
		soft, err := ParseSoftdep(strings.NewReader(in))
		if err != nil {
			return
		}
		var b bytes.Buffer
		for _, name := range sortedKeys(soft) {
			sd := soft[name]
			fmt.Fprintf(&b, "softdep %s pre: %s post: %s\n", name, strings.Join(sd.Pre, " "), strings.Join(sd.Post, " "))
		}
		again, err := ParseSoftdep(&b)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b.String(), err)
		}
		// The same modules, each with the same dependencies in the same
		// order (modprobe loads them in that order).
		if len(again) != len(soft) {
			t.Fatalf("round trip: %d modules %q became %d %q", len(soft), sortedKeys(soft), len(again), sortedKeys(again))
		}
		for name, sd := range soft {
			got, ok := again[name]
			if !ok || !slices.Equal(got.Pre, sd.Pre) || !slices.Equal(got.Post, sd.Post) {
				t.Fatalf("round trip of %q: %+v became %+v (present: %v)", name, sd, got, ok)
			}
			for _, d := range slices.Concat(sd.Pre, sd.Post) {
				if d == "" || d == "pre:" || d == "post:" || strings.ContainsAny(d, " \t\n") {
					t.Fatalf("%s: dependency %q is not one module word", name, d)
				}
			}
		}
	})
}

func FuzzParseModinfo(f *testing.F) {
	f.Add([]byte("alias=pci:v00001AF4d*sv*sd*bc*sc*i*\x00depends=virtio_ring,virtio\x00name=virtio_pci\x00\x00"))
	f.Add([]byte("softdep=pre: crypto-crc32c\x00depends=\x00"))
	f.Add([]byte("8250.alias=char-major-4-*\x00"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		mi, err := ParseModinfo(in)
		if _, berr := ParseBuiltinModinfo(in); (berr == nil) != (err == nil) {
			t.Fatalf("ParseModinfo error %v but ParseBuiltinModinfo error %v", err, berr)
		}
		if err != nil {
			return
		}
		for _, d := range mi.Depends {
			if d == "" || strings.ContainsAny(d, ",-") {
				t.Fatalf("depends entry %q not a canonical module name", d)
			}
		}
		// Written back as key=value strings, the same Modinfo comes out.
		var b bytes.Buffer
		entry := func(k, v string) { b.WriteString(k + "=" + v + "\x00") }
		if mi.Name != "" {
			entry("name", mi.Name)
		}
		for _, a := range mi.Aliases {
			entry("alias", a)
		}
		if len(mi.Depends) > 0 {
			entry("depends", strings.Join(mi.Depends, ","))
		}
		again, err := ParseModinfo(b.Bytes())
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if again.Name != mi.Name || !reflect.DeepEqual(again.Aliases, mi.Aliases) || !reflect.DeepEqual(again.Depends, mi.Depends) {
			t.Fatalf("round trip: %+v became %+v", mi, again)
		}
	})
}
