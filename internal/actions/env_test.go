package actions

import (
	"io/fs"
	"strings"
	"testing"
)

func TestParseBool(t *testing.T) {
	tests := []struct {
		in      string
		def     bool
		want    bool
		wantErr bool
	}{
		{in: "", def: true, want: true},
		{in: "", def: false, want: false},
		{in: "true", want: true},
		{in: "y", want: true}, // CHROOT=y
		{in: "YES", want: true},
		{in: "1", want: true},
		{in: "on", want: true},
		{in: "false", def: true, want: false},
		{in: "n", def: true, want: false},
		{in: "0", def: true, want: false},
		{in: "maybe", wantErr: true},
		{in: "tru", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseBool(tc.in, tc.def)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseBool(%q, %v) = %v, %v; want %v, error %v", tc.in, tc.def, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    fs.FileMode
		wantErr bool
	}{
		{in: "", want: 0o644}, // the default passed
		{in: "0644", want: 0o644},
		{in: "644", want: 0o644},
		{in: "0o755", want: 0o755},
		{in: "0600", want: 0o600},
		{in: "4755", want: 0o755 | fs.ModeSetuid},
		{in: "2755", want: 0o755 | fs.ModeSetgid},
		{in: "1777", want: 0o777 | fs.ModeSticky},
		{in: "420", want: 0o420}, // YAML's 0644 unquoted arrives as 420: octal, as Tinkerbell reads it
		{in: "10000", wantErr: true},
		{in: "0888", wantErr: true},
		{in: "0o", wantErr: true},
		{in: "-644", wantErr: true},
		{in: "u+rw", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseMode(tc.in, 0o644)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseMode(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseChecksum(t *testing.T) {
	hex64 := strings.Repeat("0a", 32)
	tests := []struct {
		in      string
		want    string // canonical; "" for none
		wantErr string
	}{
		{in: ""},
		{in: "  "},
		{in: "sha256:" + hex64, want: "sha256:" + hex64},
		{in: "SHA256:" + strings.ToUpper(hex64), want: "sha256:" + hex64},
		{in: hex64, want: "sha256:" + hex64},
		{in: strings.Repeat("ff", 64), want: "sha512:" + strings.Repeat("ff", 64)},
		{in: "sha512:" + hex64, wantErr: "is not a sha512 digest (128 hex digits)"},
		{in: "sha1:" + strings.Repeat("00", 20), wantErr: `checksum algorithm "sha1" is not supported`},
		{in: "0a0a", wantErr: "is not a checksum: write sha256:HEX or sha512:HEX"},
		{in: "sha256:" + strings.Repeat("zz", 32), wantErr: "is not a sha256 digest"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			c, err := parseChecksum(tc.in)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseChecksum(%q) error = %v; want %q", tc.in, err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("parseChecksum(%q): %v", tc.in, err)
			case tc.want == "" && c != nil:
				t.Fatalf("parseChecksum(%q) = %v; want none", tc.in, c)
			case tc.want != "" && (c == nil || c.String() != tc.want):
				t.Fatalf("parseChecksum(%q) = %v; want %s", tc.in, c, tc.want)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		head    []byte
		url     string
		want    format
		wantErr string
	}{
		{name: "zstd", head: []byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0}, url: "http://h/a.raw", want: formatZstd},
		{name: "zstd skippable frame", head: []byte{0x5e, 0x2a, 0x4d, 0x18, 0, 0}, url: "http://h/a", want: formatZstd},
		{name: "gzip", head: []byte{0x1f, 0x8b, 8, 0, 0, 0}, url: "http://h/a.zst", want: formatGzip},
		{name: "xz", head: []byte{0xfd, '7', 'z', 'X', 'Z', 0}, url: "http://h/a", want: formatXz},
		{name: "bzip2", head: []byte("BZh91A"), url: "http://h/a", want: formatBzip2},
		{name: "BZh without a level is not bzip2", head: []byte("BZhx"), url: "http://h/a.img", want: formatRaw},
		{name: "raw, no hint", head: []byte{0xeb, 0x63, 0x90, 0}, url: "http://h/disk.img", want: formatRaw},
		{name: "raw named .gz", head: []byte{0xeb, 0x63, 0x90, 0}, url: "http://h/disk.img.GZ", wantErr: "the name says gzip but"},
		{name: "query ignored", head: []byte{0, 0}, url: "http://h/disk.img?f=x.xz", want: formatRaw},
		{name: "name .zs", head: []byte{}, url: "http://h/disk.zs", wantErr: "the name says zstd"},
		{name: "name .bzip2", head: []byte{1}, url: "http://h/disk.bzip2", wantErr: "the name says bzip2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := detect(tc.head, tc.url)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("detect(% x, %q) error = %v; want %q", tc.head, tc.url, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("detect(% x, %q) = %v, %v; want %v", tc.head, tc.url, got, err, tc.want)
			}
		})
	}
}
