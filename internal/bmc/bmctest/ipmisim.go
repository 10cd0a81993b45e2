// Package bmctest runs real BMCs for tests: OpenIPMI's ipmi_sim (Debian's
// openipmi package), configured with one admin user and a chassis control
// script that starts and stops a stand-in process for the machine, and a
// UDP relay that lets a session open and then swallows everything (a BMC
// that hangs mid-session).
package bmctest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/anvilproj/anvil/internal/testtool"
)

// Sim is a running ipmi_sim on 127.0.0.1.
type Sim struct {
	Host     string
	Port     int
	User     string
	Password string
	// Dir holds the configuration and the machine's state: "machine.pid"
	// (the stand-in process while powered on), "boot" (the last boot
	// device ipmi_sim was told), "log" (every chassis control call).
	Dir string
}

// controlScript is ipmi_sim's chassis_control program (see ipmi_lan(5)):
// called as "control.sh DEVICE get PARM..." it prints "parm:value" lines,
// as "control.sh DEVICE set PARM VALUE..." it acts. Power on starts a
// stand-in process for the machine (a sleep, its own session); power off
// kills it; the power state is whether it runs. Boot values ipmi_sim
// passes are "none", "pxe" or "default". While the file "fail" exists
// every "set" fails.
const controlScript = `#!/bin/sh
dir=%q
dev=$1; op=$2; shift 2
echo "$op $*" >> "$dir/log"
running() { [ -f "$dir/machine.pid" ] && kill -0 "$(cat "$dir/machine.pid")" 2>/dev/null; }
case $op in
get)
  for p in "$@"; do
    case $p in
    power) if running; then echo "power:1"; else echo "power:0"; fi ;;
    boot) echo "boot:$(cat "$dir/boot" 2>/dev/null || echo default)" ;;
    esac
  done ;;
set)
  if [ -f "$dir/fail" ]; then echo "chassis control refused by the test"; exit 1; fi
  while [ $# -ge 2 ]; do
    case $1 in
    power)
      if [ "$2" = 1 ]; then
        running || { setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > "$dir/machine.pid"; }
      else
        running && kill "$(cat "$dir/machine.pid")"; rm -f "$dir/machine.pid"
      fi ;;
    reset) ;;
    boot) echo "$2" > "$dir/boot" ;;
    esac
    shift 2
  done ;;
esac
exit 0
`

// LANConfig is ipmi_sim's LAN configuration (lan.conf, see ipmi_lan(5))
// for a BMC listening on addr:port (UDP) with one administrator, whose
// chassis control program is control: ipmi_sim runs it as "control 0x20
// get|set PARM [VALUE]..." for the power state and the boot device (the
// contract controlScript implements). ipmi_sim accepts Set System Boot
// Options only with such a program: in its other mode, startcmd, it
// answers boot parameter 5 with "invalid data field".
func LANConfig(addr string, port int, control, user, password string) string {
	return fmt.Sprintf(`name "anvil-test"
set_working_mc 0x20
startlan 1
  addr %s %d
  priv_limit admin
  allowed_auths_callback none md2 md5 straight
  allowed_auths_user none md2 md5 straight
  allowed_auths_operator none md2 md5 straight
  allowed_auths_admin none md2 md5 straight
  guid a123456789abcdefa123456789abcdef
endlan
chassis_control "%s 0x20"
user 2 true "%s" "%s" admin 10 none md2 md5 straight
`, addr, port, control, user, password)
}

// EmuConfig is ipmi_sim's emulator commands (sim.emu): one BMC at 0x20
// with chassis support.
const EmuConfig = "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\nmc_enable 0x20\n"

// StartSim starts ipmi_sim with user and password (admin privilege) on a
// free UDP port of 127.0.0.1, and stops it (and the stand-in machine) when
// the test ends. Without ipmi_sim the test is skipped, or fails under
// CI=true.
func StartSim(t testing.TB, user, password string) *Sim {
	t.Helper()
	return StartSimAt(t, "127.0.0.1", user, password)
}

// StartSimAt is StartSim on a free UDP port of host, a loopback address
// (127.0.0.2, …): Anvil holds one session per BMC host, so BMCs that must
// not wait for each other need hosts of their own.
func StartSimAt(t testing.TB, host, user, password string) *Sim {
	t.Helper()
	return startSim(t, host, user, password, "")
}

