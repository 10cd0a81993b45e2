package agent

import (
	"strings"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		name    string
		cmdline string
		want    BootParams
		wantErr string
	}{
		{
			name:    "anvil's boot script",
			cmdline: "initrd=initramfs-x86_64 grpc_authority=10.0.0.1:42113 worker_id=52:54:00:12:34:56 tinkerbell_tls=false syslog_host=10.0.0.1 anvil.server=http://10.0.0.1:7080 console=tty0 console=ttyS0,115200",
			want:    BootParams{Server: "http://10.0.0.1:7080", WorkerID: "52:54:00:12:34:56", SyslogHost: "10.0.0.1"},
		},
		{
			name:    "hook's arguments only: gRPC over h2c",
			cmdline: "grpc_authority=tink.example:42113 worker_id=aa:bb:cc:dd:ee:ff tinkerbell_tls=false",
			want:    BootParams{Server: "http://tink.example:42113", GRPC: true, WorkerID: "aa:bb:cc:dd:ee:ff"},
		},
		{
			name:    "hook's arguments with TLS, insecure",
			cmdline: "grpc_authority=tink.example:42113 tinkerbell_tls=true tinkerbell_insecure_tls=true worker_id=w1 vlan_id=42 facility=lab1",
			want:    BootParams{Server: "https://tink.example:42113", GRPC: true, InsecureTLS: true, WorkerID: "w1", VLANID: 42, Facility: "lab1"},
		},
		{
			name:    "anvil.server wins over grpc_authority; trailing slash dropped",
			cmdline: "grpc_authority=10.0.0.1:42113 anvil.server=http://10.0.0.1:7080/ anvil.shell=1 anvil.debug",
			want:    BootParams{Server: "http://10.0.0.1:7080", Shell: true, Debug: true},
		},
		{name: "no server", cmdline: "console=ttyS0 worker_id=x", wantErr: "names no server"},
		{name: "bad authority", cmdline: "grpc_authority=10.0.0.1", wantErr: "grpc_authority=\"10.0.0.1\": want host:port"},
		{name: "bad server URL", cmdline: "anvil.server=ftp://x", wantErr: "anvil.server=\"ftp://x\""},
		{name: "bad tls", cmdline: "grpc_authority=a:1 tinkerbell_tls=maybe", wantErr: "tinkerbell_tls=\"maybe\""},
		{name: "bad vlan", cmdline: "grpc_authority=a:1 vlan_id=5000", wantErr: "vlan_id=\"5000\""},
		{name: "image cache size", cmdline: "anvil.server=http://s:7080 anvil.image_cache=2G", want: BootParams{Server: "http://s:7080", ImageCache: 2 << 30}},
		{name: "bad image cache size", cmdline: "anvil.server=http://s:7080 anvil.image_cache=lots", wantErr: `anvil.image_cache="lots": size "lots": want a positive whole number`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCmdline(tc.cmdline)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseCmdline(%q) error = %v; want one containing %q", tc.cmdline, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCmdline(%q): %v", tc.cmdline, err)
			}
			if got != tc.want {
				t.Errorf("ParseCmdline(%q) = %+v; want %+v", tc.cmdline, got, tc.want)
			}
		})
	}
}

// FuzzParseCmdline: any command line parses or fails cleanly, and what
// parses names an http(s) server.
func FuzzParseCmdline(f *testing.F) {
	for _, s := range []string{
		"grpc_authority=10.0.0.1:42113 worker_id=52:54:00:12:34:56 tinkerbell_tls=false anvil.server=http://10.0.0.1:7080",
		"grpc_authority=[fd00::1]:42113 tinkerbell_tls=1 vlan_id=4094",
		"anvil.server=https://a/ anvil.shell=true",
		"grpc_authority= vlan_id= tinkerbell_tls=",
		"\x00=\x00 anvil.server=http://%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmdline string) {
		p, err := ParseCmdline(cmdline)
		if err != nil {
			return
		}
		if !strings.HasPrefix(p.Server, "http://") && !strings.HasPrefix(p.Server, "https://") {
			t.Fatalf("ParseCmdline(%q).Server = %q; want an http(s) URL", cmdline, p.Server)
		}
		if p.VLANID < 0 || p.VLANID > 4094 {
			t.Fatalf("VLANID %d out of range", p.VLANID)
		}
	})
}
