package ipxe

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// How iPXE reads a script (src/image/script.c and src/core/exec.c), which is
// what every renderer here guards against:
//
//   - A line ends at '\n'; a trailing '\r' is dropped; a line ending in '\'
//     continues on the next one.
//   - A line starting with ':' is a label.
//   - A line is split into tokens at ASCII whitespace (space, \t, \n, \v,
//     \f, \r). There is no quoting and no escape character.
//   - A token that is exactly "||", "&&" or ";" ends one command and starts
//     the next; a token starting with '#' starts a comment.
//   - ${name} inside a token is replaced by an iPXE setting, after the split
//     (so an expanded value never adds tokens).
//   - A NUL byte ends the line.
//
// So a value can be placed in a command as one argument exactly when it has
// no whitespace or control character, is not a separator token, does not
// start with '#' and does not end with '\'. Nothing can escape such a
// value; the renderers refuse values that are not safe (CheckArg) and
// neutralise free text in comments and echo lines (see text).

// ErrUnsafe is wrapped by the renderers' errors and by CheckArg and
// CheckURL when a value cannot be placed in an iPXE script as one argument.
var ErrUnsafe = errors.New("unsafe in an iPXE script")

// MaxKernelCmdline is the longest kernel command line BootEnv renders, in
// bytes: Linux's COMMAND_LINE_SIZE on x86 and arm64. A longer one would be
// cut silently by the kernel, dropping the arguments the agent needs.
const MaxKernelCmdline = 2048

// RetrySeconds is how long a failed boot waits before it tries again.
const RetrySeconds = 10

// UnknownWaitSeconds is how long the script for an unknown machine shows
// its message before moving on to the next boot device.
const UnknownWaitSeconds = 10

// Labels used in rendered scripts. They are prefixed so that a custom
// script's own labels cannot collide with them.
const (
	labelBoot   = "anvil-boot"
	labelFailed = "anvil-failed"
)

// CheckArg returns nil when s can be one argument of an iPXE command (see
// the rules above), else an error wrapping ErrUnsafe that says why. ${...}
// is allowed: iPXE expands it within the argument, as Tinkerbell users
// expect of kernel parameters such as "ip=${ip}".
func CheckArg(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty argument", ErrUnsafe)
	case s == "||" || s == "&&" || s == ";":
		return fmt.Errorf("%w: %q is an iPXE command separator", ErrUnsafe, s)
	case s[0] == '#':
		return fmt.Errorf("%w: %q starts with '#', which iPXE reads as a comment", ErrUnsafe, s)
	case s[len(s)-1] == '\\':
		return fmt.Errorf("%w: %q ends with '\\', which iPXE reads as a line continuation", ErrUnsafe, s)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrUnsafe, s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			what := "a control character"
			switch c {
			case ' ', '\t':
				what = "whitespace"
			case '\n', '\r', '\v', '\f':
				what = "a line break"
			}
			return fmt.Errorf("%w: %q contains %s at byte %d (iPXE has no quoting)", ErrUnsafe, s, what, i)
		}
	}
	return nil
}

