package redfishsim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// QEMU is a Machine that is a real QEMU VM, driven through QMP on a unix
// socket:
//
//   - power on launches QEMU (a machine that is off has no process) with
//     `-boot order=c,strict=on` — its own order is its disk only — plus
//     `once=X` for a boot override (Pxe n, Cd d, Hdd c; BiosSetup
//     menu=on), and the inserted image in its CD drive;
//   - ForceOff is QMP `quit`; GracefulShutdown is `system_powerdown` (ACPI:
//     the guest decides);
//   - a reset is `system_reset`, or — with a boot override, which QEMU
//     reads only at launch — a quit and a new launch;
//   - virtual media is `blockdev-change-medium` / `eject` on the ide-cd
//     device "cd0";
//   - SeaBIOS's debug log (FirmwareLog) says which device it booted.
//
// Its methods are safe for concurrent use.
type QEMU struct {
	// Binary is qemu-system-x86_64's path.
	Binary string
	// Dir holds the QMP socket and the console log.
	Dir string
	// Extra arguments for every launch (a NIC, a disk).
	Extra []string
	// Accel is QEMU's accelerator list; empty means KVM when /dev/kvm
	// opens, else TCG ("tcg" avoids nested KVM, which fails in some
	// sandboxes on real-mode boot loaders).
	Accel string
	// Memory is QEMU's -m; empty means 128 (MiB), enough for firmware
	// tests, not for a boot environment.
	Memory string

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	qmp   *QMP
	media string
}

// PoweredOn implements Machine.
func (m *QEMU) PoweredOn() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running(), nil
}

func (m *QEMU) running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// bootOnce maps Redfish boot sources to QEMU's -boot option.
var bootOnce = map[string]string{"Pxe": "once=n", "Cd": "once=d", "Hdd": "once=c", "BiosSetup": "menu=on"}

// PowerOn implements Machine.
func (m *QEMU) PowerOn(boot string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running() {
		return nil
	}
	sock := filepath.Join(m.Dir, "qmp.sock")
	_ = os.Remove(sock)
	accel := m.Accel
	if accel == "" {
		accel = "tcg"
		if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
			f.Close()
			accel = "kvm:tcg"
		}
	}
	drive := "if=none,id=cdrom0,media=cdrom,readonly=on"
	if m.media != "" {
		drive += ",format=raw,file=" + m.media
	}
	mem := m.Memory
	if mem == "" {
		mem = "128"
	}
	args := []string{"-nodefaults", "-no-user-config", "-machine", "pc,accel=" + accel, "-m", mem,
		"-display", "none", "-serial", "file:" + filepath.Join(m.Dir, "console.log"),
		// SeaBIOS's debug port: its log says which device it boots
		// ("Booting from DVD/CD..."); the file starts anew at each launch.
		"-chardev", "file,id=firmware,path=" + filepath.Join(m.Dir, "firmware.log"),
		"-device", "isa-debugcon,iobase=0x402,chardev=firmware",
		"-qmp", "unix:" + sock + ",server=on,wait=off",
		"-drive", drive, "-device", "ide-cd,drive=cdrom0,id=cd0"}
	// The machine's own order is its disk, only (strict), as a server's
	// firmware set up to boot its OS: a boot from anything else is the
	// override's doing.
	bootArg := "order=c,strict=on"
	if o := bootOnce[boot]; o != "" {
		bootArg += "," + o
	}
	args = append(args, "-boot", bootArg)
	args = append(args, m.Extra...)
	cmd := exec.Command(m.Binary, args...)
	logf, err := os.OpenFile(filepath.Join(m.Dir, "qemu.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start QEMU: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	q, err := DialQMP(sock, done, 20*time.Second)
	if err != nil {
		_ = cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(filepath.Join(m.Dir, "qemu.log"))
		return fmt.Errorf("QMP: %w (QEMU said: %s)", err, strings.TrimSpace(string(log)))
	}
	m.cmd, m.done, m.qmp = cmd, done, q
	return nil
}

// PowerOff implements Machine.
func (m *QEMU) PowerOff(graceful bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running() {
		return nil
	}
	if graceful {
		_, err := m.qmp.Execute("system_powerdown", nil)
		return err
	}
	return m.quit()
}

// quit ends QEMU and waits for it; m.mu is held.
func (m *QEMU) quit() error {
	_, err := m.qmp.Execute("quit", nil)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	m.qmp.Close()
	if err != nil && !errors.Is(err, errQMPClosed) {
		return err
	}
	return nil
}

// Reset implements Machine.
func (m *QEMU) Reset(boot string) error {
	m.mu.Lock()
	if !m.running() {
		m.mu.Unlock()
		return errors.New("the machine is off")
	}
	if bootOnce[boot] == "" {
		defer m.mu.Unlock()
		_, err := m.qmp.Execute("system_reset", nil)
		return err
	}
	err := m.quit()
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return m.PowerOn(boot)
}

// InsertMedia implements Machine.
func (m *QEMU) InsertMedia(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running() {
		if _, err := m.qmp.Execute("blockdev-change-medium", map[string]any{
			"id": "cd0", "filename": path, "format": "raw", "read-only-mode": "read-only"}); err != nil {
			return err
		}
	}
	m.media = path
	return nil
}

// EjectMedia implements Machine.
func (m *QEMU) EjectMedia() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running() {
		if _, err := m.qmp.Execute("eject", map[string]any{"id": "cd0", "force": true}); err != nil {
			return err
		}
	}
	m.media = ""
	return nil
}

