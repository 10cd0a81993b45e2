package console_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/bmc/bmctest"
	"github.com/anvilproj/anvil/internal/console"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/testtool"
)

const (
	bmcUser     = "admin"
	bmcPassword = "console-bmc-pw"
)

type eventLog struct {
	mu     sync.Mutex
	events []machinelog.Event
}

func (l *eventLog) Record(e machinelog.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// text returns "MAC service [outcome] message" lines.
func (l *eventLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, e := range l.events {
		fmt.Fprintf(&b, "%s %s [%s] %s\n", e.MAC, e.Service, e.Outcome, e.Message)
	}
	return b.String()
}

// lab is a console server over a store, a BMC executor and ipmi_sim,
// whose Serial over LAN console is the test's TCP listener (the
// machine's serial port).
type lab struct {
	dir     string
	st      *bolt.Store
	sealer  *secrets.Sealer
	events  *eventLog
	sim     *bmctest.Sim
	serial  net.Listener
	port    int
	key     string // the operator's private key file; key+".pub" is in node1's ssh_keys
	wrong   string // a key no Hardware holds
	machine chan net.Conn
}

func newLab(t *testing.T) *lab {
	t.Helper()
	return newLabAttach(t, nil)
}

// attachFunc is console.Config.Attach.
type attachFunc = func(context.Context, *model.Machine, io.Reader, io.Writer) error

// newLabAttach is newLab with the BMC executor's Console wrapped by wrap
// (when not nil), and lost consoles attached again after 10 ms, for 1 s.
func newLabAttach(t *testing.T, wrap func(attachFunc) attachFunc) *lab {
	t.Helper()
	keygen := testtool.RequireBinary(t, "ssh-keygen", "openssh-client")
	testtool.RequireBinary(t, "ssh", "openssh-client")
	dir := t.TempDir()
	l := &lab{dir: dir, events: &eventLog{}, machine: make(chan net.Conn, 4),
		key: filepath.Join(dir, "id_operator"), wrong: filepath.Join(dir, "id_stranger")}
	for _, k := range []string{l.key, l.wrong} {
		if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", filepath.Base(k), "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
	}
	var err error
	if l.serial, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.serial.Close() })
	go func() {
		for {
			c, err := l.serial.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			l.machine <- c
		}
	}()
	l.sim = bmctest.StartSimSOL(t, bmcUser, bmcPassword, l.serial.Addr().String())

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if l.st, err = bolt.Open(filepath.Join(dir, "anvil.db"), bolt.Options{Logger: logger}); err != nil {
		t.Fatal(err)
	}
	if l.sealer, err = secrets.OpenSealer(filepath.Join(dir, secrets.KeyFileName), nil); err != nil {
		t.Fatal(err)
	}
	ex := bmc.New(bmc.Config{Store: l.st, Unseal: l.sealer.Open, Logger: logger,
		Providers: []bmc.Provider{bmc.IPMI{Timeout: 500 * time.Millisecond, Retries: 1}}})
	hostKey, err := console.HostKey(filepath.Join(dir, "console", "ssh_host_ed25519_key"))
	if err != nil {
		t.Fatal(err)
	}
	attach := attachFunc(ex.Console)
	if wrap != nil {
		attach = wrap(attach)
	}
	srv := console.New(console.Config{Store: l.st, HostKey: hostKey, Attach: attach, Events: l.events, Logger: logger,
		ReattachWait: 10 * time.Millisecond, ReattachFor: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.port = ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		l.st.Close()
	})

	pub, err := os.ReadFile(l.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"ssh-rsa AAAA-not-a-key someone", string(pub)}
	l.put(t,
		secretObj("default", "bmc", bmcPassword),
		secretObj("default", "bmc-wrong", "not-the-password"),
		machineObj("default", "bmc-node1", "bmc", l.sim.Port),
		machineObj("default", "bmc-node3", "bmc-wrong", l.sim.Port),
		hardware("default", "node1", "52:54:00:c0:00:01", "bmc-node1", keys),
		hardware("default", "node2", "52:54:00:c0:00:02", "", keys),
		hardware("default", "node3", "52:54:00:c0:00:03", "bmc-node3", keys),
		hardware("default", "node4", "52:54:00:c0:00:04", "no-such-machine", keys),
		// node2 again, in another organisation, with the same key.
		hardware("acme", "node2", "52:54:00:c0:00:05", "", keys),
	)
	return l
}

