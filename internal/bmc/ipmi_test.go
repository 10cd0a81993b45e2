package bmc_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	ipmibmc "github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/hal/mock"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/transport/udp"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/bmc/bmctest"
	"github.com/anvilproj/anvil/internal/model"
)

const (
	simUser     = "admin"
	simPassword = "s3cret-bmc-pw"
)

// fast keeps failing exchanges short in tests: 300 ms per request, one
// retry. Only for exchanges a test expects to go unanswered.
var fast = bmc.IPMI{Timeout: 300 * time.Millisecond, Retries: 1}

// steady is for exchanges a test expects to succeed: a CI machine under
// load can starve ipmi_sim for longer than fast's 600 ms (a fresh-clone
// run saw TestJobBeforeItsMachine fail so), and a request that is
// answered does not wait for the timeout anyway.
var steady = bmc.IPMI{Timeout: 2 * time.Second, Retries: 2}

func open(t *testing.T, p bmc.IPMI, c bmc.Conn) bmc.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.Open(ctx, c)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestIPMIAgainstSimulator drives OpenIPMI's ipmi_sim over RMCP+ with
// cipher suite 3 (the simulator offers no SHA-256 suite): power on starts
// the stand-in machine, status reads it, off stops it, a one-time PXE boot
// reaches the simulator's chassis control.
func TestIPMIAgainstSimulator(t *testing.T) {
	sim := bmctest.StartSim(t, simUser, simPassword)
	ctx := context.Background()
	s := open(t, steady, bmc.Conn{Host: sim.Host, Port: sim.Port, Username: simUser, Password: simPassword, CipherSuite: "3"})

	if st, err := s.PowerState(ctx); err != nil || st != model.PowerOff {
		t.Fatalf("PowerState before = %q, %v; want off", st, err)
	}
	if err := s.SetPower(ctx, model.PowerActionOn); err != nil {
		t.Fatal(err)
	}
	if sim.MachinePID() == 0 {
		t.Error("power on: the stand-in machine does not run")
	}
	if st, err := s.PowerState(ctx); err != nil || st != model.PowerOn {
		t.Errorf("PowerState after on = %q, %v; want on", st, err)
	}
	if err := s.SetBootDevice(ctx, model.BootDevicePXE, true, false); err != nil {
		t.Fatal(err)
	}
	if got := sim.Boot(); got != "pxe" {
		t.Errorf("simulator's boot device = %q, want pxe", got)
	}
	if err := s.SetPower(ctx, model.PowerActionOff); err != nil {
		t.Fatal(err)
	}
	if pid := sim.MachinePID(); pid != 0 {
		t.Errorf("power off: the stand-in machine (pid %d) still runs", pid)
	}
	if st, err := s.PowerState(ctx); err != nil || st != model.PowerOff {
		t.Errorf("PowerState after off = %q, %v; want off", st, err)
	}
	// A cycle of a machine that is off powers it on.
	if err := s.SetPower(ctx, model.PowerActionCycle); err != nil {
		t.Fatal(err)
	}
	if sim.MachinePID() == 0 {
		t.Error("power cycle from off: the stand-in machine does not run")
	}
	if err := s.SetBootDevice(ctx, model.BootDeviceDisk, false, false); err != nil {
		t.Fatal(err)
	}
	if got := sim.Boot(); got != "default" {
		t.Errorf("after bootdev disk the simulator's boot device = %q, want default (no override)", got)
	}
}

// TestIPMIWrongPassword: the BMC's refusal says what to check and does not
// carry the password.
func TestIPMIWrongPassword(t *testing.T) {
	sim := bmctest.StartSim(t, simUser, simPassword)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := fast.Open(ctx, bmc.Conn{Host: sim.Host, Port: sim.Port, Username: simUser, Password: "wrong-" + simPassword, CipherSuite: "3"})
	if err == nil || !strings.Contains(err.Error(), "refused the username or password") {
		t.Fatalf("Open with a wrong password: %v", err)
	}
	if strings.Contains(err.Error(), simPassword) {
		t.Errorf("error holds the password: %v", err)
	}
}

// TestIPMICipherSuite17 opens a session with cipher suite 17
// (RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128) against go-ipmi's own
// reference BMC, in process: ipmi_sim has no SHA-256 suite.
func TestIPMICipherSuite17(t *testing.T) {
	h := mock.New()
	b := ipmibmc.New(ipmibmc.DeviceInfo{DeviceID: 32, IPMIVersion: 0x20}, [16]byte{1}, h,
		ipmibmc.WithCipherSuites([]types.CipherSuiteID{types.CipherSuiteID17}))
	u, err := b.Users.Add(2, simUser)
	if err != nil {
		t.Fatal(err)
	}
	u.SetPassword([]byte(simPassword))
	u.Enabled = true
	u.ChannelAccess[1] = ipmibmc.UserChannelAccess{MaxPrivilege: ipmibmc.PrivilegeLevelAdministrator, Enabled: true}
	conn, err := udp.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.NewServer(b, conn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); srv.Close(); <-done })
	_, portStr, _ := net.SplitHostPort(conn.LocalAddr().String())
	port, _ := strconv.Atoi(portStr)

	s := open(t, steady, bmc.Conn{Host: "127.0.0.1", Port: port, Username: simUser, Password: simPassword, CipherSuite: "17"})
	if err := s.SetPower(context.Background(), model.PowerActionOn); err != nil {
		t.Fatal(err)
	}
	if st, err := s.PowerState(context.Background()); err != nil || st != model.PowerOn {
		t.Errorf("PowerState = %q, %v; want on", st, err)
	}
	on, _ := h.Chassis().PowerState(context.Background())
	if !on {
		t.Error("the reference BMC's chassis is not on")
	}
	// Suite 3 only, against a BMC offering 17 only: refused, not
	// silently downgraded.
	_, err = fast.Open(context.Background(), bmc.Conn{Host: "127.0.0.1", Port: port, Username: simUser, Password: simPassword, CipherSuite: "3"})
	if err == nil {
		t.Error("suite 3 against a suite-17-only BMC opened a session")
	}
}

// TestIPMIErrorAnswer: a BMC that answers a command with an error (here
// ipmi_sim, whose chassis control fails) is an error naming the command.
func TestIPMIErrorAnswer(t *testing.T) {
	sim := bmctest.StartSim(t, simUser, simPassword)
	s := open(t, steady, bmc.Conn{Host: sim.Host, Port: sim.Port, Username: simUser, Password: simPassword, CipherSuite: "3"})
	sim.FailControl(t, true)
	err := s.SetPower(context.Background(), model.PowerActionOn)
	if err == nil || !strings.Contains(err.Error(), "chassis control on") {
		t.Fatalf("SetPower against a failing chassis: %v", err)
	}
	t.Logf("error: %v", err)
	if sim.MachinePID() != 0 {
		t.Error("the stand-in machine runs although the chassis control failed")
	}
	sim.FailControl(t, false)
	if err := s.SetPower(context.Background(), model.PowerActionOn); err != nil || sim.MachinePID() == 0 {
		t.Errorf("SetPower once the chassis works again: %v", err)
	}
}
