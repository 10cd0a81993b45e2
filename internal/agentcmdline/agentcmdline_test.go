package agentcmdline

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the package a leaf: the agent and the boot policy both
// import it, and it must drag neither's dependencies into the other.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		t.Errorf("%v import %s: internal/agentcmdline may import the standard library only", files, path)
	}
}

// anvilLine is the agent's part of the line Anvil's boot script writes
// (internal/bootpolicy), with the kernel's own arguments around it.
const anvilLine = "initrd=initramfs-x86_64 grpc_authority=10.0.0.1:42113 worker_id=52:54:00:12:34:56 hw_addr=52:54:00:12:34:56 tinkerbell_tls=false tinkerbell_insecure_tls=false syslog_host=10.0.0.1 anvil.server=http://10.0.0.1:7080 console=tty0 console=ttyS0,115200 anvil.token=v1.abc"

func TestParse(t *testing.T) {
	tests := []struct {
		name          string
		cmdline       string
		want          Params
		wantEndpoints []string
		wantGRPC      bool
		wantErr       string
	}{
		{
			name:    "anvil's boot script",
			cmdline: anvilLine,
			want: Params{GRPCAuthority: "10.0.0.1:42113", WorkerID: "52:54:00:12:34:56", HWAddr: "52:54:00:12:34:56",
				SyslogHost: "10.0.0.1", Server: "http://10.0.0.1:7080", Token: "v1.abc"},
			wantEndpoints: []string{"http://10.0.0.1:7080"},
		},
		{
			name:          "hook's arguments only: gRPC over h2c",
			cmdline:       "grpc_authority=tink.example:42113 worker_id=aa:bb:cc:dd:ee:ff tinkerbell_tls=false",
			want:          Params{GRPCAuthority: "tink.example:42113", WorkerID: "aa:bb:cc:dd:ee:ff"},
			wantEndpoints: []string{"http://tink.example:42113"}, wantGRPC: true,
		},
		{
			name:          "hook's arguments with TLS, insecure",
			cmdline:       "grpc_authority=tink.example:42113 tinkerbell_tls=true tinkerbell_insecure_tls=true worker_id=w1 vlan_id=42 facility=lab1",
			want:          Params{GRPCAuthority: "tink.example:42113", TLS: true, InsecureTLS: true, WorkerID: "w1", VLANID: 42, Facility: "lab1"},
			wantEndpoints: []string{"https://tink.example:42113"}, wantGRPC: true,
		},
		{
			name:          "anvil.server wins over grpc_authority; trailing slash dropped; flags alone",
			cmdline:       "grpc_authority=10.0.0.1:42113 anvil.server=http://10.0.0.1:7080/ anvil.shell=1 anvil.debug",
			want:          Params{GRPCAuthority: "10.0.0.1:42113", Server: "http://10.0.0.1:7080/", Shell: true, Debug: true},
			wantEndpoints: []string{"http://10.0.0.1:7080"},
		},
		{
			name:          "a bad grpc_authority beside anvil.server is not used, so not an error",
			cmdline:       "grpc_authority=nope anvil.server=http://s:7080",
			want:          Params{GRPCAuthority: "nope", Server: "http://s:7080"},
			wantEndpoints: []string{"http://s:7080"},
		},
		{
			name:          "scheme in capitals",
			cmdline:       "anvil.server=HTTPS://10.0.0.1:7443/",
			want:          Params{Server: "HTTPS://10.0.0.1:7443/"},
			wantEndpoints: []string{"https://10.0.0.1:7443"},
		},
		{
			name:          "the last of a key wins; anvil.shell=0 clears",
			cmdline:       "anvil.server=http://a:1 anvil.shell anvil.server=http://b:2 anvil.shell=0 vlan_id=7 vlan_id=",
			want:          Params{Server: "http://b:2"},
			wantEndpoints: []string{"http://b:2"},
		},
		{
			name:          "image cache size is passed through",
			cmdline:       "anvil.server=http://s:7080 anvil.image_cache=2G",
			want:          Params{Server: "http://s:7080", ImageCache: "2G"},
			wantEndpoints: []string{"http://s:7080"},
		},
		{
			name:          "several replicas, tried in order; trailing slashes dropped; a repeat tried once",
			cmdline:       "anvil.server=http://10.0.0.3:7080,https://10.0.0.4:7443/,HTTP://10.0.0.5:7080,http://10.0.0.3:7080/",
			want:          Params{Server: "http://10.0.0.3:7080,https://10.0.0.4:7443/,HTTP://10.0.0.5:7080,http://10.0.0.3:7080/"},
			wantEndpoints: []string{"http://10.0.0.3:7080", "https://10.0.0.4:7443", "http://10.0.0.5:7080"},
		},
		{
			name:          "a list beside grpc_authority: the list wins",
			cmdline:       "grpc_authority=10.0.0.1:42113 anvil.server=http://a:7080,http://b:7080",
			want:          Params{GRPCAuthority: "10.0.0.1:42113", Server: "http://a:7080,http://b:7080"},
			wantEndpoints: []string{"http://a:7080", "http://b:7080"},
		},
		{name: "no server", cmdline: "console=ttyS0 worker_id=x", wantErr: "names no server"},
		{name: "a bad URL in a list is named", cmdline: "anvil.server=http://a:7080,10.0.0.4:7080",
			wantErr: `anvil.server="http://a:7080,10.0.0.4:7080": URL 2 of 2, "10.0.0.4:7080": want an http:// or https:// URL`},
		{name: "an empty URL in a list is named", cmdline: "anvil.server=http://a:7080,,http://b:7080",
			wantErr: `URL 2 of 3, "": empty: want an http:// or https:// URL`},
		{name: "a trailing comma is an empty URL", cmdline: "anvil.server=http://a:7080,",
			wantErr: `URL 2 of 2, "": empty`},
		{name: "a list with no host", cmdline: "anvil.server=http://a:7080,http://",
			wantErr: `URL 2 of 2, "http://": want an http:// or https:// URL`},
		{name: "bad authority", cmdline: "grpc_authority=10.0.0.1", wantErr: `grpc_authority="10.0.0.1": want host:port`},
		{name: "bad server URL", cmdline: "anvil.server=ftp://x", wantErr: `anvil.server="ftp://x": want an http:// or https:// URL`},
		{name: "bad tls", cmdline: "grpc_authority=a:1 tinkerbell_tls=maybe", wantErr: `tinkerbell_tls="maybe": want true or false`},
		{name: "bad insecure tls", cmdline: "grpc_authority=a:1 tinkerbell_insecure_tls=2", wantErr: `tinkerbell_insecure_tls="2"`},
		{name: "vlan too high", cmdline: "grpc_authority=a:1 vlan_id=5000", wantErr: `vlan_id="5000": want a VLAN ID from 1 to 4094`},
		{name: "vlan 0", cmdline: "grpc_authority=a:1 vlan_id=0", wantErr: `vlan_id="0"`},
		{name: "vlan not a number", cmdline: "grpc_authority=a:1 vlan_id=ten", wantErr: `vlan_id="ten"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.cmdline)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) error = %v; want one containing %q", tc.cmdline, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.cmdline, err)
			}
			if got != tc.want {
				t.Errorf("Parse(%q) = %+v; want %+v", tc.cmdline, got, tc.want)
			}
			if u, grpc := got.Endpoints(); !slices.Equal(u, tc.wantEndpoints) || grpc != tc.wantGRPC {
				t.Errorf("Endpoints() = %q, %t; want %q, %t", u, grpc, tc.wantEndpoints, tc.wantGRPC)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	_, err := Parse("worker_id=x")
	if !errors.Is(err, ErrNoServer) {
		t.Errorf("Parse without a server = %v; want ErrNoServer", err)
	}
	_, err = Parse("anvil.server=http://s:1 vlan_id=9999")
	var ae *ArgError
	if !errors.As(err, &ae) || ae.Name != ArgVLANID || ae.Value != "9999" {
		t.Errorf("Parse with a bad vlan_id = %#v; want an *ArgError naming %s", err, ArgVLANID)
	}
}

// TestBuild: the boot script's line, argument by argument, with the
// kernel's console= and the operator's arguments in their places.
func TestBuild(t *testing.T) {
	tests := []struct {
		name              string
		p                 Params
		console, operator []string
		want              string
		wantErr           string // substring
		wantArg           string // the *ArgError's Name
	}{
		{
			name: "anvil's boot script",
			p: Params{GRPCAuthority: "10.0.0.1:42113", WorkerID: "52:54:00:12:34:56", HWAddr: "52:54:00:12:34:56",
				SyslogHost: "10.0.0.1", Server: "http://10.0.0.1:7080", Token: "v1.abc"},
			console: []string{"console=tty0", "console=ttyS0,115200"},
			want:    strings.TrimPrefix(anvilLine, "initrd=initramfs-x86_64 "),
		},
		{
			name: "every argument: the operator's between the machine's and the token",
			p: Params{GRPCAuthority: "10.0.0.1:42113", WorkerID: "rack1-node07", HWAddr: "52:54:00:00:00:01", TLS: true, InsecureTLS: true,
				Server: "http://10.0.0.1:7080", VLANID: 42, Facility: "lab1", Shell: true, Debug: true, Discovery: true, ImageCache: "2G", Token: "t"},
			console:  []string{"console=ttyS1"},
			operator: []string{"quiet", "anvil.token=not-this"},
			want: "grpc_authority=10.0.0.1:42113 worker_id=rack1-node07 hw_addr=52:54:00:00:00:01 tinkerbell_tls=true tinkerbell_insecure_tls=true " +
				"anvil.server=http://10.0.0.1:7080 console=ttyS1 vlan_id=42 facility=lab1 anvil.shell=1 anvil.debug=1 anvil.discovery=1 anvil.image_cache=2G " +
				"quiet anvil.token=not-this anvil.token=t",
		},
		{
			name:    "discovery boot: no token",
			p:       Params{Server: "http://10.0.0.1:7080", WorkerID: "52:54:00:12:34:56", HWAddr: "52:54:00:12:34:56", Discovery: true},
			console: []string{"console=ttyS0"},
			want: "worker_id=52:54:00:12:34:56 hw_addr=52:54:00:12:34:56 tinkerbell_tls=false tinkerbell_insecure_tls=false " +
				"anvil.server=http://10.0.0.1:7080 console=ttyS0 anvil.discovery=1",
		},
		{name: "no server", p: Params{WorkerID: "w"}, wantErr: "names no server"},
		{name: "bad server", p: Params{Server: "10.0.0.1:7080"}, wantArg: ArgServer},
		{name: "bad server in a list", p: Params{Server: JoinServers([]string{"http://a:1", "b:2"})}, wantArg: ArgServer, wantErr: `URL 2 of 2, "b:2"`},
		{name: "bad authority beside a server", p: Params{Server: "http://s:1", GRPCAuthority: "s"}, wantArg: ArgGRPCAuthority},
		{name: "worker with a space", p: Params{Server: "http://s:1", WorkerID: "rack 1"}, wantArg: ArgWorkerID, wantErr: "whitespace at byte 4"},
		{name: "facility with a quote", p: Params{Server: "http://s:1", Facility: `a"b`}, wantArg: ArgFacility, wantErr: "double quote"},
		{name: "token with a NUL", p: Params{Server: "http://s:1", Token: "a\x00"}, wantArg: ArgToken, wantErr: "control character"},
		{name: "syslog host not UTF-8", p: Params{Server: "http://s:1", SyslogHost: "\xff"}, wantArg: ArgSyslogHost, wantErr: "UTF-8"},
		{name: "vlan out of range", p: Params{Server: "http://s:1", VLANID: 4095}, wantArg: ArgVLANID},
		{name: "negative vlan", p: Params{Server: "http://s:1", VLANID: -1}, wantArg: ArgVLANID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args, err := tc.p.Build(tc.console, tc.operator)
			if tc.wantErr != "" || tc.wantArg != "" {
				var ae *ArgError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || (tc.wantArg != "" && (!errors.As(err, &ae) || ae.Name != tc.wantArg)) {
					t.Fatalf("Build(%+v) = %q, %v; want an error containing %q naming %q", tc.p, args, err, tc.wantErr, tc.wantArg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build(%+v): %v", tc.p, err)
			}
			if got := strings.Join(args, " "); got != tc.want {
				t.Errorf("Build(%+v) =\n%s\nwant\n%s", tc.p, got, tc.want)
			}
			if q, err := Parse(strings.Join(args, " ")); err != nil || (tc.operator == nil && q != tc.p) {
				t.Errorf("Parse(Build(%+v)) = %+v, %v", tc.p, q, err)
			}
		})
	}
}

// TestDocumented: docs/agent.md's table of kernel arguments lists every
// argument.
func TestDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/agent.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, name := range []string{ArgGRPCAuthority, ArgWorkerID, ArgHWAddr, ArgTLS, ArgInsecureTLS, ArgSyslogHost,
		ArgVLANID, ArgFacility, ArgServer, ArgToken, ArgShell, ArgDebug, ArgImageCache, ArgDiscovery} {
		if !strings.Contains(doc, "`"+name+"=") {
			t.Errorf("docs/agent.md does not document %s=", name)
		}
	}
}

// FuzzParse: any command line parses or fails cleanly. Properties: what
// parses names a server Endpoint can call (an http(s) URL) and a VLAN in
// range; the kernel's own arguments around it change nothing; the line
// given twice reads as once (the last of a key wins); and it round-trips:
// Build writes it back (unless a value holds what Build refuses) and Parse
// reads the same Params.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		// Anvil's own boot script.
		anvilLine,
		// Hook's arguments: gRPC over TLS, IPv6, a VLAN.
		"grpc_authority=[fd00::1]:42113 tinkerbell_tls=1 tinkerbell_insecure_tls=true vlan_id=4094 facility=lab1",
		// Flags without a value, a trailing slash, an image cache.
		"anvil.server=https://a/ anvil.shell anvil.debug=1 anvil.image_cache=512M",
		// Empty values, a bad VLAN, a bad URL, NULs.
		"grpc_authority= vlan_id= tinkerbell_tls=",
		"grpc_authority=a:1 vlan_id=0",
		"\x00=\x00 anvil.server=http://%zz",
		// A value holding '=', a quote.
		"anvil.server=http://h:1/?a=b worker_id=x=y facility=\"lab\"",
		// A bad grpc_authority that the agent does not use.
		"grpc_authority=x anvil.server=http://h:1",
		// Several replicas; a repeat; an empty one; a bad one.
		"anvil.server=http://10.0.0.3:7080,http://10.0.0.4:7080/,HTTP://10.0.0.3:7080",
		"anvil.server=http://a:1,,http://b:2",
		"anvil.server=http://a:1,ftp://b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmdline string) {
		p, err := Parse(cmdline)
		noisy := "console=ttyS0,115200 initrd=initramfs " + cmdline + " quiet BOOT_IMAGE=/vmlinuz"
		if q, qerr := Parse(noisy); (qerr == nil) != (err == nil) || q != p {
			t.Fatalf("with the kernel's own arguments around it, Parse(%q) = %+v, %v; alone %+v, %v", cmdline, q, qerr, p, err)
		}
		if q, qerr := Parse(cmdline + " " + cmdline); (qerr == nil) != (err == nil) || q != p {
			t.Fatalf("given twice, Parse(%q) = %+v, %v; once %+v, %v", cmdline, q, qerr, p, err)
		}
		if err != nil {
			return
		}
		urls, grpc := p.Endpoints()
		if len(urls) == 0 || (grpc && len(urls) != 1) {
			t.Fatalf("Parse(%q).Endpoints() = %q, %t; want one URL or more (one for gRPC)", cmdline, urls, grpc)
		}
		for i, u := range urls {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") || strings.HasSuffix(u, "/") ||
				(!grpc && strings.Contains(u, ServerSeparator)) || slices.Contains(urls[:i], u) {
				t.Fatalf("Parse(%q).Endpoints() = %q; want http(s) URLs, each once, without a trailing slash or a separator", cmdline, urls)
			}
		}
		if !grpc && len(urls) > 1 {
			// A list is the URLs one by one: each alone parses to itself.
			for _, u := range urls {
				one, err := Parse(ArgServer + "=" + u)
				if got, _ := one.Endpoints(); err != nil || !slices.Equal(got, []string{u}) {
					t.Fatalf("Parse(%q): URL %q of the list alone gives %q, %v", cmdline, u, got, err)
				}
			}
		}
		if p.VLANID < 0 || p.VLANID > MaxVLANID {
			t.Fatalf("VLANID %d out of range", p.VLANID)
		}
		args, err := p.Build(nil, nil)
		if err != nil {
			var ae *ArgError
			if !errors.As(err, &ae) {
				t.Fatalf("Build(%+v) = %v; want an *ArgError", p, err)
			}
			return
		}
		back := strings.Join(args, " ")
		if q, err := Parse(back); err != nil || q != p {
			t.Fatalf("round trip: Parse(%q) = %+v; written back as %q it parses to %+v, %v", cmdline, p, back, q, err)
		}
	})
}

