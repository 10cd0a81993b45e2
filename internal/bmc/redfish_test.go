package bmc_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/test/redfishsim"
)

const (
	rfUser     = "root"
	rfPassword = "calvin-7Qx2"
)

// isoServer serves content as /boot.iso over plain HTTP, as Anvil or a
// web server would serve an ISO to a BMC.
func isoServer(t *testing.T, content []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/boot.iso" && r.URL.Path != "/other.iso" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(content)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func caPool(t *testing.T, sim *redfishsim.Server) *x509.CertPool {
	t.Helper()
	pool, err := bmc.LoadCAFile(sim.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func oneSystem(t *testing.T, cfg redfishsim.Config) (*redfishsim.Server, *redfishsim.FakeMachine) {
	t.Helper()
	m := &redfishsim.FakeMachine{}
	cfg.Username, cfg.Password = rfUser, rfPassword
	if cfg.Systems == nil {
		cfg.Systems = []redfishsim.System{{ID: "1", Machine: m}}
	}
	return redfishsim.Start(t, cfg), m
}

func rfConn(sim *redfishsim.Server) bmc.Conn {
	return bmc.Conn{Host: sim.Host, Port: sim.Port, Username: rfUser, Password: rfPassword}
}

// TestLoadCAFile: a CA file that is not PEM is refused at start, naming it.
func TestLoadCAFile(t *testing.T) {
	bad := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bmc.LoadCAFile(bad); err == nil || err.Error() != "BMC CA file "+bad+": no PEM certificate in it" {
		t.Errorf("not PEM: %v", err)
	}
	if _, err := bmc.LoadCAFile(bad + ".missing"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing: %v", err)
	}
}

// TestRedfishProvider drives every operation through a session against the
// simulator: the power follows ComputerSystem.Reset, a one-time boot is
// the Boot override with Enabled=Once (spent by the next boot), virtual
// media is fetched from its URL into the drive, and the session is
// deleted at Close.
func TestRedfishProvider(t *testing.T) {
	sim, m := oneSystem(t, redfishsim.Config{})
	iso := bytes.Repeat([]byte("anvil-iso "), 4096)
	base := isoServer(t, iso)
	ctx := context.Background()
	s, err := bmc.Redfish{RootCAs: caPool(t, sim)}.Open(ctx, rfConn(sim))
	if err != nil {
		t.Fatal(err)
	}
	if created, _ := sim.Sessions(); created != 1 {
		t.Errorf("sessions created = %d; want 1 (session auth)", created)
	}
	st := func() string {
		t.Helper()
		st, err := s.PowerState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if got := st(); got != model.PowerOff {
		t.Fatalf("power = %s; want off", got)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetBootDevice(ctx, model.BootDevicePXE, true, false))
	if tg, en, mode := sim.Boot("1"); tg != "Pxe" || en != "Once" || mode != "UEFI" {
		t.Errorf("boot override = %s %s %s; want Pxe Once UEFI", tg, en, mode)
	}
	must(s.SetPower(ctx, model.PowerActionOn))
	if got := st(); got != model.PowerOn || m.LastBoot() != "Pxe" {
		t.Errorf("after on: power %s, boot %q; want on, Pxe", got, m.LastBoot())
	}
	if tg, en, _ := sim.Boot("1"); tg != "None" || en != "Disabled" {
		t.Errorf("boot override after the boot = %s %s; want spent (None Disabled)", tg, en)
	}
	must(s.SetPower(ctx, model.PowerActionOn)) // already on: nothing sent, no error
	must(s.SetBootDevice(ctx, model.BootDeviceDisk, false, true))
	must(s.SetPower(ctx, model.PowerActionCycle))
	must(s.SetPower(ctx, model.PowerActionReset))
	if got, want := sim.Boots("1"), []string{"Pxe", "Hdd", "Hdd"}; !slices.Equal(got, want) {
		t.Errorf("boots = %q; want %q (a persistent override stays)", got, want)
	}
	must(s.SetPower(ctx, model.PowerActionSoft))
	if got := st(); got != model.PowerOff {
		t.Errorf("after soft: %s", got)
	}
	must(s.SetPower(ctx, model.PowerActionCycle)) // a cycle of a machine that is off powers it on
	if got := st(); got != model.PowerOn {
		t.Errorf("after cycle from off: %s", got)
	}
	if err := s.SetBootDevice(ctx, model.BootDeviceSafe, false, false); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("safe mode: %v; want not supported", err)
	}

	ms := s.(bmc.MediaSession)
	must(ms.InsertMedia(ctx, "CD", base+"/boot.iso"))
	if !bytes.Equal(m.Media(), iso) || sim.Image("1") != base+"/boot.iso" {
		t.Errorf("after insert: drive holds %d bytes, Image %q", len(m.Media()), sim.Image("1"))
	}
	// Inserting over an image ejects it first (the service refuses an
	// insert while one is in).
	must(ms.InsertMedia(ctx, "CD", base+"/other.iso"))
	if sim.Image("1") != base+"/other.iso" {
		t.Errorf("Image = %q after the second insert", sim.Image("1"))
	}
	must(ms.EjectMedia(ctx, "CD"))
	must(ms.EjectMedia(ctx, "CD")) // already out
	if m.Media() != nil || sim.Image("1") != "" {
		t.Errorf("after eject: %d bytes, Image %q", len(m.Media()), sim.Image("1"))
	}
	if err := ms.InsertMedia(ctx, "Floppy", base+"/boot.iso"); err == nil || !strings.Contains(err.Error(), "none of kind Floppy (the BMC has CD, DVD)") {
		t.Errorf("floppy: %v", err)
	}
	if err := ms.InsertMedia(ctx, "CD", base+"/missing.iso"); err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "404 Not Found") {
		t.Errorf("an image the BMC cannot fetch: %v", err)
	}

	must(s.Close(ctx))
	if created, deleted := sim.Sessions(); deleted != created || sim.OpenSessions() != 0 {
		t.Errorf("sessions created %d, deleted %d, open %d; want every one deleted", created, deleted, sim.OpenSessions())
	}
}

// TestRedfishBasicAuth: a service without SessionService is spoken to with
// basic auth; providerOptions.redfish.useBasicAuth asks for it even where
// sessions exist.
func TestRedfishBasicAuth(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		noSessions bool
		basic      bool
	}{{"service without sessions", true, false}, {"useBasicAuth", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			sim, m := oneSystem(t, redfishsim.Config{NoSessions: tc.noSessions})
			c := rfConn(sim)
			c.BasicAuth = tc.basic
			s, err := bmc.Redfish{RootCAs: caPool(t, sim)}.Open(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetPower(ctx, model.PowerActionOn); err != nil {
				t.Fatal(err)
			}
			if on, _ := m.PoweredOn(); !on {
				t.Error("not powered on")
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if created, _ := sim.Sessions(); created != 0 {
				t.Errorf("%d sessions created; want basic auth only", created)
			}
		})
	}
}

// TestRedfishSystems: with several systems the Machine must name one
// (providerOptions.redfish.systemName, by Id or Name); the errors list them.
func TestRedfishSystems(t *testing.T) {
	a, b := &redfishsim.FakeMachine{}, &redfishsim.FakeMachine{}
	sim, _ := oneSystem(t, redfishsim.Config{Systems: []redfishsim.System{
		{ID: "Blade1", Machine: a}, {ID: "Blade2", Name: "node-b", Machine: b}}})
	p := bmc.Redfish{RootCAs: caPool(t, sim)}
	ctx := context.Background()
	for _, tc := range []struct{ name, want string }{
		{"", "the Redfish service has 2 systems (Blade1, Blade2): name one in the Machine's providerOptions.redfish.systemName"},
		{"Blade9", `providerOptions.redfish.systemName "Blade9": no such system (the service has Blade1, Blade2)`},
	} {
		c := rfConn(sim)
		c.SystemName = tc.name
		if _, err := p.Open(ctx, c); err == nil || err.Error() != tc.want {
			t.Errorf("system %q: %v; want %q", tc.name, err, tc.want)
		}
	}
	if created, deleted := sim.Sessions(); created != 2 || deleted != 2 {
		t.Errorf("failed opens left sessions: created %d, deleted %d", created, deleted)
	}
	c := rfConn(sim)
	c.SystemName = "node-b"
	s, err := p.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.SetPower(ctx, model.PowerActionOn); err != nil {
		t.Fatal(err)
	}
	if onA, _ := a.PoweredOn(); onA {
		t.Error("Blade1 was powered on; the Machine named node-b (Blade2)")
	}
	if onB, _ := b.PoweredOn(); !onB {
		t.Error("Blade2 is off")
	}
}

// TestRedfishResetTypes: a power action takes the first ResetType the
// system advertises in ResetType@Redfish.AllowableValues, and one it has
// none for is refused naming them.
func TestRedfishResetTypes(t *testing.T) {
	m := &redfishsim.FakeMachine{}
	sim, _ := oneSystem(t, redfishsim.Config{Systems: []redfishsim.System{
		{ID: "1", Machine: m, ResetTypes: []string{"ForceOn", "ForceOff", "ForceRestart"}}}})
	ctx := context.Background()
	s, err := bmc.Redfish{RootCAs: caPool(t, sim)}.Open(ctx, rfConn(sim))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for _, a := range []string{model.PowerActionOn, model.PowerActionCycle, model.PowerActionReset, model.PowerActionOff} {
		if err := s.SetPower(ctx, a); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
	}
	if got := sim.Boots("1"); len(got) != 3 {
		t.Errorf("boots %q; want on, then two restarts (ForceRestart)", got)
	}
	if err := s.SetPower(ctx, model.PowerActionOn); err != nil {
		t.Fatal(err)
	}
	err = s.SetPower(ctx, model.PowerActionSoft)
	if want := "power soft: the system allows ResetType [ForceOn ForceOff ForceRestart], none of [GracefulShutdown]"; err == nil || err.Error() != want {
		t.Errorf("soft: %v; want %q", err, want)
	}
}

func redfishMachine(name, secretName string, sim *redfishsim.Server, insecure bool) *model.Machine {
	m := machine(name, secretName, 623, &model.ProviderOptions{PreferredOrder: []string{model.ProviderRedfish},
		Redfish: &model.RedfishOptions{Port: sim.Port}})
	m.Spec.Connection.InsecureTLS = insecure
	return m
}

func media(url string) model.BMCAction {
	return model.BMCAction{VirtualMediaAction: &model.VirtualMediaAction{MediaURL: url, Kind: "CD"}}
}

// TestRedfishJob runs a Rufio Job through the executor with the Redfish
// provider: off, a one-time CD boot in UEFI mode, the ISO as virtual
// media, on; then an eject. Every call is counted under provider redfish.
func TestRedfishJob(t *testing.T) {
	sim, m := oneSystem(t, redfishsim.Config{})
	iso := []byte("an ISO image")
	base := isoServer(t, iso)
	before := providerMetric(t, "anvil_bmc_calls_total", model.ProviderRedfish, "insert_media")
	w := newWorld(t, bmc.IPMI{}, bmc.Redfish{RootCAs: caPool(t, sim), Timeout: 2 * time.Second})
	w.put(t, secret("rf", map[string]string{"username": rfUser, "password": rfPassword}),
		redfishMachine("rf1", "rf", sim, false),
		job("isoboot", "rf1", power(model.PowerActionOff), bootdev(model.BootDeviceCDROM, true), media(base+"/boot.iso"), power(model.PowerActionOn)))
	j := w.wait(t, "isoboot")
	if c := condition(j.Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("job: %+v", j.Status.Conditions)
	}
	if !bytes.Equal(m.Media(), iso) || m.LastBoot() != "Cd" {
		t.Errorf("machine: media %q, boot %q; want the ISO, Cd", m.Media(), m.LastBoot())
	}
	task := w.get(t, model.KindTask, "isoboot-task-2").(*model.BMCTask)
	if task.Spec.Task.Describe() != "virtualMediaAction CD" || condition(task.Status.Conditions, model.ConditionCompleted).Status != model.ConditionTrue {
		t.Errorf("task 2: %s %+v", task.Spec.Task.Describe(), task.Status.Conditions)
	}
	if mm := w.get(t, model.KindMachine, "rf1").(*model.Machine); mm.Status.PowerState != model.PowerOn {
		t.Errorf("machine powerState %q", mm.Status.PowerState)
	}
	w.put(t, job("eject", "rf1", media("")))
	if c := condition(w.wait(t, "eject").Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("eject: %+v", c)
	}
	if m.Media() != nil {
		t.Error("the drive still holds the ISO after the eject job")
	}
	if created, deleted := sim.Sessions(); created != 2 || deleted != 2 {
		t.Errorf("sessions: created %d, deleted %d; want one per job, each deleted", created, deleted)
	}
	if got := providerMetric(t, "anvil_bmc_calls_total", model.ProviderRedfish, "insert_media") - before; got != 1 {
		t.Errorf("anvil_bmc_calls_total{provider=redfish,op=insert_media} rose by %v; want 1", got)
	}
	for _, op := range []string{"open", "set_power", "power_state", "set_boot_device", "eject_media", "close"} {
		if providerMetric(t, "anvil_bmc_calls_total", model.ProviderRedfish, op) == 0 {
			t.Errorf("no redfish %s call counted", op)
		}
	}
}

// TestRedfishJobBadInput: each way a Redfish BMC fails ends the Job Failed
// with the task, the provider and the cause — never the password — and
// leaves no session open.
func TestRedfishJobBadInput(t *testing.T) {
	good, _ := oneSystem(t, redfishsim.Config{})
	erroring, _ := oneSystem(t, redfishsim.Config{})
	erroring.Fail("/redfish/v1/Systems/1", http.StatusInternalServerError)
	hanging, _ := oneSystem(t, redfishsim.Config{})
	hanging.Hang("/redfish/v1/Systems/1")
	// This one answers until the power action, then hangs.
	hangsOnReset, _ := oneSystem(t, redfishsim.Config{})
	hangsOnReset.Hang("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset")
	// The executor trusts good's CA only: the others' certificates are
	// unknown to it unless insecureTLS.
	w := newWorld(t, bmc.Redfish{RootCAs: caPool(t, good), Timeout: 300 * time.Millisecond})
	w.put(t,
		secret("rf", map[string]string{"username": rfUser, "password": rfPassword}),
		secret("rf-wrong", map[string]string{"username": rfUser, "password": "not-" + rfPassword}),
		redfishMachine("wrongpw", "rf-wrong", good, false),
		redfishMachine("untrusted", "rf", erroring, false),
		redfishMachine("erroring", "rf", erroring, true),
		redfishMachine("hanging", "rf", hanging, true),
		redfishMachine("hangs-on-reset", "rf", hangsOnReset, true),
		redfishMachine("good", "rf", good, false),
	)
	on := power(model.PowerActionOn)
	cases := []struct {
		job  *model.Job
		want []string
	}{
		{job("rf-wrong-password", "wrongpw", on), []string{
			"task 0 (powerAction on), provider redfish: open session with https://127.0.0.1:",
			"HTTP 401: The user name or password is not correct. (the BMC refused the username or password of the Secret)"}},
		{job("rf-tls-mismatch", "untrusted", on), []string{
			"task 0 (powerAction on), provider redfish: open session with https://127.0.0.1:",
			"x509: certificate signed by unknown authority", "(the BMC's certificate is not signed by a CA Anvil trusts: give the CA with anvil serve --bmc-ca-file, or set the Machine's insecureTLS)"}},
		{job("rf-500", "erroring", on), []string{
			"task 0 (powerAction on), provider redfish: list systems: read /redfish/v1/Systems/1: the BMC answered HTTP 500: The request failed due to an internal service error."}},
		{job("rf-hangs", "hanging", on), []string{
			"task 0 (powerAction on), provider redfish: list systems:",
			"Client.Timeout exceeded", "(the BMC did not answer in time)"}},
		{job("rf-hangs-on-reset", "hangs-on-reset", on), []string{
			"task 0 (powerAction on), provider redfish: ComputerSystem.Reset On: Post \"https://127.0.0.1:",
			"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset\": context deadline exceeded (Client.Timeout exceeded while awaiting headers) (the BMC did not answer in time)"}},
	}
	for _, tc := range cases {
		w.put(t, tc.job)
	}
	w.put(t, job("rf-good", "good", on))
	if j := w.wait(t, "rf-good"); condition(j.Status.Conditions, model.ConditionCompleted).Status != model.ConditionTrue {
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
			if strings.Contains(c.Message, rfPassword) {
				t.Errorf("message %q holds the password", c.Message)
			}
		})
	}
	for name, sim := range map[string]*redfishsim.Server{"good": good, "erroring": erroring, "hanging": hanging, "hangs-on-reset": hangsOnReset} {
		if created, deleted := sim.Sessions(); created != deleted {
			t.Errorf("%s: sessions created %d, deleted %d: a failed job left one open", name, created, deleted)
		}
	}
	if created, _ := erroring.Sessions(); created != 1 {
		t.Errorf("the erroring BMC saw %d sessions; want 1 (the untrusted job never got past TLS)", created)
	}
}

