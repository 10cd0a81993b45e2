package agent

import (
	"strconv"
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
		{
			name:    "scheme in capitals",
			cmdline: "anvil.server=HTTPS://10.0.0.1:7443/",
			want:    BootParams{Server: "https://10.0.0.1:7443"},
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

// cmdlineOf writes p as the kernel command line a boot script would give
// for it: the inverse of ParseCmdline, for its round-trip property.
func cmdlineOf(p BootParams) string {
	var args []string
	add := func(k, v string) {
		if v != "" {
			args = append(args, k+"="+v)
		}
	}
	if p.GRPC {
		scheme, authority, _ := strings.Cut(p.Server, "://")
		add(argGRPCAuthority, authority)
		add(argTLS, strconv.FormatBool(scheme == "https"))
	} else {
		add(argServer, p.Server)
	}
	if p.InsecureTLS {
		add(argInsecureTLS, "true")
	}
	add(argWorkerID, p.WorkerID)
	add(argSyslogHost, p.SyslogHost)
	if p.VLANID != 0 {
		add(argVLANID, strconv.Itoa(p.VLANID))
	}
	add(argFacility, p.Facility)
	add(argToken, p.Token)
	if p.Shell {
		add(argShell, "1")
	}
	if p.Debug {
		add(argDebug, "1")
	}
	return strings.Join(args, " ")
}

// FuzzParseCmdline: any command line parses or fails cleanly. Properties:
// what parses names an http(s) server and a VLAN in range; it round-trips
// (written back as a boot script would write it, it parses to the same
// BootParams); the kernel's own arguments around it change nothing; and
// the line given twice reads as once (the last of a key wins).
func FuzzParseCmdline(f *testing.F) {
	for _, s := range []string{
		// Anvil's own boot script.
		"initrd=initramfs-x86_64 grpc_authority=10.0.0.1:42113 worker_id=52:54:00:12:34:56 tinkerbell_tls=false syslog_host=10.0.0.1 anvil.server=http://10.0.0.1:7080 anvil.token=abc.def console=ttyS0,115200",
		// Hook's arguments: gRPC over TLS, IPv6, a VLAN.
		"grpc_authority=[fd00::1]:42113 tinkerbell_tls=1 tinkerbell_insecure_tls=true vlan_id=4094 facility=lab1",
		// Flags without a value, a trailing slash to drop.
		"anvil.server=https://a/ anvil.shell anvil.debug=1",
		// Empty values, a bad VLAN, a bad URL, NULs.
		"grpc_authority= vlan_id= tinkerbell_tls=",
		"grpc_authority=a:1 vlan_id=0",
		"\x00=\x00 anvil.server=http://%zz",
		// A value holding '='.
		"anvil.server=http://h:1/?a=b worker_id=x=y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmdline string) {
		p, err := ParseCmdline(cmdline)
		noisy := "console=ttyS0,115200 initrd=initramfs " + cmdline + " quiet BOOT_IMAGE=/vmlinuz"
		if q, qerr := ParseCmdline(noisy); (qerr == nil) != (err == nil) || q != p {
			t.Fatalf("with the kernel's own arguments around it, ParseCmdline(%q) = %+v, %v; alone %+v, %v", cmdline, q, qerr, p, err)
		}
		if q, qerr := ParseCmdline(cmdline + " " + cmdline); (qerr == nil) != (err == nil) || q != p {
			t.Fatalf("given twice, ParseCmdline(%q) = %+v, %v; once %+v, %v", cmdline, q, qerr, p, err)
		}
		if err != nil {
			return
		}
		if !strings.HasPrefix(p.Server, "http://") && !strings.HasPrefix(p.Server, "https://") {
			t.Fatalf("ParseCmdline(%q).Server = %q; want an http(s) URL", cmdline, p.Server)
		}
		if p.VLANID < 0 || p.VLANID > 4094 {
			t.Fatalf("VLANID %d out of range", p.VLANID)
		}
		back := cmdlineOf(p)
		q, err := ParseCmdline(back)
		if err != nil || q != p {
			t.Fatalf("round trip: ParseCmdline(%q) = %+v; written back as %q it parses to %+v, %v", cmdline, p, back, q, err)
		}
	})
}
