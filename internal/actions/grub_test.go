package actions

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func readGrubCfg(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/grub/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGrubDefault reads the entry GRUB boots from grub.cfg files as
// grub-mkconfig writes them (testdata/grub/jammy.cfg: an Ubuntu 22.04
// cloud image's, with its initrdfail branches, submenu and a UEFI entry
// inside an if), with the default set the ways /etc/default/grub sets it.
func TestGrubDefault(t *testing.T) {
	jammy := readGrubCfg(t, "jammy.cfg")
	const (
		uuid  = "a8e1c2f4-6d7b-4c1e-9a55-0b3f5d6e7c21"
		k91   = "/boot/vmlinuz-5.15.0-91-generic"
		i91   = "/boot/initrd.img-5.15.0-91-generic"
		plain = "root=UUID=" + uuid + " ro console=tty1 console=ttyS0"
	)
	withDefault := func(def string) string {
		return strings.Replace(jammy, `   set default="0"`, `   set default=`+def, 1)
	}
	tests := []struct {
		name    string
		cfg     string
		want    grubEntry
		wantErr string
	}{
		{name: "jammy as shipped: entry 0, its normal (not initrdfail) linux line, $vt_handoff dropped", cfg: jammy,
			want: grubEntry{Path: "0", Title: "Ubuntu", Kernel: k91, Initrds: []string{i91}, Args: plain + " panic=-1"}},
		{name: "index into a submenu", cfg: withDefault(`"1>1"`),
			want: grubEntry{Path: "1>1", Title: "Ubuntu, with Linux 5.15.0-91-generic (recovery mode)", Kernel: k91, Initrds: []string{i91},
				Args: "root=UUID=" + uuid + " ro recovery nomodeset dis_ucode_ldr"}},
		{name: "ids through a submenu, microcode and initrd", cfg: withDefault(`"gnulinux-advanced-` + uuid + `>gnulinux-5.15.0-88-generic-advanced-` + uuid + `"`),
			want: grubEntry{Path: "1>2", Title: "Ubuntu, with Linux 5.15.0-88-generic", Kernel: "/boot/vmlinuz-5.15.0-88-generic",
				Initrds: []string{"/boot/amd-ucode.img", "/boot/initrd.img-5.15.0-88-generic"}, Args: plain}},
		{name: "titles, unquoted after =", cfg: withDefault(`'Advanced options for Ubuntu>Ubuntu, with Linux 5.15.0-91-generic'`),
			want: grubEntry{Path: "1>0", Title: "Ubuntu, with Linux 5.15.0-91-generic", Kernel: k91, Initrds: []string{i91}, Args: plain}},
		{name: "a submenu chosen: its first entry", cfg: withDefault("1"),
			want: grubEntry{Path: "1>0", Title: "Ubuntu, with Linux 5.15.0-91-generic", Kernel: k91, Initrds: []string{i91}, Args: plain}},
		{name: "GRUB_DEFAULT=saved: the variable is not read, entry 0", cfg: withDefault(`"${saved_entry}"`),
			want: grubEntry{Path: "0", Title: "Ubuntu", Kernel: k91, Initrds: []string{i91}, Args: plain + " panic=-1"}},
		{name: "no set default, no initrd, quoted and escaped arguments",
			cfg:  "menuentry \"Debian GNU/Linux\" {\n  linux /vmlinuz root=/dev/vda1 \"quiet splash\" init=\\/sbin/init # comment\n}\n",
			want: grubEntry{Path: "0", Title: "Debian GNU/Linux", Kernel: "/vmlinuz", Args: "root=/dev/vda1 quiet splash init=/sbin/init"}},
		{name: "the UEFI entry (inside if) counts", cfg: withDefault("2"), wantErr: `default entry 2 ("UEFI Firmware Settings") has no linux line`},
		{name: "index past the end", cfg: withDefault("7"), wantErr: `default entry "7": no entry "7"`},
		{name: "unknown title", cfg: withDefault(`"Windows"`), wantErr: `default entry "Windows": no entry "Windows"`},
		{name: "no entries", cfg: "set default=0\nset timeout=5\n", wantErr: "no menuentry"},
		{name: "a stray }", cfg: "}\nmenuentry 'x' {\n linux /k\n}\n", wantErr: "line 1: } closes no block"},
		{name: "empty submenu", cfg: "submenu 'x' {\n}\n", wantErr: `default entry "0" is an empty submenu`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := grubDefault(tc.cfg)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("grubDefault = %+v, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Path != tc.want.Path || got.Title != tc.want.Title || got.Kernel != tc.want.Kernel ||
				!slices.Equal(got.Initrds, tc.want.Initrds) || got.Args != tc.want.Args {
				t.Errorf("grubDefault =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

// FuzzGrubDefault: any file either yields an entry with a kernel, whose
// path leads back to it, or an error; never a panic.
func FuzzGrubDefault(f *testing.F) {
	jammy, err := os.ReadFile("testdata/grub/jammy.cfg")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(jammy))
	f.Add("set default=\"1>0\"\nsubmenu a {\nmenuentry b {\nlinux /k a\\ b 'c d'\ninitrd /i\n}\n}\n")
	f.Add("menuentry 'x' --id y {\n linux /k; initrd /i\n}\nset default=y\n")
	f.Fuzz(func(t *testing.T, cfg string) {
		e, err := grubDefault(cfg)
		if err != nil {
			return
		}
		if e.Kernel == "" {
			t.Fatalf("an entry without a kernel: %+v", e)
		}
		top, _, err := parseGrub(cfg)
		if err != nil {
			t.Fatalf("grubDefault succeeded where parseGrub fails: %v", err)
		}
		items := top
		var it *grubItem
		for _, part := range strings.Split(e.Path, ">") {
			i := grubFind(items, part)
			if i < 0 {
				t.Fatalf("path %q does not lead to an entry", e.Path)
			}
			it = items[i]
			items = it.children
		}
		if it.kernel != e.Kernel || it.submenu {
			t.Fatalf("path %q leads to %+v, not the entry returned (%+v)", e.Path, it, e)
		}
	})
}
