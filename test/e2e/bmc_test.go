package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/bmc/bmctest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// The BMC test's machine: OpenIPMI's ipmi_sim is its BMC, in the lab
// namespace on 127.0.0.1:labBMCPort, and its chassis control program is
// the machine's power supply. "power on" starts QEMU — with a one-time
// network boot (-boot once=n) when the BMC was last told a PXE boot, which
// it then forgets, from the disk otherwise —; "power off" stops QEMU; the
// power state is whether QEMU runs. The VM is also cabled to the BMC
// in-band, as a server's BMC is: QEMU's ipmi-bmc-extern device on a BT
// interface, connected to ipmi_sim's VM serial interface.
//
// ipmi_sim's other way of running a VM, startcmd (it starts the program
// on power on and kills it on power off, by itself), cannot be used: in
// that mode it answers Set System Boot Options with "invalid data field",
// so no one-time PXE boot can be set, and with a chassis control program
// configured it never runs startcmd.
//
// The VM's serial port is a QEMU socket (its output also appended to
// serial.log) that ipmi_sim dials as its Serial over LAN console, so
// `ssh -p 2222 node@anvil` reaches the VM's console through the BMC.
const (
	labBMCPort       = 6230
	labBMCVMPort     = 9002
	labBMCSerialPort = 9003
	labBMCUser       = "admin"
	labBMCPass       = "lab-bmc-password"
)

// labBMCControl is the chassis control program (bmctest's contract:
// "control 0x20 get|set PARM [VALUE]..."). $dir/on exists while QEMU
// runs: the shell that waits for QEMU removes it, so the state is right
// however QEMU ends (power off, or the guest powering itself off).
const labBMCControl = `#!/bin/sh
dir=%q
dev=$1; op=$2; shift 2
echo "$(date +%%T.%%N) $op $*" >> "$dir/control.log"
on() { [ -f "$dir/on" ]; }
case $op in
get)
  for p in "$@"; do
    case $p in
    power) if on; then echo "power:1"; else echo "power:0"; fi ;;
    boot) echo "boot:$(cat "$dir/boot" 2>/dev/null || echo default)" ;;
    esac
  done ;;
set)
  while [ $# -ge 2 ]; do
    case $1 in
    power)
      if [ "$2" = 1 ]; then
        if ! on; then
          boot=order=c
          [ "$(cat "$dir/boot" 2>/dev/null)" = pxe ] && boot=once=n,order=c
          echo default > "$dir/boot"
          touch "$dir/on"
          echo "$(date +%%T.%%N) qemu -boot $boot" >> "$dir/control.log"
          setsid sh -c "\"$dir/qemu.sh\" $boot >>\"$dir/qemu.log\" 2>&1; rm -f \"$dir/on\"" </dev/null >/dev/null 2>&1 &
        fi
      elif on; then
        kill "$(cat "$dir/qemu.pid")"
        i=0; while on && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
      fi ;;
    boot) echo "$2" > "$dir/boot" ;;
    esac
    shift 2
  done ;;
esac
exit 0
`

// labBMC is a running ipmi_sim and the machine it powers.
type labBMC struct {
	dir    string
	serial string // the VM's console, appended to by every power on
	disk   string
}

// on reports whether the VM runs.
func (b *labBMC) on() bool {
	_, err := os.Stat(filepath.Join(b.dir, "on"))
	return err == nil
}

func (b *labBMC) controlLog() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "control.log"))
	return string(out)
}