// CheckURL returns nil when s is an absolute http, https or tftp URL that
// is safe as one iPXE argument, else an error wrapping ErrUnsafe (unsafe) or
// describing the problem.
func CheckURL(s string) error {
	if err := CheckArg(s); err != nil {
		return err
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", s, err)
	}
	switch u.Scheme {
	case "http", "https", "tftp":
	default:
		return fmt.Errorf("%q: want an http://, https:// or tftp:// URL", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: URL has no host", s)
	}
	return nil
}

// text turns free text (a reason, a name) into something that is safe as
// the rest of a comment or echo line and prints about the same: control
// characters become spaces, runs of spaces collapse (iPXE collapses them
// anyway), separator and comment tokens are quoted so iPXE prints them
// instead of acting on them, "${" is broken so iPXE prints it instead of
// expanding a setting, and a trailing '\' is kept off the end of the line.
func text(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == utf8.RuneError, r < ' ', r == 0x7f, r >= 0x80 && r < 0xa0, r == '\u2028', r == '\u2029':
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	fields := strings.Fields(b.String())
	for i, f := range fields {
		f = strings.ReplaceAll(f, "${", "$ {")
		if f == "||" || f == "&&" || f == ";" || strings.HasPrefix(f, "#") {
			f = "'" + f + "'"
		}
		fields[i] = f
	}
	out := strings.Join(fields, " ")
	if strings.HasSuffix(out, `\`) {
		out += " ."
	}
	return out
}

// script accumulates the lines of a script.
type script struct{ b strings.Builder }

func newScript(reason string) *script {
	s := &script{}
	s.line("#!ipxe")
	if reason != "" {
		s.line("# Anvil: " + text(reason))
	}
	return s
}

func (s *script) line(l string) { s.b.WriteString(l); s.b.WriteByte('\n') }

// echo prints msg on the machine's console, prefixed "Anvil: " (which also
// keeps echo from reading msg as its own options).
func (s *script) echo(msg string) { s.line("echo Anvil: " + text(msg)) }

func (s *script) String() string { return s.b.String() }

// retry writes the failure path shared by BootEnv and Chain: say what
// failed, free what was loaded, then wait RetrySeconds — Ctrl-B opens the
// iPXE shell for someone at the console — and start again from the boot
// label, fetching everything anew.
func (s *script) retry(what string) {
	s.line("exit") // a boot that returns successfully has nothing left to do
	s.line(":" + labelFailed)
	s.echo(what + " failed (see the error above)")
	s.line("imgfree")
	s.line(fmt.Sprintf("prompt --key 0x02 --timeout %d Anvil: retrying in %d seconds, press Ctrl-B for the iPXE shell... && shell ||",
		RetrySeconds*1000, RetrySeconds))
	s.line("goto " + labelBoot)
}

// BootEnvParams are the values of a boot environment script.
type BootEnvParams struct {
	// Reason is why the machine gets this script; it becomes a comment and
	// is printed on the console.
	Reason string
	// KernelURL is the kernel to load; required.
	KernelURL string
	// InitrdURLs are loaded in order after the kernel; each is named to the
	// kernel by its file name (initrd=NAME), which is the name iPXE gives an
	// image it downloads, so that EFI-stub kernels find them.
	InitrdURLs []string
	// KernelArgs follow initrd=NAME on the kernel command line, in order.
	// Empty strings are skipped; each must pass CheckArg.
	KernelArgs []string
	// What names what is booted in the failure message ("loading WHAT
	// failed"). If empty, "the boot environment".
	What string
}

// BootEnv renders the script that loads a kernel and its initrds and boots
// them. When a download or the boot fails, the script says so, waits and
// tries again (with a way into the iPXE shell). It returns an error wrapping
// ErrUnsafe, naming the value, when a URL or argument cannot be placed in
// the script safely, and an error when the kernel command line would be
// longer than MaxKernelCmdline.
func BootEnv(p BootEnvParams) (string, error) {
	if err := CheckURL(p.KernelURL); err != nil {
		return "", fmt.Errorf("kernel URL: %w", err)
	}
	var args []string
	for i, u := range p.InitrdURLs {
		if err := CheckURL(u); err != nil {
			return "", fmt.Errorf("initrd URL %d: %w", i, err)
		}
		args = append(args, "initrd="+imageName(u))
	}
	for i, a := range p.KernelArgs {
		if a == "" {
			continue
		}
		if err := CheckArg(a); err != nil {
			return "", fmt.Errorf("kernel argument %d: %w", i, err)
		}
		args = append(args, a)
	}
	cmdline := strings.Join(args, " ")
	if len(cmdline) > MaxKernelCmdline {
		return "", fmt.Errorf("kernel command line is %d bytes, more than the kernel's %d", len(cmdline), MaxKernelCmdline)
	}

	s := newScript(p.Reason)
	s.echo(p.Reason)
	s.line(":" + labelBoot)
	s.echo("loading the kernel " + p.KernelURL)
	kernel := "kernel " + p.KernelURL
	if cmdline != "" {
		kernel += " " + cmdline
	}
	s.line(kernel + " || goto " + labelFailed)
	for _, u := range p.InitrdURLs {
		s.echo("loading the initrd " + u)
		s.line("initrd " + u + " || goto " + labelFailed)
	}
	s.line("boot || goto " + labelFailed)
	what := p.What
	if what == "" {
		what = "the boot environment"
	}
	s.retry("loading " + what)
	return s.String(), nil
}

// imageName is the name iPXE gives an image downloaded from u: the last
// element of its path.
func imageName(u string) string {
	if pu, err := url.Parse(u); err == nil && pu.Path != "" {
		return path.Base(pu.Path)
	}
	return path.Base(u)
}

// Chain renders a script that hands the machine to the script or image at
// url, retrying on failure like BootEnv. It returns an error when url is not
// a safe http, https or tftp URL.
func Chain(url, reason string) (string, error) {
	if err := CheckURL(url); err != nil {
		return "", fmt.Errorf("chain URL: %w", err)
	}
	s := newScript(reason)
	s.echo(reason)
	s.line(":" + labelBoot)
	s.line("chain " + url + " || goto " + labelFailed)
	s.retry("chaining " + url)
	return s.String(), nil
}

// Custom returns contents, an operator's own script, as a script: with the
// "#!ipxe" line first (added if contents lacks it; a legacy "#!gpxe" line is
// kept) and the reason as a comment after it. The contents are the
// operator's and are not otherwise changed; a trailing newline is ensured.
func Custom(contents, reason string) string {
	first, rest, _ := strings.Cut(contents, "\n")
	if f := strings.TrimRight(first, " \t\r"); f != "#!ipxe" && f != "#!gpxe" {
		first, rest = "#!ipxe", contents
	}
	var b strings.Builder
	b.WriteString(strings.TrimRight(first, " \t\r"))
	b.WriteByte('\n')
	if reason != "" {
		b.WriteString("# Anvil: " + text(reason) + "\n")
	}
	b.WriteString(rest)
	if rest != "" && !strings.HasSuffix(rest, "\n") {
		b.WriteByte('\n')
	}
	return b.String()
}

// exitToNextBootDevice leaves iPXE with a failure status, so that the
// firmware goes on to its next boot device. A UEFI boot manager whose boot
// option returns EFI_SUCCESS stops going through BootOrder and shows its
// menu instead (UEFI 2.x §3.1.1; OVMF opens its setup screen), and iPXE
// hands the firmware the status of `exit N` (0 without N). Seen in the lab:
// test/e2e TestInstallUEFI.
const exitToNextBootDevice = "exit 1"

// LocalBoot renders a script that boots the machine from its local disk.
// Which way works depends on the firmware, which only iPXE knows at run
// time (${platform} is "efi" or "pcbios"), so the script branches on it.
func LocalBoot(reason string) string {
	s := newScript(reason)
	s.echo(reason)
	s.line("# UEFI: leaving iPXE with a failure returns to the firmware's boot manager,")
	s.line("# which goes on to the next boot entry, the local disk (with success it would")
	s.line("# stop at its menu).")
	s.line("# BIOS: leaving iPXE does not reliably reach the next boot device (many PXE")
	s.line("# ROMs retry the network or halt), so boot the first disk (BIOS drive 0x80)")
	s.line("# from here; --no-describe keeps iPXE from describing it to the OS as a SAN")
	s.line("# disk (iBFT).")
	s.line("iseq ${platform} efi && " + exitToNextBootDevice + " ||")
	s.line("sanboot --no-describe --drive 0x80 ||")
	s.echo("booting from the local disk failed, leaving iPXE")
	s.line(exitToNextBootDevice)
	return s.String()
}

// Unknown renders the script an unknown machine gets in auto-proxy mode: it
// says that Anvil does not know the machine and how to add it, waits
// UnknownWaitSeconds so someone at the console can read it, then leaves
// iPXE so the firmware tries its next boot device. mac may be the zero MAC
// (the machine asked by IP): the script then prints iPXE's own ${mac}.
func Unknown(mac macaddr.MAC, reason string) string {
	m := "${mac}" // expanded by iPXE: the MAC of the interface it booted from
	if mac.IsValid() {
		m = mac.String()
	}
	s := newScript(reason)
	s.echo("this machine is not known to Anvil: " + reason)
	s.line("echo To provision it, apply a Hardware (anvil apply -f hardware.yaml) with")
	s.line("echo spec.interfaces[].dhcp.mac: " + m + " and netboot.allowPXE: true, then reboot it.")
	s.echo(fmt.Sprintf("booting from the next boot device in %d seconds", UnknownWaitSeconds))
	s.line(fmt.Sprintf("sleep %d", UnknownWaitSeconds))
	s.line(exitToNextBootDevice)
	return s.String()
}