// Query runs a QMP command on the running VM, for tests to look at it
// (query-status, query-block).
func (m *QEMU) Query(cmd string) (json.RawMessage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running() {
		return nil, errors.New("the machine is off")
	}
	return m.qmp.Execute(cmd, nil)
}

// Process returns the running QEMU's process id and command line, or 0.
func (m *QEMU) Process() (int, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running() {
		return 0, nil
	}
	return m.cmd.Process.Pid, m.cmd.Args
}

// FirmwareLog returns what the firmware (SeaBIOS) logged since the last
// launch.
func (m *QEMU) FirmwareLog() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "firmware.log"))
	return string(b)
}

// Close kills QEMU if it runs.
func (m *QEMU) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running() {
		_ = m.cmd.Process.Kill()
		<-m.done
		m.qmp.Close()
	}
}

// QMP is a client of QEMU's machine protocol: JSON objects, one a line.
type QMP struct {
	conn net.Conn
	r    *bufio.Reader
}

var errQMPClosed = errors.New("QMP connection closed")

// DialQMP connects to the socket at path once QEMU made it (QEMU may
// still be starting; exited closes when it ended) and leaves the
// capabilities negotiation mode.
func DialQMP(path string, exited <-chan struct{}, timeout time.Duration) (*QMP, error) {
	deadline := time.Now().Add(timeout)
	var conn net.Conn
	for {
		var err error
		conn, err = net.Dial("unix", path)
		if err == nil {
			break
		}
		select {
		case <-exited:
			return nil, errors.New("QEMU exited before its QMP socket answered")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no QMP socket at %s after %s: %w", path, timeout, err)
		}
	}
	q := &QMP{conn: conn, r: bufio.NewReader(conn)}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var greeting struct{ QMP json.RawMessage }
	line, err := q.r.ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &greeting) != nil || greeting.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("no QMP greeting (%q, %v)", line, err)
	}
	if _, err := q.Execute("qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

// qmpReply is one line from QEMU: a command's return or error, or an
// event.
type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
}

// Execute runs one command and returns its "return" value; events that
// arrive meanwhile are skipped.
func (q *QMP) Execute(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	_ = q.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", cmd, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			if cmd == "quit" {
				return nil, errQMPClosed
			}
			return nil, fmt.Errorf("QMP %s: %w", cmd, err)
		}
		ret, event, err := parseReply(line)
		if event {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("QMP %s: %w", cmd, err)
		}
		return ret, nil
	}
}

// parseReply reads one line from QEMU: a command's return value, an
// event (skipped by the caller), or the command's error.
func parseReply(line []byte) (ret json.RawMessage, event bool, err error) {
	var rep qmpReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return nil, false, fmt.Errorf("bad reply %q: %w", line, err)
	}
	switch {
	case rep.Event != "":
		return nil, true, nil
	case rep.Error != nil:
		return nil, false, fmt.Errorf("%s: %s", rep.Error.Class, rep.Error.Desc)
	case rep.Return != nil:
		return rep.Return, false, nil
	}
	return nil, false, fmt.Errorf("reply %q has neither return nor error", line)
}

// Close closes the connection.
func (q *QMP) Close() { q.conn.Close() }