// FuzzBuild: for any Params that Build accepts, each argument it writes is
// one field of the line (no whitespace), between the console and operator
// arguments as documented, and Parse reads the Params back unchanged.
func FuzzBuild(f *testing.F) {
	f.Add("10.0.0.1:42113", "52:54:00:12:34:56", "52:54:00:12:34:56", false, false, "10.0.0.1", "http://10.0.0.1:7080", 0, "", false, false, "", "v1.abc")
	f.Add("[fd00::1]:42113", "rack1-node07", "", true, true, "", "", 42, "lab1", true, true, "2G", "")
	f.Add("", "w", "", false, false, "", "HTTPS://s/", 4094, "a=b", false, true, "lots", "t")
	f.Add("x", "w x", "", false, false, "", "http://s", 4095, "\"", false, false, "", "\x00")
	f.Add("", "w", "", false, false, "", "http://10.0.0.3:7080,http://10.0.0.4:7080", 0, "", false, false, "", "")
	f.Fuzz(func(t *testing.T, authority, worker, hwAddr string, tls, insecure bool, syslog, server string, vlan int,
		facility string, shell, debug bool, cache, token string) {
		p := Params{GRPCAuthority: authority, WorkerID: worker, HWAddr: hwAddr, TLS: tls, InsecureTLS: insecure, SyslogHost: syslog,
			Server: server, VLANID: vlan, Facility: facility, Shell: shell, Debug: debug, ImageCache: cache, Token: token}
		console, operator := []string{"console=ttyS0"}, []string{"quiet"}
		args, err := p.Build(console, operator)
		if err != nil {
			return
		}
		for _, a := range args {
			if len(strings.Fields(a)) != 1 {
				t.Fatalf("Build(%+v) wrote %q, not one argument", p, a)
			}
		}
		i, j := slices.Index(args, console[0]), slices.Index(args, operator[0])
		if i < 0 || j < i || (token != "" && args[len(args)-1] != ArgToken+"="+token) {
			t.Fatalf("Build(%+v) = %q: console, operator, token out of place", p, args)
		}
		line := strings.Join(args, " ")
		if q, err := Parse(line); err != nil || q != p {
			t.Fatalf("Parse(Build(%+v)) = Parse(%q) = %+v, %v", p, line, q, err)
		}
	})
}