func (l *lab) put(t *testing.T, objs ...model.Object) {
	t.Helper()
	for _, o := range objs {
		if s, ok := o.(*model.Secret); ok {
			if err := l.sealer.Seal(s); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.st.Apply(context.Background(), []model.Object{o}); err != nil {
			t.Fatal(err)
		}
	}
}

func secretObj(ns, name, password string) *model.Secret {
	return &model.Secret{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name}, Type: "kubernetes.io/basic-auth",
		Data: map[string]string{"username": base64.StdEncoding.EncodeToString([]byte(bmcUser)),
			"password": base64.StdEncoding.EncodeToString([]byte(password))}}
}

func machineObj(ns, name, secret string, port int) *model.Machine {
	return &model.Machine{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec: model.MachineSpec{Connection: model.Connection{Host: "127.0.0.1", Port: port,
			AuthSecretRef:   model.SecretReference{Name: secret, Namespace: ns},
			ProviderOptions: &model.ProviderOptions{IPMITOOL: &model.IPMIOptions{CipherSuite: "3"}}}}}
}

func hardware(ns, name, mac, bmcRef string, keys []string) *model.Hardware {
	h := &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name},
		Spec: model.HardwareSpec{Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: mac}}},
			Metadata: &model.HardwareMetadata{Instance: &model.MetadataInstance{SSHKeys: keys}}}}
	if bmcRef != "" {
		h.Spec.BMCRef = &model.LocalObjectReference{Name: bmcRef}
	}
	return h
}

// sshSession is a running OpenSSH client.
type sshSession struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr *testtool.SyncBuffer
	done           chan error
}

// ssh starts OpenSSH's client as user with key, its input a pipe.
func (l *lab) ssh(t *testing.T, user, key string, command ...string) *sshSession {
	t.Helper()
	args := []string{"-F", "/dev/null", "-T", "-p", strconv.Itoa(l.port), "-i", key,
		"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
		"-o", "UserKnownHostsFile=" + filepath.Join(l.dir, "known_hosts"), "-o", "LogLevel=ERROR",
		user + "@127.0.0.1"}
	cmd := exec.Command("ssh", append(args, command...)...)
	s := &sshSession{cmd: cmd, stdout: &testtool.SyncBuffer{}, stderr: &testtool.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = s.stdout, s.stderr
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	return s
}

// exit waits for the client to end and returns its exit code.
func (s *sshSession) exit(t *testing.T) int {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("ssh did not end; stderr:\n%s", s.stderr)
		return -1
	}
}

// machineConn returns ipmi_sim's connection to the machine's serial port.
func (l *lab) machineConn(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-l.machine:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("ipmi_sim did not connect to the machine's serial port")
		return nil
	}
}

