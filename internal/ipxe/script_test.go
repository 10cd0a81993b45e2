package ipxe

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/macaddr"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// ipxeLine is one logical script line as iPXE reads it.
type ipxeLine struct {
	label string
	cmds  [][]string // commands, split at ||, && and ;
}

// parseLikeIPXE reads a script the way iPXE 1.x does (src/image/script.c,
// src/core/exec.c): backslash continuations, trailing CR, labels,
// whitespace tokens, separator tokens and '#' comments. Tests use it to
// check that a rendered script has exactly the commands intended.
func parseLikeIPXE(script string) []ipxeLine {
	var out []ipxeLine
	var cur string
	for _, raw := range strings.SplitAfter(script, "\n") {
		if raw == "" {
			continue
		}
		l := strings.TrimSuffix(raw, "\n")
		l = strings.TrimSuffix(l, "\r")
		if strings.HasSuffix(l, `\`) {
			cur += strings.TrimSuffix(l, `\`)
			continue
		}
		l, cur = cur+l, ""
		if i := strings.IndexByte(l, 0); i >= 0 {
			l = l[:i]
		}
		isSpace := func(r rune) bool { return strings.ContainsRune(" \t\n\v\f\r", r) }
		l = strings.TrimLeftFunc(l, isSpace)
		var il ipxeLine
		if strings.HasPrefix(l, ":") {
			label, rest, _ := strings.Cut(l[1:], " ")
			il.label, l = label, rest
		}
		var cmd []string
		for _, tok := range strings.FieldsFunc(l, isSpace) {
			if tok[0] == '#' {
				break
			}
			if tok == "||" || tok == "&&" || tok == ";" {
				il.cmds = append(il.cmds, cmd)
				cmd = nil
				continue
			}
			cmd = append(cmd, tok)
		}
		il.cmds = append(il.cmds, cmd)
		out = append(out, il)
	}
	return out
}

// commandNames lists the first token of every non-empty command, in order.
func commandNames(script string) []string {
	var out []string
	for _, l := range parseLikeIPXE(script) {
		for _, c := range l.cmds {
			if len(c) > 0 {
				out = append(out, c[0])
			}
		}
	}
	return out
}

// find returns the first command whose name is name.
func find(script, name string) []string {
	for _, l := range parseLikeIPXE(script) {
		for _, c := range l.cmds {
			if len(c) > 0 && c[0] == name {
				return c
			}
		}
	}
	return nil
}

var testMAC = macaddr.MustParse("52:54:00:12:34:56")

func TestGolden(t *testing.T) {
	bootEnv := func(p BootEnvParams) string {
		s, err := BootEnv(p)
		if err != nil {
			t.Fatalf("BootEnv: %v", err)
		}
		return s
	}
	chain := func(url, reason string) string {
		s, err := Chain(url, reason)
		if err != nil {
			t.Fatalf("Chain: %v", err)
		}
		return s
	}
	tests := []struct {
		name string
		got  string
	}{
		{"bootenv.ipxe", bootEnv(BootEnvParams{
			Reason:     "workflow default/install is PENDING: boot environment",
			KernelURL:  "http://10.0.0.1:7080/bootenv/vmlinuz-x86_64",
			InitrdURLs: []string{"http://10.0.0.1:7080/bootenv/initramfs-x86_64"},
			KernelArgs: []string{"grpc_authority=10.0.0.1:42113", "worker_id=52:54:00:12:34:56", "hw_addr=52:54:00:12:34:56",
				"tinkerbell_tls=false", "tinkerbell_insecure_tls=false", "syslog_host=10.0.0.1", "anvil.server=http://10.0.0.1:7080",
				"console=tty0", "console=ttyS0,115200"},
		})},
		{"bootenv-two-initrds.ipxe", bootEnv(BootEnvParams{
			Reason:     "workflow lab/flash is RUNNING: boot environment",
			KernelURL:  "https://boot.example.com/osie/vmlinuz?arch=aarch64",
			InitrdURLs: []string{"https://boot.example.com/osie/initramfs.cpio.gz", "https://boot.example.com/osie/modules.cpio"},
			KernelArgs: []string{"", "ip=${ip}", "quiet"},
		})},
		{"chain.ipxe", chain("http://10.0.0.2/menu.ipxe", "hardware default/m1: netboot.ipxe.url")},
		{"custom.ipxe", Custom("#!ipxe\r\ndhcp\nchain http://x/y", "hardware default/m1: netboot.ipxe.contents")},
		{"custom-no-shebang.ipxe", Custom("echo hello\nshell\n", "hardware default/m1: netboot.ipxe.contents")},
		{"localboot.ipxe", LocalBoot("no pending workflow for hardware default/m1: booting from local disk")},
		{"unknown.ipxe", Unknown(testMAC, "no Hardware has MAC 52:54:00:12:34:56")},
		{"unknown-by-ip.ipxe", Unknown(macaddr.MAC{}, "no Hardware has IP 10.0.0.9")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.HasPrefix(tc.got, "#!ipxe\n") {
				t.Errorf("script does not start with #!ipxe:\n%s", tc.got)
			}
			golden(t, tc.name, tc.got)
		})
	}
}

func TestBootEnvCommands(t *testing.T) {
	s, err := BootEnv(BootEnvParams{
		Reason:     "r",
		KernelURL:  "http://h/k/vmlinuz-x86_64",
		InitrdURLs: []string{"http://h/i/initramfs-x86_64", "http://h/i/extra.img?v=2"},
		KernelArgs: []string{"a=1", "", "b=${net0/mac}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantKernel := []string{"kernel", "http://h/k/vmlinuz-x86_64", "initrd=initramfs-x86_64", "initrd=extra.img", "a=1", "b=${net0/mac}"}
	if got := find(s, "kernel"); !slices.Equal(got, wantKernel) {
		t.Errorf("kernel command = %q; want %q", got, wantKernel)
	}
	wantNames := []string{"echo", "echo", "kernel", "goto", "echo", "initrd", "goto", "echo", "initrd", "goto",
		"boot", "goto", "exit", "echo", "imgfree", "prompt", "shell", "goto"}
	if got := commandNames(s); !slices.Equal(got, wantNames) {
		t.Errorf("commands = %q; want %q", got, wantNames)
	}
}

// TestInjection tries to smuggle iPXE commands in through every value a
// Hardware or a request controls.
func TestInjection(t *testing.T) {
	hostile := []string{
		"a\nshell",
		"a\r\nshell",
		"a shell",
		"a\tshell",
		"a\vshell",
		"a\fshell",
		"a\x00shell",
		"||",
		"&&",
		";",
		"#comment",
		`trailing\`,
		"\x7f",
		"\xff\xfe",
		"",
	}
	for _, h := range hostile {
		t.Run("arg/"+strings.ReplaceAll(h, "\n", `\n`), func(t *testing.T) {
			_, err := BootEnv(BootEnvParams{KernelURL: "http://h/k", KernelArgs: []string{"ok=1", h}})
			if h == "" {
				if err != nil {
					t.Fatalf("empty args are skipped, got %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafe) {
				t.Errorf("BootEnv(arg %q) error = %v; want ErrUnsafe", h, err)
			}
			// In a URL the value is not a whole token, so "||" and the
			// like are harmless there; the rest must be refused. Either
			// way the URL must stay one token of its command.
			u := "http://h/x" + h
			if s, err := BootEnv(BootEnvParams{KernelURL: u}); err == nil {
				if got := find(s, "kernel"); !slices.Equal(got, []string{"kernel", u}) {
					t.Errorf("BootEnv(kernel URL %q): kernel command = %q", u, got)
				}
			}
			if s, err := BootEnv(BootEnvParams{KernelURL: "http://h/k", InitrdURLs: []string{u}}); err == nil {
				if got := find(s, "initrd"); !slices.Equal(got, []string{"initrd", u}) {
					t.Errorf("BootEnv(initrd URL %q): initrd command = %q", u, got)
				}
			}
			if s, err := Chain(u, "r"); err == nil {
				if got := find(s, "chain"); !slices.Equal(got, []string{"chain", u}) {
					t.Errorf("Chain(%q): chain command = %q", u, got)
				}
			}
		})
	}

	// Free text (reasons, hostnames in messages) is neutralised, not
	// refused: the script must consist of exactly the intended commands.
	evil := "x\nshell\r\nreboot ; poweroff && chain http://evil/ || sanboot #c ${password} :label \\"
	want := map[string][]string{
		"bootenv":   commandNames(mustBootEnv(t, "plain")),
		"chain":     commandNames(mustChain(t, "plain")),
		"localboot": commandNames(LocalBoot("plain")),
		"unknown":   commandNames(Unknown(testMAC, "plain")),
		"custom":    commandNames(Custom("dhcp", "plain")),
	}
	got := map[string]string{
		"bootenv":   mustBootEnv(t, evil),
		"chain":     mustChain(t, evil),
		"localboot": LocalBoot(evil),
		"unknown":   Unknown(testMAC, evil),
		"custom":    Custom("dhcp", evil),
	}
	for name, s := range got {
		if names := commandNames(s); !slices.Equal(names, want[name]) {
			t.Errorf("%s with a hostile reason: commands = %q; want %q\n%s", name, names, want[name], s)
		}
		if strings.Contains(s, "${password}") {
			t.Errorf("%s: ${password} would be expanded by iPXE:\n%s", name, s)
		}
	}
}

func mustBootEnv(t *testing.T, reason string) string {
	t.Helper()
	s, err := BootEnv(BootEnvParams{Reason: reason, KernelURL: "http://h/k", InitrdURLs: []string{"http://h/i"}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustChain(t *testing.T, reason string) string {
	t.Helper()
	s, err := Chain("http://h/c", reason)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckURL(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"http://10.0.0.1:7080/bootenv/vmlinuz", true},
		{"https://boot.example.com/x?y=z", true},
		{"tftp://10.0.0.1/undionly.kpxe", true},
		{"http://h/${mac}/x", true},
		{"ftp://h/x", false},
		{"/relative/path", false},
		{"http:///nohost", false},
		{"http://h/a b", false},
		{"-http://h/", false},
	}
	for _, tc := range tests {
		if err := CheckURL(tc.in); (err == nil) != tc.ok {
			t.Errorf("CheckURL(%q) = %v; want ok=%v", tc.in, err, tc.ok)
		}
	}
}

func TestKernelCmdlineLimit(t *testing.T) {
	long := "x=" + strings.Repeat("a", MaxKernelCmdline)
	if _, err := BootEnv(BootEnvParams{KernelURL: "http://h/k", KernelArgs: []string{long}}); err == nil {
		t.Error("BootEnv accepted a kernel command line longer than MaxKernelCmdline")
	}
}

func TestCustom(t *testing.T) {
	tests := []struct {
		name, contents, want string
	}{
		{"adds shebang", "dhcp\nshell", "#!ipxe\n# Anvil: r\ndhcp\nshell\n"},
		{"keeps shebang", "#!ipxe\ndhcp\n", "#!ipxe\n# Anvil: r\ndhcp\n"},
		{"keeps gpxe", "#!gpxe\ndhcp", "#!gpxe\n# Anvil: r\ndhcp\n"},
		{"shebang only", "#!ipxe", "#!ipxe\n# Anvil: r\n"},
		{"empty", "", "#!ipxe\n# Anvil: r\n"},
		{"not a shebang", "#!ipxex\necho", "#!ipxe\n# Anvil: r\n#!ipxex\necho\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Custom(tc.contents, "r"); got != tc.want {
				t.Errorf("Custom(%q) = %q; want %q", tc.contents, got, tc.want)
			}
		})
	}
}

// FuzzBootEnv checks the injection property for any argument and reason:
// either BootEnv refuses, or the script's kernel command carries the
// argument as exactly one token and the script has exactly the commands of
// a plain one.
func FuzzBootEnv(f *testing.F) {
	// Seeds: a plain argument, each way of breaking out of an argument
	// (line break, CR, whitespace, separators, comment, continuation, NUL)
	// and a settings expansion.
	for _, s := range []string{"console=ttyS0,115200", "a\nshell", "a\rb", "a b", "||", "&&", ";", "#x", `x\`, "a\x00b", "ip=${ip}"} {
		f.Add(s, "reason "+s)
	}
	plain, err := BootEnv(BootEnvParams{Reason: "r", KernelURL: "http://h/k", InitrdURLs: []string{"http://h/i"}, KernelArgs: []string{"a"}})
	if err != nil {
		f.Fatal(err)
	}
	wantNames := commandNames(plain)
	f.Fuzz(func(t *testing.T, arg, reason string) {
		s, err := BootEnv(BootEnvParams{Reason: reason, KernelURL: "http://h/k", InitrdURLs: []string{"http://h/i"}, KernelArgs: []string{arg}})
		if err != nil {
			return
		}
		want := []string{"kernel", "http://h/k", "initrd=i"}
		if arg != "" {
			want = append(want, arg)
		}
		if got := find(s, "kernel"); !slices.Equal(got, want) {
			t.Fatalf("kernel command = %q; want %q\n%s", got, want, s)
		}
		if got := commandNames(s); !slices.Equal(got, wantNames) {
			t.Fatalf("commands = %q; want %q\n%s", got, wantNames, s)
		}
	})
}

// TestLeavingIPXEFails: the scripts that hand the machine back to its
// firmware for the next boot device leave iPXE with a failure status on
// every path, since a UEFI boot manager stops at its menu when a boot
// option returns success (what OVMF did in TestInstallUEFI).
func TestLeavingIPXEFails(t *testing.T) {
	for name, script := range map[string]string{
		"LocalBoot": LocalBoot("no pending workflow"),
		"Unknown":   Unknown(testMAC, "no Hardware has MAC"),
	} {
		exits := 0
		for _, l := range parseLikeIPXE(script) {
			for _, c := range l.cmds {
				if len(c) == 0 || c[0] != "exit" {
					continue
				}
				exits++
				if len(c) != 2 || c[1] == "0" {
					t.Errorf("%s: %q leaves iPXE with success; want a non-zero status", name, strings.Join(c, " "))
				}
			}
		}
		if exits == 0 {
			t.Errorf("%s: no exit command:\n%s", name, script)
		}
	}
}

// TestDocsShowRealScripts keeps docs/boot.md honest: the example scripts
// it shows are these golden files, byte for byte.
func TestDocsShowRealScripts(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "boot.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bootenv.ipxe", "chain.ipxe", "localboot.ipxe", "unknown.ipxe", "custom.ipxe"} {
		script, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "```\n"+string(script)+"```\n") {
			t.Errorf("docs/boot.md does not show testdata/%s as it is; update the doc", name)
		}
	}
}
