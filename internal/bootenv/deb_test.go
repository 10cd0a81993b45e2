package bootenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// arArchive writes an ar archive of the members in order, as dpkg-deb
// does (GNU names ending in '/', data padded to even sizes).
func arArchive(members ...[2]string) []byte {
	var b bytes.Buffer
	b.WriteString(arMagic)
	for _, m := range members {
		// GNU ar ends a name with '/', except one that fills the field;
		// padded by bytes, not runes.
		name := m[0]
		if len(name) < 16 {
			name += "/"
		}
		b.WriteString(name + strings.Repeat(" ", max(16-len(name), 0)))
		fmt.Fprintf(&b, "%-12d%-6d%-6d%-8s%-10d%s", 0, 0, 0, "100644", len(m[1]), arFileMagic)
		b.WriteString(m[1])
		if len(m[1])%2 == 1 {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func TestReadAr(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    []string // name=contents
		wantErr string
	}{
		{"deb members", arArchive([2]string{"debian-binary", "2.0\n"}, [2]string{"control.tar.xz", "abc"}, [2]string{"data.tar.xz", "defg"}),
			[]string{"debian-binary=2.0\n", "control.tar.xz=abc", "data.tar.xz=defg"}, ""},
		{"empty archive", []byte(arMagic), nil, ""},
		{"not ar", []byte("PK\x03\x04 a zip"), nil, "not an ar archive"},
		{"truncated header", append([]byte(arMagic), "debian-binary/  0"...), nil, "offset 8"},
		{"bad magic", bytes.Replace(arArchive([2]string{"a", "b"}), []byte(arFileMagic), []byte("xx"), 1), nil, "bad header magic"},
		{"bad size", bytes.Replace(arArchive([2]string{"a", "b"}), []byte("1         `"), []byte("-1        `"), 1), nil, "bad size"},
		{"truncated data", arArchive([2]string{"a", "bcd"})[:8+60+1], nil, "truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := readAr(bytes.NewReader(tc.in), func(m arMember, data io.Reader) error {
				b, err := io.ReadAll(data)
				got = append(got, m.Name+"="+string(b))
				return err
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("readAr error %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("members %q; want %q", got, tc.want)
			}
		})
	}
}

// FuzzReadAr feeds the .deb reader arbitrary bytes: it must not panic,
// must hand out no more data than a member's size, and what it accepts
// must come out the same when written again.
func FuzzReadAr(f *testing.F) {
	f.Add(arArchive([2]string{"debian-binary", "2.0\n"}, [2]string{"data.tar.xz", "xyz"}))
	f.Add([]byte(arMagic))
	f.Add([]byte(arMagic + "short"))
	f.Add(append([]byte(arMagic), bytes.Repeat([]byte(" "), 60)...))
	// Names the fixed-width field allows: 16 bytes with no '/', spaces
	// and '/' inside, bytes that are not ASCII.
	// Written by hand, not by arArchive, whose output is what is tested.
	hdr := func(name string, size int) string {
		return name + strings.Repeat(" ", 16-len(name)) + fmt.Sprintf("%-12d%-6d%-6d%-8s%-10d", 0, 0, 0, "100644", size) + arFileMagic
	}
	f.Add([]byte(arMagic + hdr("sixteen-bytes-xy", 1) + "a\n" + hdr("a b/c/", 0) + hdr("é//", 3) + "odd\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var members [][2]string
		err := readAr(bytes.NewReader(in), func(m arMember, data io.Reader) error {
			b, err := io.ReadAll(data)
			if int64(len(b)) > m.Size {
				t.Fatalf("member %q: read %d bytes of %d", m.Name, len(b), m.Size)
			}
			members = append(members, [2]string{m.Name, string(b)})
			return err
		})
		if err != nil {
			return
		}
		// Every archive the reader accepts, written again, reads back
		// the same: the same members, names and contents, in order.
		var again [][2]string
		if err := readAr(bytes.NewReader(arArchive(members...)), func(m arMember, data io.Reader) error {
			b, err := io.ReadAll(data)
			again = append(again, [2]string{m.Name, string(b)})
			return err
		}); err != nil {
			t.Fatalf("re-read of %q: %v", members, err)
		}
		if !slices.Equal(again, members) {
			t.Fatalf("round trip: members %q became %q", members, again)
		}
	})
}

// TestBuildFromDeb builds from packages made by the real dpkg-deb from the
// fixture tree, with each data.tar compression dpkg-deb offers and with
// the modules under usr/lib/modules as newer Debian releases ship them.
func TestBuildFromDeb(t *testing.T) {
	dpkgDeb := testtool.RequireBinary(t, "dpkg-deb", "dpkg")
	f := newFixture(t)
	tests := []struct {
		name, compress string
		usrLib         bool
	}{
		{"xz", "xz", false},
		{"zstd", "zstd", false},
		{"gzip", "gzip", false},
		{"none", "none", false},
		{"usr/lib/modules", "xz", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkg := t.TempDir()
			must(os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755))
			writeFile(t, filepath.Join(pkg, "DEBIAN", "control"), "Package: linux-image-test\nVersion: 1\nArchitecture: amd64\n"+
				"Maintainer: test <test@example.org>\nDescription: test kernel\n")
			modRoot := filepath.Join(pkg, "lib", "modules")
			if tc.usrLib {
				modRoot = filepath.Join(pkg, "usr", "lib", "modules")
			}
			must(os.MkdirAll(modRoot, 0o755))
			copyTree(t, f.modDir, filepath.Join(modRoot, fixtureRelease))
			must(os.MkdirAll(filepath.Join(pkg, "boot"), 0o755))
			copyTree(t, f.kernel, filepath.Join(pkg, "boot", "vmlinuz-"+fixtureRelease))
			deb := filepath.Join(t.TempDir(), "linux-image-test.deb")
			if out, err := exec.Command(dpkgDeb, "-Z"+tc.compress, "--root-owner-group", "--build", pkg, deb).CombinedOutput(); err != nil {
				t.Fatalf("dpkg-deb: %v\n%s", err, out)
			}
			cfg := f.config(t.TempDir())
			cfg.Modules, cfg.Kernel = deb, ""
			res, err := Build(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.KernelRelease != fixtureRelease || res.Modules != 16 {
				t.Errorf("release %q with %d modules; want %s with 16", res.KernelRelease, res.Modules, fixtureRelease)
			}
			kernel, _ := os.ReadFile(res.Kernel)
			want, _ := os.ReadFile(f.kernel)
			if !bytes.Equal(kernel, want) {
				t.Error("the kernel is not the package's boot/vmlinuz")
			}
			if again, err := Build(context.Background(), cfg); err != nil || !again.UpToDate {
				t.Errorf("second build from the same package: up to date %v, %v", again != nil && again.UpToDate, err)
			}
		})
	}
}

// copyTree copies a file or a directory tree.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}
