package tftp

import (
	"bytes"
	"io"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    request
		wantErr bool
	}{
		{name: "plain RRQ", in: "\x00\x01ipxe.efi\x00octet\x00",
			want: request{op: opRRQ, filename: "ipxe.efi", mode: "octet"}},
		{name: "WRQ", in: "\x00\x02up\x00netascii\x00",
			want: request{op: opWRQ, filename: "up", mode: "netascii"}},
		{name: "options in order", in: "\x00\x01f\x00OCTET\x00blksize\x001468\x00tsize\x000\x00",
			want: request{op: opRRQ, filename: "f", mode: "OCTET", options: []option{{"blksize", "1468"}, {"tsize", "0"}}}},
		{name: "empty option value kept", in: "\x00\x01f\x00octet\x00x\x00\x00",
			want: request{op: opRRQ, filename: "f", mode: "octet", options: []option{{"x", ""}}}},
		{name: "NUL padding ignored", in: "\x00\x01f\x00octet\x00\x00\x00\x00",
			want: request{op: opRRQ, filename: "f", mode: "octet"}},
		{name: "dangling option name ignored", in: "\x00\x01f\x00octet\x00blksize\x00",
			want: request{op: opRRQ, filename: "f", mode: "octet"}},
		{name: "unterminated option ignored", in: "\x00\x01f\x00octet\x00tsize\x000\x00blksize\x00512",
			want: request{op: opRRQ, filename: "f", mode: "octet", options: []option{{"tsize", "0"}}}},
		{name: "options after padding ignored", in: "\x00\x01f\x00octet\x00\x00blksize\x00512\x00",
			want: request{op: opRRQ, filename: "f", mode: "octet"}},
		{name: "empty", in: "", wantErr: true},
		{name: "one byte", in: "\x00", wantErr: true},
		{name: "opcode only", in: "\x00\x01", wantErr: true},
		{name: "DATA", in: "\x00\x03\x00\x01data", wantErr: true},
		{name: "unknown opcode", in: "\x01\x01f\x00octet\x00", wantErr: true},
		{name: "unterminated name", in: "\x00\x01ipxe.efi", wantErr: true},
		{name: "no mode", in: "\x00\x01ipxe.efi\x00", wantErr: true},
		{name: "unterminated mode", in: "\x00\x01ipxe.efi\x00octet", wantErr: true},
		{name: "empty name", in: "\x00\x01\x00octet\x00", wantErr: true},
		{name: "empty mode", in: "\x00\x01f\x00\x00", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRequest([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseRequest(%q) error = %v; want error: %v", tc.in, err, tc.wantErr)
			}
			if err == nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseRequest(%q) = %+v; want %+v", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzParseRequest: any bytes parse without panicking, and a parsed
// request encodes to bytes that parse to the same request.
func FuzzParseRequest(f *testing.F) {
	seeds := []string{
		// A PXE ROM's first request: tsize to learn the size.
		"\x00\x01undionly.kpxe\x00octet\x00tsize\x000\x00",
		// UEFI firmware: blksize and tsize.
		"\x00\x01ipxe.efi\x00octet\x00blksize\x001468\x00tsize\x000\x00",
		// atftp with a window.
		"\x00\x01f64m\x00octet\x00windowsize\x0016\x00blksize\x001468\x00",
		// All four options, odd case.
		"\x00\x01f\x00OcTeT\x00BLKSIZE\x00512\x00TSIZE\x000\x00TIMEOUT\x005\x00WINDOWSIZE\x0064\x00",
		// Per-MAC path, netascii.
		"\x00\x0152:54:00:12:34:56/ipxe.efi\x00netascii\x00",
		// A write request.
		"\x00\x02upload\x00octet\x00",
		// Traversal attempts: parse, then refused by resolvePath.
		"\x00\x01../../etc/passwd\x00octet\x00",
		"\x00\x01..\\..\\x\x00octet\x00",
		// Padding, a dangling option, an unterminated one.
		"\x00\x01f\x00octet\x00\x00\x00",
		"\x00\x01f\x00octet\x00blksize\x00",
		"\x00\x01f\x00octet\x00blksize\x00512",
		// Malformed: no mode, no terminator, not a request.
		"\x00\x01f\x00",
		"\x00\x01f",
		"\x00\x04\x00\x01",
		"",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRequest(b)
		if err != nil {
			return
		}
		enc := appendRequest(nil, r)
		r2, err := parseRequest(enc)
		if err != nil {
			t.Fatalf("parseRequest(appendRequest(%+v)) = %v", r, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip of %q: %+v, then %+v", b, r, r2)
		}
		// The path checks must not panic on anything either.
		if path, _, err := resolvePath(r.filename); err == nil && (!fs.ValidPath(path) || containsDotDot(path) || strings.ContainsAny(path, "\\\x00")) {
			t.Fatalf("resolvePath(%q) = %q: not confined", r.filename, path)
		}
	})
}

func containsDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}

func TestResolvePath(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantMAC string
		wantErr string
	}{
		{in: "ipxe.efi", want: "ipxe.efi"},
		{in: "dir/sub/file", want: "dir/sub/file"},
		{in: "52:54:00:12:34:56/ipxe.efi", want: "ipxe.efi", wantMAC: "52:54:00:12:34:56"},
		{in: "52-54-00-12-34-56/ipxe.efi", want: "ipxe.efi", wantMAC: "52:54:00:12:34:56"},
		{in: "AA:bb:CC:dd:EE:ff/a/b", want: "a/b", wantMAC: "aa:bb:cc:dd:ee:ff"},
		{in: "52:54:00:12:34:56", want: "52:54:00:12:34:56"},           // a file named like a MAC
		{in: "52:54-00:12:34:56/x", want: "52:54-00:12:34:56/x"},       // mixed separators: not a MAC
		{in: "52:54:00:12:34:5g/x", want: "52:54:00:12:34:5g/x"},       // not hex
		{in: "01-52-54-00-12-34-56/x", want: "01-52-54-00-12-34-56/x"}, // pxelinux's ARP-type prefix: not ours
		{in: "c:/x", want: "c:/x"},
		{in: "..x", want: "..x"},
		{in: "x..", want: "x.."},
		{in: "", wantErr: "empty"},
		{in: "/ipxe.efi", wantErr: "absolute"},
		{in: "../x", wantErr: "parent"},
		{in: "a/..", wantErr: "parent"},
		{in: "a/../b", wantErr: "parent"},
		{in: "52:54:00:12:34:56/../x", wantErr: "parent"},
		{in: "a\\b", wantErr: "backslash"},
		{in: "..\\x", wantErr: "backslash"},
		{in: "a\x00b", wantErr: "control"},
		{in: "a\nb", wantErr: "control"},
		{in: "./a", wantErr: "not a clean"},
		{in: "a/./b", wantErr: "not a clean"},
		{in: "a//b", wantErr: "not a clean"},
		{in: "a/", wantErr: "not a clean"},
		{in: ".", wantErr: "not a clean"},
		{in: "\xff\xfe", wantErr: "not a clean"}, // not UTF-8
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, mac, err := resolvePath(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("resolvePath(%q) = %q, %v; want error %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("resolvePath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			if mac.String() != tc.wantMAC {
				t.Errorf("resolvePath(%q) MAC = %v; want %v", tc.in, mac, tc.wantMAC)
			}
		})
	}
}

func TestNetasciiReader(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"\n", "\r\n"},
		{"\r", "\r\x00"},
		{"\r\n", "\r\x00\r\n"},
		{"a\nb\rc\r\nd", "a\r\nb\r\x00c\r\x00\r\nd"},
		{"\n\n\r\r", "\r\n\r\n\r\x00\r\x00"},
	}
	readers := []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one byte at a time", iotest.OneByteReader},
		{"data with EOF", iotest.DataErrReader},
	}
	for _, tc := range tests {
		for _, rd := range readers {
			t.Run(rd.name+"/"+tc.in, func(t *testing.T) {
				// Read in pieces of every size to cross pair boundaries.
				for size := 1; size <= 4; size++ {
					r := newNetasciiReader(rd.wrap(strings.NewReader(tc.in)))
					var got []byte
					buf := make([]byte, size)
					for {
						n, err := r.Read(buf)
						got = append(got, buf[:n]...)
						if err == io.EOF {
							break
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					if string(got) != tc.want {
						t.Errorf("read %d at a time: %q; want %q", size, got, tc.want)
					}
				}
				n, err := netasciiLen(strings.NewReader(tc.in))
				if err != nil || n != int64(len(tc.want)) {
					t.Errorf("netasciiLen(%q) = %d, %v; want %d", tc.in, n, err, len(tc.want))
				}
			})
		}
	}
}

func TestGroupDigits(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"}, {999, "999"}, {1000, "1,000"}, {1012345, "1,012,345"}, {-1234, "-1,234"}, {67108864, "67,108,864"},
	}
	for _, tc := range tests {
		if got := groupDigits(tc.in); got != tc.want {
			t.Errorf("groupDigits(%d) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestAppendError(t *testing.T) {
	got := appendError(nil, errAccess, "no\x00way\n")
	want := []byte("\x00\x05\x00\x02no?way?\x00")
	if !bytes.Equal(got, want) {
		t.Errorf("appendError = %q; want %q", got, want)
	}
	code, msg := parseError(got[2:])
	if code != errAccess || msg != "no?way?" {
		t.Errorf("parseError = %d %q; want 2 %q", code, msg, "no?way?")
	}
}
