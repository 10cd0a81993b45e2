package bmc_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/test/amtsim"
)

const (
	amtUser     = "admin"
	amtPassword = "P@ssw0rd-amt"
)

func amtSim(t *testing.T, cfg amtsim.Config, tlsOn bool) *amtsim.Server {
	t.Helper()
	cfg.Username, cfg.Password = amtUser, amtPassword
	sim := amtsim.Start(t, cfg, tlsOn)
	t.Cleanup(func() {
		for _, u := range sim.Unmatched() {
			t.Errorf("the AMT got a request that matches no recorded request:\n%s", u)
		}
	})
	return sim
}

// hostPortOf splits a test server's URL.
func hostPortOf(raw string) (string, int) {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		panic(err)
	}
	return u.Hostname(), port
}

func amtConn(t *testing.T, sim *amtsim.Server, scheme string) bmc.Conn {
	t.Helper()
	host, port := hostPortOf(sim.HTTP.URL)
	return bmc.Conn{Host: host, Port: port, Scheme: scheme, Username: amtUser, Password: amtPassword}
}

func amtCAs(sim *amtsim.Server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(sim.HTTP.Certificate())
	return pool
}

// TestAMTProvider drives the provider against the recorded exchanges:
// power state, every power action, every boot device, and what AMT
// cannot do.
func TestAMTProvider(t *testing.T) {
	sim := amtSim(t, amtsim.Config{Algorithm: "MD5"}, false)
	ctx := context.Background()
	s, err := bmc.IntelAMT{}.Open(ctx, amtConn(t, sim, "http"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	st := func() string {
		t.Helper()
		p, err := s.PowerState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got := st(); got != model.PowerOff {
		t.Fatalf("power %s; want off", got)
	}
	steps := []struct {
		action string
		want   int
	}{
		{model.PowerActionOn, amtsim.On},
		{model.PowerActionOn, amtsim.On}, // already on: nothing sent
		{model.PowerActionCycle, amtsim.On},
		{model.PowerActionReset, amtsim.On},
		{model.PowerActionOff, amtsim.Off},
		{model.PowerActionOff, amtsim.Off},
		{model.PowerActionReset, amtsim.On}, // a reset of a machine that is off powers it on
	}
	for _, step := range steps {
		if err := s.SetPower(ctx, step.action); err != nil {
			t.Fatalf("power %s: %v", step.action, err)
		}
		if sim.Power() != step.want {
			t.Fatalf("after power %s the machine's PowerState is %d; want %d", step.action, sim.Power(), step.want)
		}
	}
	if got := st(); got != model.PowerOn {
		t.Errorf("power %s; want on", got)
	}
	for ex, n := range map[string]int{"power-on": 2, "power-cycle": 1, "power-reset": 1, "power-off": 1} {
		if c := sim.Count(ex); c != n {
			t.Errorf("%s sent %d times; want %d", ex, c, n)
		}
	}
	// One-time boots: each set, then a power cycle boots it once.
	for _, dev := range []struct{ device, boot string }{
		{model.BootDevicePXE, "pxe"}, {model.BootDeviceDisk, "disk"}, {model.BootDeviceCDROM, "cdrom"},
		{model.BootDeviceBIOS, "BIOS setup"}, {model.BootDeviceSafe, "disk (safe mode)"},
	} {
		if err := s.SetBootDevice(ctx, dev.device, true, false); err != nil {
			t.Fatalf("boot %s: %v", dev.device, err)
		}
		if err := s.SetPower(ctx, model.PowerActionCycle); err != nil {
			t.Fatal(err)
		}
		if boots := sim.Boots(); boots[len(boots)-1] != dev.boot {
			t.Errorf("boot %s: the machine booted %q; want %q", dev.device, boots[len(boots)-1], dev.boot)
		}
	}
	if err := s.SetPower(ctx, model.PowerActionCycle); err != nil {
		t.Fatal(err)
	}
	if boots := sim.Boots(); boots[len(boots)-1] != "default" {
		t.Errorf("the one-time boot was not spent: the next cycle booted %q", boots[len(boots)-1])
	}
	err = s.SetBootDevice(ctx, model.BootDevicePXE, false, true)
	if !errors.Is(err, bmc.ErrUnsupported) || !strings.Contains(err.Error(), "its boot override lasts one boot") {
		t.Errorf("persistent boot: %v; want not supported", err)
	}
	// The simulated AMT offers no graceful off (no Intel LMS in its OS):
	// refused before anything is sent.
	err = s.SetPower(ctx, model.PowerActionSoft)
	want := "power soft: the AMT accepts PowerState 8 (Off - Soft), 10 (Master Bus Reset), 5 (Power Cycle (Off - Soft)) now, not 12 (Off - Soft Graceful) (a graceful off needs Intel LMS running in the OS; power off is the hard way)"
	if err == nil || err.Error() != want {
		t.Errorf("power soft: %v\nwant %s", err, want)
	}
	if sim.Count("power-soft") != 0 || sim.Power() != amtsim.On {
		t.Error("power soft was sent, or changed the machine")
	}
	if sim.AuthFailures() != 0 {
		t.Errorf("%d requests were refused their credentials", sim.AuthFailures())
	}
}

// TestAMTDigest: SHA-256 challenges, and nonces the AMT calls stale after
// two uses are renewed without a failure.
func TestAMTDigest(t *testing.T) {
	sim := amtSim(t, amtsim.Config{Algorithm: "SHA-256", NonceUses: 2}, false)
	ctx := context.Background()
	s, err := bmc.IntelAMT{}.Open(ctx, amtConn(t, sim, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for range 5 {
		if p, err := s.PowerState(ctx); err != nil || p != model.PowerOff {
			t.Fatalf("power state: %s %v", p, err)
		}
	}
	if sim.AuthFailures() != 0 {
		t.Errorf("%d requests were refused their credentials", sim.AuthFailures())
	}
}

// TestAMTTLS: AMT over TLS with the CA trusted, or insecureTLS.
func TestAMTTLS(t *testing.T) {
	sim := amtSim(t, amtsim.Config{Power: amtsim.On}, true)
	ctx := context.Background()
	for name, p := range map[string]struct {
		prov     bmc.IntelAMT
		insecure bool
	}{"trusted CA": {bmc.IntelAMT{RootCAs: amtCAs(sim)}, false}, "insecureTLS": {bmc.IntelAMT{}, true}} {
		c := amtConn(t, sim, "https")
		c.InsecureTLS = p.insecure
		s, err := p.prov.Open(ctx, c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st, err := s.PowerState(ctx); err != nil || st != model.PowerOn {
			t.Errorf("%s: power %s %v", name, st, err)
		}
		s.Close(ctx)
	}
}

func amtMachine(name, secretName string, sim *amtsim.Server, opts *model.IntelAMTOptions) *model.Machine {
	// Rufio's spelling of the provider (bmclib's, any case).
	_, port := hostPortOf(sim.HTTP.URL)
	if opts == nil {
		opts = &model.IntelAMTOptions{}
	}
	opts.Port = port
	return machine(name, secretName, 623, &model.ProviderOptions{PreferredOrder: []string{"IntelAMT"}, IntelAMT: opts})
}

// TestAMTJob runs a Rufio netboot Job through the executor with the
// Intel AMT provider: off, a one-time PXE boot, on.
func TestAMTJob(t *testing.T) {
	sim := amtSim(t, amtsim.Config{Power: amtsim.On}, false)
	before := providerMetric(t, "anvil_bmc_calls_total", model.ProviderIntelAMT, "set_boot_device")
	w := newWorld(t, bmc.IPMI{}, bmc.Redfish{}, bmc.IntelAMT{Timeout: 2 * time.Second})
	w.put(t, secret("amt", map[string]string{"username": amtUser, "password": amtPassword}),
		amtMachine("amt1", "amt", sim, nil),
		job("netboot", "amt1", power(model.PowerActionOff), bootdev(model.BootDevicePXE, true), power(model.PowerActionOn)))
	j := w.wait(t, "netboot")
	if c := condition(j.Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("job: %+v", j.Status.Conditions)
	}
	if boots := sim.Boots(); !slices.Equal(boots, []string{"pxe"}) {
		t.Errorf("the machine booted %q; want [pxe]", boots)
	}
	if m := w.get(t, model.KindMachine, "amt1").(*model.Machine); m.Status.PowerState != model.PowerOn {
		t.Errorf("machine powerState %q", m.Status.PowerState)
	}
	if got := providerMetric(t, "anvil_bmc_calls_total", model.ProviderIntelAMT, "set_boot_device") - before; got != 1 {
		t.Errorf("anvil_bmc_calls_total{provider=intelAMT,op=set_boot_device} rose by %v; want 1", got)
	}
}

// TestAMTJobBadInput: each way an AMT fails ends the Job Failed with the
// task, the provider and the cause, never the password.
func TestAMTJobBadInput(t *testing.T) {
	good := amtSim(t, amtsim.Config{}, false)
	tlsSim := amtSim(t, amtsim.Config{}, true)
	faulting := amtSim(t, amtsim.Config{}, false)
	faulting.Fail("pull-power", "fault-access-denied")
	refusing := amtSim(t, amtsim.Config{}, false)
	refusing.Fail("power-on", "power-change-refused")
	hanging := amtSim(t, amtsim.Config{}, false)
	hanging.Hang("power-on")
	w := newWorld(t, bmc.IntelAMT{Timeout: 300 * time.Millisecond})
	w.put(t,
		secret("amt", map[string]string{"username": amtUser, "password": amtPassword}),
		secret("amt-wrong", map[string]string{"username": amtUser, "password": "not-" + amtPassword}),
		amtMachine("wrongpw", "amt-wrong", good, nil),
		amtMachine("untrusted", "amt", tlsSim, &model.IntelAMTOptions{HostScheme: "https"}),
		amtMachine("plain-to-tls", "amt", tlsSim, &model.IntelAMTOptions{HostScheme: "http"}),
		amtMachine("faulting", "amt", faulting, nil),
		amtMachine("hanging", "amt", hanging, nil),
		amtMachine("refusing", "amt", refusing, nil),
		amtMachine("good", "amt", good, nil),
	)
	on := power(model.PowerActionOn)
	vm := model.BMCAction{VirtualMediaAction: &model.VirtualMediaAction{MediaURL: "http://x/a.iso", Kind: "CD"}}
	cases := []struct {
		job  *model.Job
		want []string
	}{
		{job("amt-wrong-password", "wrongpw", on), []string{
			"task 0 (powerAction on), provider intelAMT: open session with http://127.0.0.1:",
			"/wsman: read the power state (Enumerate CIM_AssociatedPowerManagementService): enumerate: HTTP 401: the server refused the username or password (the AMT refused the username or password of the Secret)"}},
		{job("amt-tls-mismatch", "untrusted", on), []string{
			"task 0 (powerAction on), provider intelAMT: open session with https://127.0.0.1:",
			"x509: certificate signed by unknown authority",
			"(the BMC's certificate is not signed by a CA Anvil trusts: give the CA with anvil serve --bmc-ca-file, or set the Machine's insecureTLS)"}},
		{job("amt-http-to-tls", "plain-to-tls", on), []string{
			"task 0 (powerAction on), provider intelAMT: open session with http://127.0.0.1:",
			"(is it a TLS port? set providerOptions.intelAMT.hostScheme to match the port: http on 16992, https on 16993)"}},
		{job("amt-fault", "faulting", on), []string{
			"task 0 (powerAction on), provider intelAMT: open session with http://127.0.0.1:",
			"read the power state (Enumerate CIM_AssociatedPowerManagementService): the AMT answered SOAP Fault AccessDenied: The sender was not authorized to access the resource."}},
		{job("amt-refuses", "refusing", on), []string{
			"task 0 (powerAction on), provider intelAMT: CIM_PowerManagementService.RequestPowerStateChange 2 (On): ReturnValue 2 (Unknown or Unspecified Error)"}},
		{job("amt-hangs", "hanging", on), []string{
			"task 0 (powerAction on), provider intelAMT: CIM_PowerManagementService.RequestPowerStateChange 2 (On): Post \"http://127.0.0.1:",
			"(the BMC did not answer in time)"}},
		{job("amt-virtual-media", "good", vm), []string{
			"task 0 (virtualMediaAction CD), provider intelAMT: virtual media: not supported by this provider (Redfish has it: put redfish first in the Machine's providerOptions.preferredOrder)"}},
	}
	for _, tc := range cases {
		w.put(t, tc.job)
	}
	w.put(t, job("amt-good", "good", on))
	if j := w.wait(t, "amt-good"); condition(j.Status.Conditions, model.ConditionCompleted).Status != model.ConditionTrue {
		t.Errorf("the good job beside the bad ones: %+v", j.Status.Conditions)
	}
	for _, tc := range cases {
		t.Run(tc.job.Name, func(t *testing.T) {
			j := w.wait(t, tc.job.Name)
			c := condition(j.Status.Conditions, model.ConditionFailed)
			if c.Status != model.ConditionTrue {
				t.Fatalf("conditions = %+v; want Failed", j.Status.Conditions)
			}
			for _, s := range tc.want {
				if !strings.Contains(c.Message, s) {
					t.Errorf("message %q lacks %q", c.Message, s)
				}
			}
			t.Logf("message: %q", c.Message)
			if strings.Contains(c.Message, amtPassword) {
				t.Errorf("message %q holds the password", c.Message)
			}
		})
	}
	if n := good.AuthFailures(); n != 1 {
		t.Errorf("the AMT refused %d logins; want 1 (the wrong password, tried once)", n)
	}
	if tlsSim.Count("enumerate-power") != 0 {
		t.Error("a request reached the TLS AMT through an untrusted or plain connection")
	}
}