// StartSimSOL is StartSim with Serial over LAN: the simulator's console
// (SOL instance 1) is the TCP server at serial ("127.0.0.1:PORT", the
// machine's serial port: a QEMU chardev socket or the test's listener),
// which ipmi_sim dials and dials again while it is away (see ipmi_lan(5),
// "sol").
func StartSimSOL(t testing.TB, user, password, serial string) *Sim {
	t.Helper()
	return startSim(t, "127.0.0.1", user, password, SOLConfig(serial))
}

// SOLConfig is the lan.conf line that makes the TCP server at serial the
// BMC's Serial over LAN console.
func SOLConfig(serial string) string {
	return fmt.Sprintf("sol \"tcp:%s\" 115200\n", serial)
}

func startSim(t testing.TB, host, user, password, extra string) *Sim {
	t.Helper()
	bin := testtool.RequireBinary(t, "ipmi_sim", "openipmi")
	dir := t.TempDir()
	port := freeUDPPort(t, host)
	s := &Sim{Host: host, Port: port, User: user, Password: password, Dir: dir}
	control := filepath.Join(dir, "control.sh")
	write(t, control, fmt.Sprintf(controlScript, dir), 0o755)
	write(t, filepath.Join(dir, "lan.conf"), LANConfig(host, port, control, user, password)+extra, 0o600)
	write(t, filepath.Join(dir, "sim.emu"), EmuConfig, 0o600)
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "sim.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", filepath.Join(dir, "lan.conf"), "-f", filepath.Join(dir, "sim.emu"), "-s", state, "-n")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ipmi_sim: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
		s.stopMachine()
	})
	s.waitReady(t)
	return s
}

// waitReady waits until the simulator opens a session (it reads its
// configuration first), at most 10 seconds.
func (s *Sim) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := client.NewClient(s.Host, s.Port, s.User, s.Password)
		if err != nil {
			t.Fatal(err)
		}
		c.WithTimeout(200 * time.Millisecond).WithRetry(0).WithCipherSuiteID(types.CipherSuiteID3)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = c.Connect(ctx)
		if err == nil {
			_ = c.Close(ctx)
			cancel()
			return
		}
		cancel()
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.Dir, "sim.out"))
			t.Fatalf("ipmi_sim on port %d does not answer: %v\n%s", s.Port, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MachinePID returns the stand-in machine's process ID, or 0 when it is
// not running (powered off).
func (s *Sim) MachinePID() int {
	b, err := os.ReadFile(filepath.Join(s.Dir, "machine.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// FailControl makes every later chassis control "set" fail (the
// simulator then answers the IPMI command with an error completion code),
// or work again.
func (s *Sim) FailControl(t testing.TB, fail bool) {
	t.Helper()
	p := filepath.Join(s.Dir, "fail")
	if !fail {
		_ = os.Remove(p)
		return
	}
	write(t, p, "", 0o600)
}

// Boot returns the boot device ipmi_sim last passed to the chassis
// control ("pxe", "default", "none"), or "" when it passed none.
func (s *Sim) Boot() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "boot"))
	return strings.TrimSpace(string(b))
}

func (s *Sim) stopMachine() {
	if pid := s.MachinePID(); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func write(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// freeUDPPort returns a UDP port of host that was free a moment ago.
func freeUDPPort(t testing.TB, host string) int {
	t.Helper()
	c, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// HangAfter relays UDP between a client and the BMC at target, forwarding
// the client's first n datagrams (an RMCP+ session takes four: channel
// authentication capabilities, open session, RAKP 1 and RAKP 3) and their
// answers, then dropping everything: a BMC that hangs mid-session. It
// returns its port on 127.0.0.1; it stops when the test ends.
func HangAfter(t testing.TB, target string, n int) int {
	t.Helper()
	ln, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.Dial("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); up.Close() })
	go func() {
		buf := make([]byte, 2048)
		for seen := 0; ; seen++ {
			m, from, err := ln.ReadFrom(buf)
			if err != nil {
				return
			}
			if seen >= n {
				continue // hung: never answered
			}
			if _, err := up.Write(buf[:m]); err != nil {
				return
			}
			_ = up.SetReadDeadline(time.Now().Add(2 * time.Second))
			r := make([]byte, 2048)
			k, err := up.Read(r)
			if err != nil {
				continue
			}
			if _, err := ln.WriteTo(r[:k], from); err != nil {
				return
			}
		}
	}()
	return ln.LocalAddr().(*net.UDPAddr).Port
}

// Silent returns the port of a UDP socket on 127.0.0.1 that reads and
// never answers: a BMC address where nothing responds.
func Silent(t testing.TB) int {
	t.Helper()
	ln, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := ln.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return ln.LocalAddr().(*net.UDPAddr).Port
}