// TestRedfishQEMU: the simulator in front of a real QEMU VM, driven by
// Jobs through the executor: power on launches QEMU (QMP query-status
// says running) with the one-time boot on its command line, the ISO lands
// in its CD drive (QMP query-block), a bootable ISO with a one-time CD
// boot and a power cycle is what the firmware boots, and power off ends
// the process.
func TestRedfishQEMU(t *testing.T) {
	qemu := testtool.RequireBinary(t, "qemu-system-x86_64", "qemu-system-x86")
	vm := &redfishsim.QEMU{Binary: qemu, Dir: t.TempDir()}
	t.Cleanup(vm.Close)
	sim := redfishsim.Start(t, redfishsim.Config{Username: rfUser, Password: rfPassword,
		Systems: []redfishsim.System{{ID: "vm1", Machine: vm}}})
	base := isoServer(t, bytes.Repeat([]byte{0}, 1<<20))
	w := newWorld(t, bmc.Redfish{RootCAs: caPool(t, sim)})
	w.put(t, secret("rf", map[string]string{"username": rfUser, "password": rfPassword}),
		redfishMachine("vm", "rf", sim, false),
		job("vm-on", "vm", bootdev(model.BootDevicePXE, false), power(model.PowerActionOn), media(base+"/boot.iso")))
	if c := condition(w.wait(t, "vm-on").Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("vm-on: %+v", w.get(t, model.KindJob, "vm-on").(*model.Job).Status.Conditions)
	}
	pid, args := vm.Process()
	if pid == 0 {
		t.Fatal("no QEMU process after power on")
	}
	if !strings.Contains(strings.Join(args, " "), "-boot order=c,strict=on,once=n") {
		t.Errorf("QEMU %v was not started with the one-time PXE boot", args)
	}
	var status struct{ Status string }
	raw, err := vm.Query("query-status")
	if err != nil || json.Unmarshal(raw, &status) != nil || status.Status != "running" {
		t.Errorf("query-status: %s %v; want running", raw, err)
	}
	raw, err = vm.Query("query-block")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []struct {
		QDev     string `json:"qdev"`
		Inserted *struct {
			File string `json:"file"`
		} `json:"inserted"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	inserted := ""
	for _, b := range blocks {
		if strings.Contains(b.QDev, "cd0") && b.Inserted != nil {
			inserted = b.Inserted.File
		}
	}
	if !strings.HasSuffix(inserted, ".iso") {
		t.Errorf("query-block: %s; want the ISO in cd0", raw)
	}
	if m := w.get(t, model.KindMachine, "vm").(*model.Machine); m.Status.PowerState != model.PowerOn {
		t.Errorf("machine powerState %q", m.Status.PowerState)
	}

	// A bootable ISO (iPXE's) as virtual media, a one-time CD boot and a
	// power cycle: the firmware boots from the virtual CD.
	const ipxeISO = "/usr/lib/ipxe/ipxe.iso"
	isoBytes, err := os.ReadFile(ipxeISO)
	if err != nil {
		testtool.Need(t, "%s (Debian package ipxe; scripts/install-deps.sh installs it)", ipxeISO)
	}
	bootable := isoServer(t, isoBytes)
	w.put(t, job("vm-cd", "vm", media(bootable+"/boot.iso"), bootdev(model.BootDeviceCDROM, false), power(model.PowerActionCycle)))
	if c := condition(w.wait(t, "vm-cd").Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("vm-cd: %+v", w.get(t, model.KindJob, "vm-cd").(*model.Job).Status.Conditions)
	}
	if p, _ := vm.Process(); p == pid {
		t.Errorf("QEMU %d still runs after a power cycle with a boot override (it is relaunched with -boot once=d)", pid)
	}
	// Its own order is the disk only (strict): a boot from the CD is the
	// override's doing.
	testtool.WaitFor(t, "the firmware to boot from the virtual CD", func() bool {
		return strings.Contains(vm.FirmwareLog(), "Booting from DVD/CD...")
	})
	pid, _ = vm.Process()

	w.put(t, job("vm-off", "vm", power(model.PowerActionOff)))
	if c := condition(w.wait(t, "vm-off").Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("vm-off: %+v", c)
	}
	if p, _ := vm.Process(); p != 0 {
		t.Errorf("QEMU (pid %d) runs after power off", p)
	}
	if err := syscallAlive(pid); err == nil {
		t.Errorf("process %d still exists after power off", pid)
	}
}

// syscallAlive reports nil while pid exists (QEMU is reaped by the
// simulator once it exits).
func syscallAlive(pid int) error {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err
}