// show makes the machine print text until every session shows it (what
// the machine writes before a console is attached is lost, as on a real
// serial port).
func show(t *testing.T, serial net.Conn, text string, sessions ...*sshSession) {
	t.Helper()
	testtool.WaitFor(t, fmt.Sprintf("%q on the console", text), func() bool {
		if _, err := serial.Write([]byte(text)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		for _, s := range sessions {
			if !strings.Contains(s.stdout.String(), strings.TrimSpace(text)) {
				return false
			}
		}
		return true
	})
}

// typed reads the machine's serial port until it has received want.
func typed(t *testing.T, serial net.Conn, want string) {
	t.Helper()
	var got []byte
	buf := make([]byte, 64)
	_ = serial.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer serial.SetReadDeadline(time.Time{}) //nolint:errcheck // best effort
	for !bytes.Contains(got, []byte(want)) {
		n, err := serial.Read(buf)
		if err != nil {
			t.Fatalf("the serial port got %q, not %q: %v", got, want, err)
		}
		got = append(got, buf[:n]...)
	}
}

// TestSSHConsole: OpenSSH's client, logged in with a key of node1's
// ssh_keys, sees what the machine writes on its serial port (through
// ipmi_sim's Serial over LAN) and types on it; a second operator shares
// the same console, each can leave without ending the other's view; the
// last one out releases the BMC's SOL payload; the console's lines and
// the logins are in the machine's record, terminal escapes removed.
func TestSSHConsole(t *testing.T) {
	l := newLab(t)
	a := l.ssh(t, "node1", l.key)
	testtool.WaitFor(t, "the banner", func() bool { return strings.Contains(a.stderr.String(), "serial console of hardware/node1") })
	serial := l.machineConn(t)
	show(t, serial, "Debian GNU/Linux 13 node1 ttyS0\r\n\x1b[1mnode1 login: \x1b[0m", a)
	if _, err := a.stdin.Write([]byte("root\n")); err != nil {
		t.Fatal(err)
	}
	typed(t, serial, "root\n")

	b := l.ssh(t, "default/node1", l.key)
	testtool.WaitFor(t, "the second banner", func() bool { return strings.Contains(b.stderr.String(), "serial console of hardware/node1") })
	show(t, serial, "Password: \r\n", a, b)
	if _, err := b.stdin.Write([]byte("hunter2\n")); err != nil {
		t.Fatal(err)
	}
	typed(t, serial, "hunter2\n")

	// The first operator leaves; the second still watches.
	_ = a.cmd.Process.Kill()
	show(t, serial, "Last login: today\r\n", b)
	if strings.Contains(a.stdout.String(), "Last login") {
		t.Error("the first operator saw output after leaving")
	}
	// The end of the second operator's input leaves it watching.
	b.stdin.Close()
	show(t, serial, "node1:~# \r\n", b)
	_ = b.cmd.Process.Kill()

	// The console was released: the BMC lets another SOL session in.
	conn := bmc.Conn{Host: l.sim.Host, Port: l.sim.Port, Username: bmcUser, Password: bmcPassword, CipherSuite: "3"}
	testtool.WaitFor(t, "the BMC's SOL payload to be released", func() bool {
		err := bmc.IPMI{Timeout: 500 * time.Millisecond}.Console(context.Background(), conn, strings.NewReader(""), io.Discard)
		return err == nil
	})

	record := l.events.text()
	for _, want := range []string{
		"52:54:00:c0:00:01 console [output] Debian GNU/Linux 13 node1 ttyS0\n",
		"52:54:00:c0:00:01 console [output] node1 login:",
		"52:54:00:c0:00:01 console [output] Last login: today\n",
		`console [attached] ssh user "node1" from 127.0.0.1:`,
		`console [attached] ssh user "default/node1" from 127.0.0.1:`,
		"attached through machine/bmc-node1",
		`console [detached] ssh user "node1"`,
	} {
		if !strings.Contains(record, want) {
			t.Errorf("the record lacks %q:\n%s", want, record)
		}
	}
	if strings.Contains(record, "\x1b") || strings.Contains(record, `\x1b`) {
		t.Errorf("terminal escapes in the record:\n%s", record)
	}
}

// TestSSHConsoleRefusals: each way a login or an attach can fail ends
// with a message that says why, and no password.
func TestSSHConsoleRefusals(t *testing.T) {
	l := newLab(t)
	cases := []struct {
		name, user, key string
		command         []string
		code            int
		stderr          string
		record          string // in node1's record, if anything
	}{
		{name: "key not in ssh_keys", user: "node1", key: l.wrong, code: 255, stderr: "Permission denied (publickey)",
			record: `52:54:00:c0:00:01 console [refused] ssh login as "node1" from 127.0.0.1:`},
		{name: "no such hardware", user: "node9", key: l.key, code: 255, stderr: "Permission denied (publickey)"},
		// node2 is in default and acme with the same key: the bare
		// name is ambiguous, the namespaced ones are not.
		{name: "name in two namespaces", user: "node2", key: l.key, code: 255, stderr: "Permission denied (publickey)"},
		{name: "no bmcRef", user: "default/node2", key: l.key, code: 1, stderr: "hardware/node2 has no spec.bmcRef"},
		{name: "other organisation", user: "acme/node2", key: l.key, code: 1, stderr: "hardware/node2 has no spec.bmcRef"},
		{name: "machine missing", user: "node4", key: l.key, code: 1, stderr: "spec.bmcRef names machine/no-such-machine, which does not exist"},
		{name: "wrong BMC password", user: "node3", key: l.key, code: 1, stderr: "refused the username or password"},
		{name: "a command", user: "node1", key: l.key, command: []string{"reboot"}, code: 2, stderr: "attaches serial consoles only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := l.ssh(t, c.user, c.key, c.command...)
			s.stdin.Close()
			if code := s.exit(t); code != c.code || !strings.Contains(s.stderr.String(), c.stderr) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, s.stderr, c.code, c.stderr)
			}
			if strings.Contains(s.stderr.String(), "not-the-password") || strings.Contains(l.events.text(), "not-the-password") {
				t.Errorf("a password leaked:\n%s\n%s", s.stderr, l.events.text())
			}
			if c.record != "" {
				// The client may be gone before the server has seen the
				// end of the handshake.
				testtool.WaitFor(t, "the refusal in the record", func() bool { return strings.Contains(l.events.text(), c.record) })
			}
		})
	}
}

