package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestStormSmall runs the storm for real at a small scale — 50 machines
// through DHCP (the test as relay), TFTP, HTTP and GetAction against a
// freshly built `anvil serve` at its default limits — with an abusive
// client in the same run: every machine must boot, and the abuser must be
// refused.
func TestStormSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds anvil and boots 50 machines")
	}
	testtool.RequireRoot(t, "the relay binds giaddr:67, where Anvil sends relayed replies")
	root := testtool.ModuleRoot(t)
	bin := filepath.Join(t.TempDir(), "anvil")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/anvil")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/anvil: %v\n%s", err, out)
	}
	o := options{n: 50, anvil: bin, bootenv: "sized", kernelBytes: 1 << 20, initrdBytes: 4 << 20,
		abuse: true, floor: true, giaddr: "127.0.0.2", timeout: 5 * time.Minute, logLevel: "warn"}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), o)
	if rep == nil {
		t.Fatalf("no report: %v", err)
	}
	var b strings.Builder
	rep.print(&b)
	t.Logf("\n%s", b.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failures != 0 {
		t.Errorf("%d machines failed: %v", rep.Failures, rep.FailuresByKind)
	}
	if rep.Abuse == nil || rep.Abuse.Refused == 0 {
		t.Errorf("abusive client not refused: %+v", rep.Abuse)
	}
	// Every machine moved its files: the bytes are at least N × the three.
	min := int64(o.n) * (rep.Files["ipxe.efi"] + o.kernelBytes + o.initrdBytes)
	if rep.Bytes < min {
		t.Errorf("moved %d bytes; want at least %d", rep.Bytes, min)
	}
	if rep.FloorS <= 0 {
		t.Errorf("no loopback floor measured")
	}
	if err := rep.result.Validate(); err != nil {
		t.Errorf("result file: %v", err)
	}
}

func TestParseScript(t *testing.T) {
	s := "#!ipxe\nkernel http://127.0.0.1:7080/bootenv/vmlinuz-x86_64 initrd=initramfs-x86_64 grpc_authority=127.0.0.1:42113 worker_id=02:00:00:00:00:01 console=tty0 || goto anvil-failed\n" +
		"initrd http://127.0.0.1:7080/bootenv/initramfs-x86_64 || goto anvil-failed\nboot\n"
	b, err := parseScript(s)
	if err != nil {
		t.Fatal(err)
	}
	want := bootScript{kernel: "http://127.0.0.1:7080/bootenv/vmlinuz-x86_64", initrd: "http://127.0.0.1:7080/bootenv/initramfs-x86_64",
		grpc: "127.0.0.1:42113", worker: "02:00:00:00:00:01"}
	if b != want {
		t.Errorf("parseScript = %+v; want %+v", b, want)
	}
	if _, err := parseScript("#!ipxe\nexit\n"); err == nil || !strings.Contains(err.Error(), "names no kernel") {
		t.Errorf("a script without a kernel: err %v; want one saying so", err)
	}
}

func TestMachineIP(t *testing.T) {
	seen := map[string]bool{}
	for i := range 60000 {
		ip := machineIP(i)
		if seen[ip] || strings.HasPrefix(ip, "127.0.") || ip == abuserIP {
			t.Fatalf("machine %d: address %s repeated or outside 127.1.0.0 on", i, ip)
		}
		seen[ip] = true
	}
}

// FuzzParseScript: any script either parses into all four values or is
// refused; it never panics.
func FuzzParseScript(f *testing.F) {
	f.Add("#!ipxe\nkernel http://a/k grpc_authority=a:1 worker_id=w\ninitrd http://a/i\n")
	f.Add("kernel\ninitrd x\n")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := parseScript(s)
		if err == nil && (b.kernel == "" || b.initrd == "" || b.grpc == "" || b.worker == "") {
			t.Errorf("parseScript(%q) = %+v without an error", s, b)
		}
	})
}
