package server

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

func TestDefaultRouteInterface(t *testing.T) {
	tests := []struct {
		name, table, want string
		wantErr           bool
	}{
		{
			name: "default via eth0",
			table: "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
				"eth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
				"eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
			want: "eth0",
		},
		{
			name:    "no default route",
			table:   "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\neth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "route")
			if err := os.WriteFile(p, []byte(tc.table), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := defaultRouteInterface(p)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("defaultRouteInterface = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestResolvePublicIP(t *testing.T) {
	tests := []struct {
		public, bind, want string
		wantErr            bool
	}{
		{public: "10.0.0.5", bind: "0.0.0.0", want: "10.0.0.5"},
		{bind: "10.0.0.1", want: "10.0.0.1"},
		{public: "fe80::1", bind: "10.0.0.1", wantErr: true},
		{public: "nonsense", bind: "10.0.0.1", wantErr: true},
		{bind: "::1", wantErr: true},
	}
	for _, tc := range tests {
		got, err := resolvePublicIP(tc.public, tc.bind)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got.String() != tc.want) {
			t.Errorf("resolvePublicIP(%q, %q) = %v, %v; want %q, error %v", tc.public, tc.bind, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestOverlayFSConfinesTheDirectory(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ipxe.efi"), []byte("operator's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	upper, err := openDirFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	o := overlayFS{upper: upper, lower: fstest.MapFS{
		"ipxe.efi":      {Data: []byte("bundled")},
		"undionly.kpxe": {Data: []byte("bundled kpxe")},
	}}
	read := func(name string) (string, error) {
		f, err := o.Open(name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}
	if got, err := read("ipxe.efi"); err != nil || got != "operator's" {
		t.Errorf("ipxe.efi = %q, %v; want the directory's file", got, err)
	}
	if got, err := read("undionly.kpxe"); err != nil || got != "bundled kpxe" {
		t.Errorf("undionly.kpxe = %q, %v; want the bundled file", got, err)
	}
	if got, err := read("escape"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("escape symlink = %q, %v; want a refusal (not served, not silently missing)", got, err)
	}
}