// TestHostKeyKept: the host key is made once and read back the same, so
// operators' known_hosts stay valid across restarts.
func TestHostKeyKept(t *testing.T) {
	p := filepath.Join(t.TempDir(), "console", "ssh_host_ed25519_key")
	a, err := console.HostKey(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := console.HostKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.PublicKey().Marshal(), b.PublicKey().Marshal()) {
		t.Error("a second read made another host key")
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("host key file: %v %v", fi.Mode(), err)
	}
	if err := os.WriteFile(p, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := console.HostKey(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("a corrupt host key: %v", err)
	}
}

// TestSSHConsoleReattach: a console lost mid-stream (the BMC stopped
// answering) is attached again while the operator watches, through
// refusals while the BMC recovers; the operator is told, and the record
// keeps each loss. A console lost for longer than ReattachFor ends the
// session saying why.
func TestSSHConsoleReattach(t *testing.T) {
	var calls atomic.Int32
	l := newLabAttach(t, func(bmcAttach attachFunc) attachFunc {
		return func(ctx context.Context, m *model.Machine, in io.Reader, out io.Writer) error {
			switch n := calls.Add(1); {
			case n == 1:
				_, _ = out.Write([]byte("first life\r\n"))
				return fmt.Errorf("%w: the BMC stopped answering", console.ErrLost)
			case n == 2:
				return errors.New("activate serial over LAN: the console is already attached elsewhere")
			case m.Name == "bmc-node3":
				return fmt.Errorf("%w: the BMC is gone", console.ErrLost)
			}
			return bmcAttach(ctx, m, in, out)
		}
	})
	s := l.ssh(t, "node1", l.key)
	testtool.WaitFor(t, "the first life on the console", func() bool { return strings.Contains(s.stdout.String(), "first life") })
	serial := l.machineConn(t)
	show(t, serial, "second life\r\n", s)
	for _, want := range []string{
		"[anvil: console lost: the BMC stopped answering; attaching again in 10ms]",
		"[anvil: console not back yet: activate serial over LAN: the console is already attached elsewhere; attaching again in 20ms]",
	} {
		if !strings.Contains(s.stdout.String(), want) {
			t.Errorf("the operator was not told %q:\n%s", want, s.stdout)
		}
	}
	if !strings.Contains(l.events.text(), "52:54:00:c0:00:01 console [lost] console lost: the BMC stopped answering") {
		t.Errorf("the record lacks the loss:\n%s", l.events.text())
	}
	_ = s.cmd.Process.Kill()

	// node3's BMC never comes back: after ReattachFor the session ends.
	gone := l.ssh(t, "node3", l.key)
	if code := gone.exit(t); code != 1 || !strings.Contains(gone.stderr.String(), "console of hardware/node3 ended: console lost: the BMC is gone") {
		t.Errorf("exit %d, stderr:\n%s", code, gone.stderr)
	}
}