// startLabBMC starts ipmi_sim in ns as the BMC of m (SeaBIOS, a blank
// 64 MiB disk), the machine powered off.
func startLabBMC(t *testing.T, ns *netns, m vm) *labBMC {
	t.Helper()
	testtool.RequireBinary(t, "ipmi_sim", "openipmi")
	dir := t.TempDir()
	b := &labBMC{dir: dir, serial: filepath.Join(dir, "serial.log"), disk: filepath.Join(dir, "disk.raw")}
	if err := os.WriteFile(b.disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(b.disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	m.disk, m.noBootOrder = b.disk, true
	args := ns.qemuArgs(m, dir, "chardev:s0")
	args = append(args, "-chardev", fmt.Sprintf("socket,id=s0,host=127.0.0.1,port=%d,server=on,wait=off,logfile=%s,logappend=on", labBMCSerialPort, b.serial),
		"-pidfile", filepath.Join(dir, "qemu.pid"),
		"-chardev", fmt.Sprintf("socket,id=ipmi0,host=127.0.0.1,port=%d,reconnect=1", labBMCVMPort),
		"-device", "ipmi-bmc-extern,id=bmc0,chardev=ipmi0", "-device", "isa-ipmi-bt,bmc=bmc0")
	var q strings.Builder
	q.WriteString("#!/bin/sh\nexec qemu-system-x86_64")
	for _, a := range args {
		q.WriteString(" '" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	q.WriteString(` -boot "$1"` + "\n")
	files := map[string]string{
		"qemu.sh":    q.String(),
		"control.sh": fmt.Sprintf(labBMCControl, dir),
		"lan.conf": bmctest.LANConfig("127.0.0.1", labBMCPort, filepath.Join(dir, "control.sh"), labBMCUser, labBMCPass) +
			fmt.Sprintf("serial 15 127.0.0.1 %d codec VM ipmb 0x20\n", labBMCVMPort) +
			bmctest.SOLConfig(fmt.Sprintf("127.0.0.1:%d", labBMCSerialPort)),
		"sim.emu": bmctest.EmuConfig,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	ns.background("ipmi_sim", "ipmi_sim", "-c", filepath.Join(dir, "lan.conf"), "-f", filepath.Join(dir, "sim.emu"),
		"-s", filepath.Join(dir, "state"), "-n")
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(dir, "qemu.pid")); err == nil {
			ns.exec(context.Background(), "kill", "-9", strings.TrimSpace(string(b))) //nolint:errcheck // gone already
		}
	})
	return b
}

// bmcYAML is the Secret and Machine of the lab's BMC.
func bmcYAML(machine string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %[1]s
type: kubernetes.io/basic-auth
stringData:
  username: %[2]s
  password: %[3]s
---
apiVersion: bmc.tinkerbell.org/v1alpha1
kind: Machine
metadata:
  name: %[1]s
spec:
  connection:
    host: 127.0.0.1
    port: %[4]d
    authSecretRef:
      name: %[1]s
    insecureTLS: false
---
`, machine, labBMCUser, labBMCPass, labBMCPort)
}

// TestBMCReprovision: a real IPMI BMC takes a real VM from cold to its
// installed OS, started by `anvil reprovision` and, separately, by the Jobs
// API's ProvisionDevice (`anvil job provision`). The VM begins powered off;
// the command creates the workflow (bootMode netboot), the engine its
// netboot Job (power off, one-time PXE, power on), the executor runs it
// against ipmi_sim, whose chassis control starts the VM; the VM netboots,
// installs, the workflow's reboot action reboots it from its disk into the
// installed OS, which powers it off. Nothing else touches the VM. The
// Job's progress is in the machine's record.
func TestBMCReprovision(t *testing.T) {
	requireLab(t)
	testtool.RequireBinary(t, "ipmi_sim", "openipmi")
	prepareInstall(t)
	for i, how := range []string{"reprovision", "ProvisionDevice"} {
		t.Run(how, func(t *testing.T) {
			name := fmt.Sprintf("node-bmc%d", i)
			bmcInstall(t, how, name, fmt.Sprintf("52:54:00:77:01:4%d", i), fmt.Sprintf("10.77.0.14%d", i))
		})
	}
}

// bmcInstall is one run of TestBMCReprovision, started by how.
func bmcInstall(t *testing.T, how, name, mac, ip string) {
	ns := newNetns(t, name)
	ns.bridge("br0", serverIP+"/24", "fd77::1/64")
	ns.tap("br0", "tap0")
	a := startAnvil(t, ns, serverIP, "--bootenv-dir", installLab.bootEnv, "--images-dir", installLab.images)
	machine := "bmc-" + name

	qemuSlots <- struct{}{} // this test's VM counts against the lab's one at a time
	defer func() { <-qemuSlots }()
	b := startLabBMC(t, ns, vm{name: name, mac: mac, tap: "tap0"})
	// The reprovision run also watches the install on the serial console
	// over SSH, as an operator would.
	var op *consoleOperator
	if how == "reprovision" {
		op = newConsoleOperator(t, ns)
	}
	a.apply(t, bmcYAML(machine)+installSpec{os: biosOS, name: name, mac: mac, ip: ip, server: serverIP,
		imageURL: "http://" + serverIP + ":7080/images/os.raw.zst", bmc: machine, noWorkflow: true, sshKey: op.publicKey(t)}.yaml())
	var st string
	testtool.WaitFor(t, "the BMC to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		st, err = a.ns.exec(ctx, assets.anvil, append(a.clientArgs(), "power", "status", "hardware/"+name)...)
		return err == nil
	})
	if !strings.Contains(st, "power off") || b.on() {
		t.Fatalf("the machine is not off before %s:\n%s", how, st)
	}

	start := time.Now()
	workflow := name + "-install"
	if how == "reprovision" {
		t.Logf("anvil reprovision:\n%s", a.cli(t, "reprovision", name, "--template", name+"-install", "--name", workflow))
	} else {
		var r struct {
			JobID string `json:"jobId"`
		}
		out := a.cli(t, "job", "provision", mac, "--template", name+"-install", "-o", "json")
		if err := json.Unmarshal([]byte(out), &r); err != nil || !strings.HasPrefix(r.JobID, "default/"+name+"-") {
			t.Fatalf("anvil job provision: %v\n%s", err, out)
		}
		workflow = strings.TrimPrefix(r.JobID, "default/")
		t.Logf("anvil job provision: job %s", r.JobID)
	}
	job := "tink-controller-" + name + "-one-time-netboot"
	var powered, success time.Duration
	deadline := start.Add(installTimeout + time.Minute)
	for {
		if powered == 0 && b.on() {
			powered = time.Since(start)
			op.attach(t, name)
		}
		if success == 0 && workflowState(a, workflow) == "SUCCESS" {
			success = time.Since(start)
		}
		serial, _ := os.ReadFile(b.serial)
		if powered != 0 && !b.on() && strings.Contains(string(serial), markerInstalled) {
			break // the installed OS ran and powered the machine off
		}
		if s := workflowState(a, workflow); s == "FAILED" || s == "TIMEOUT" || time.Now().After(deadline) {
			t.Fatalf("workflow %s (powered on after %s); describe:\n%s\nBMC control:\n%s\nserial:\n%s", s, powered,
				a.cli(t, "describe", "workflow", workflow), b.controlLog(), tail(string(serial), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	installed := time.Since(start)
	serial, _ := os.ReadFile(b.serial)
	run := installRun{res: vmResult{serial: string(serial)}, success: success, disk: b.disk, os: biosOS, workflow: workflow}
	assertInstalled(t, a, run, name, mac, ip)

	// The BMC was told a one-time PXE boot before power on, and QEMU
	// started once, booting the network once.
	control := b.controlLog()
	iBoot, iOn := strings.Index(control, "set boot pxe"), strings.Index(control, "set power 1")
	if iBoot < 0 || iOn < iBoot || strings.Count(control, "qemu -boot") != 1 || !strings.Contains(control, "qemu -boot once=n,order=c") {
		t.Errorf("BMC chassis control calls:\n%s", control)
	}
	var j struct {
		Status struct {
			Conditions []struct{ Type, Status, Message string } `json:"conditions"`
			StartTime  *time.Time                               `json:"startTime"`
			Completion *time.Time                               `json:"completionTime"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(a.cli(t, "get", "job", job, "-o", "json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.Status.StartTime == nil || j.Status.Completion == nil {
		t.Fatalf("job %s: %+v", job, j.Status)
	}
	desc := a.cli(t, "describe", "workflow", workflow)
	for _, want := range []string{"NetbootJobComplete", "netboot job " + job + " completed"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe workflow lacks %q:\n%s", want, desc)
		}
	}
	record := a.cli(t, "logs", "hardware/"+name)
	assertRecord(t, record, "bmc", "job "+job+" started: 3 task(s) on machine/"+machine)
	assertRecord(t, record, "bmc", "task 1 (oneTimeBootDeviceAction pxe) completed")
	assertRecord(t, record, "bmc", "job "+job+" completed: 3 tasks completed")
	assertRecord(t, record, "http", "os.raw.zst", "200")
	if op != nil {
		// What the installed OS wrote on its serial port reached the
		// operator's ssh through ipmi_sim's Serial over LAN, and the
		// machine's record.
		testtool.WaitFor(t, "the installed OS on the ssh console", func() bool { return strings.Contains(op.stdout.String(), markerInstalled) })
		op.leave(t)
		record := a.cli(t, "logs", "hardware/"+name)
		assertRecord(t, record, "console", markerInstalled)
		assertRecord(t, record, "console", `ssh user "`+name+`" from`, "attached through machine/"+machine)
		var lines []string
		for _, l := range strings.Split(record, "\n") {
			if strings.Contains(l, "  console ") {
				lines = append(lines, l)
			}
		}
		t.Logf("ssh console: %d bytes, banner %q, its end:\n%s\nthe record's %d console lines, first and last:\n%s\n…\n%s", len(op.stdout.String()),
			strings.TrimSpace(op.stderr.String()), tail(op.stdout.String(), 6), len(lines),
			strings.Join(lines[:min(4, len(lines))], "\n"), strings.Join(lines[max(0, len(lines)-4):], "\n"))
	}
	if os.Getenv("ANVIL_E2E_SERIAL") != "" {
		t.Logf("serial console:\n%s", serial)
	}
	t.Logf("bmc %s: netboot job %.1fs; command → power on %.1fs, → workflow SUCCESS %.1fs, → installed OS powered off %.1fs", how,
		j.Status.Completion.Sub(*j.Status.StartTime).Seconds(), powered.Seconds(), success.Seconds(), installed.Seconds())
}

// consoleOperator is an operator with an SSH key in the machine's
// Hardware, watching its serial console with OpenSSH's client through
// Anvil's console port.
type consoleOperator struct {
	ns             *netns
	key            string
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr *testtool.SyncBuffer
}

func newConsoleOperator(t *testing.T, ns *netns) *consoleOperator {
	t.Helper()
	keygen := testtool.RequireBinary(t, "ssh-keygen", "openssh-client")
	testtool.RequireBinary(t, "ssh", "openssh-client")
	op := &consoleOperator{ns: ns, key: filepath.Join(t.TempDir(), "id_operator"), stdout: &testtool.SyncBuffer{}, stderr: &testtool.SyncBuffer{}}
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "operator", "-f", op.key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	return op
}

// publicKey is the operator's authorized_keys line; "" for no operator.
func (op *consoleOperator) publicKey(t *testing.T) string {
	t.Helper()
	if op == nil {
		return ""
	}
	b, err := os.ReadFile(op.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// attach runs `ssh -p 2222 hardware@anvil` in the lab namespace until
// leave, its input open (an operator who types nothing).
func (op *consoleOperator) attach(t *testing.T, hardware string) {
	t.Helper()
	if op == nil {
		return
	}
	op.cmd = exec.Command("ip", "netns", "exec", op.ns.name, "ssh", "-F", "/dev/null", "-T", "-p", "2222", "-i", op.key,
		"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", hardware+"@"+serverIP)
	op.cmd.Stdout, op.cmd.Stderr = op.stdout, op.stderr
	var err error
	if op.stdin, err = op.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := op.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { op.leave(t) })
	testtool.WaitFor(t, "the console's banner", func() bool {
		return strings.Contains(op.stderr.String(), "serial console of hardware/"+hardware)
	})
}

// leave ends the operator's ssh.
func (op *consoleOperator) leave(t *testing.T) {
	t.Helper()
	if op.cmd == nil || op.cmd.Process == nil {
		return
	}
	op.stdin.Close()
	_ = op.cmd.Process.Kill()
	_ = op.cmd.Wait()
	op.cmd = nil
}
