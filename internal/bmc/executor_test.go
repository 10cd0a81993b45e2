package bmc_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/bmc/bmctest"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/testtool"
)

// world is a store, a sealer and a running executor.
type world struct {
	st     *bolt.Store
	sealer *secrets.Sealer
	events *eventLog
}

// eventLog keeps the machine record events the executor emits.
type eventLog struct {
	mu     sync.Mutex
	events []machinelog.Event
}

func (l *eventLog) Record(e machinelog.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// lines returns "MAC [outcome] message" for each event so far.
func (l *eventLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		out = append(out, fmt.Sprintf("%s %s [%s] %s", e.MAC, e.Service, e.Outcome, e.Message))
	}
	return out
}

func newWorld(t *testing.T, providers ...bmc.Provider) *world {
	t.Helper()
	return newWorldWith(t, 200*time.Millisecond, providers...)
}

// newWorldWith is newWorld with the time a Job waits for its Machine and
// Secret (bmc.Config.RefGrace).
func newWorldWith(t *testing.T, refGrace time.Duration, providers ...bmc.Provider) *world {
	t.Helper()
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := bolt.Open(filepath.Join(dir, "anvil.db"), bolt.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := secrets.OpenSealer(filepath.Join(dir, secrets.KeyFileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	events := &eventLog{}
	ex := bmc.New(bmc.Config{Store: st, Unseal: sealer.Open, Providers: providers, Logger: logger,
		TaskTimeout: 10 * time.Second, PollInterval: 20 * time.Millisecond, RefGrace: refGrace, Events: events})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
		st.Close()
	})
	return &world{st: st, sealer: sealer, events: events}
}

func (w *world) put(t *testing.T, objs ...model.Object) {
	t.Helper()
	for _, o := range objs {
		if s, ok := o.(*model.Secret); ok {
			if err := w.sealer.Seal(s); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.st.Apply(context.Background(), []model.Object{o}); err != nil {
			t.Fatalf("store %s: %v", model.KindOf(o), err)
		}
	}
}

func secret(name string, data map[string]string) *model.Secret {
	enc := map[string]string{}
	for k, v := range data {
		enc[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return &model.Secret{ObjectMeta: model.ObjectMeta{Namespace: "default", Name: name}, Type: "kubernetes.io/basic-auth", Data: enc}
}

func machine(name, secretName string, port int, opts *model.ProviderOptions) *model.Machine {
	return &model.Machine{ObjectMeta: model.ObjectMeta{Namespace: "default", Name: name},
		Spec: model.MachineSpec{Connection: model.Connection{Host: "127.0.0.1", Port: port,
			AuthSecretRef: model.SecretReference{Name: secretName, Namespace: "default"}, ProviderOptions: opts}}}
}

func power(a string) model.BMCAction { return model.BMCAction{PowerAction: &a} }

func bootdev(d string, efi bool) model.BMCAction {
	return model.BMCAction{OneTimeBootDeviceAction: &model.OneTimeBootDeviceAction{Devices: []string{d}, EFIBoot: efi}}
}

func job(name, machineName string, tasks ...model.BMCAction) *model.Job {
	return &model.Job{ObjectMeta: model.ObjectMeta{Namespace: "default", Name: name},
		Spec: model.JobSpec{MachineRef: model.ObjectReference{Name: machineName, Namespace: "default"}, Tasks: tasks}}
}

// wait returns the Job once it has completed or failed.
func (w *world) wait(t *testing.T, name string) *model.Job {
	t.Helper()
	var j *model.Job
	testtool.WaitFor(t, "job "+name+" to finish", func() bool {
		o, err := w.st.Get(context.Background(), model.KindJob, "default", name)
		if err != nil {
			return false
		}
		j = o.(*model.Job)
		return j.Finished()
	})
	return j
}

func (w *world) get(t *testing.T, kind, name string) model.Object {
	t.Helper()
	o, err := w.st.Get(context.Background(), kind, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func condition(conds []model.JobCondition, typ string) model.JobCondition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return model.JobCondition{}
}

// TestJobAgainstSimulator runs Rufio-shaped Jobs against ipmi_sim through
// the store: Tasks are written as Rufio names them, the Job's conditions
// and times are set, the Machine's power state follows, and the simulator
// powers its stand-in machine and records the one-time PXE boot. The
// Machine names no cipher suite: the provider offers 17, the simulator
// refuses it, and 3 is used.
func TestJobAgainstSimulator(t *testing.T) {
	sim := bmctest.StartSim(t, simUser, simPassword)
	w := newWorld(t)
	w.put(t, secret("bm-auth", map[string]string{"username": simUser, "password": simPassword}),
		machine("m1", "bm-auth", sim.Port, nil),
		job("pxe-on", "m1", power(model.PowerActionOff), bootdev(model.BootDevicePXE, true), power(model.PowerActionOn), power(model.PowerActionStatus)))
	j := w.wait(t, "pxe-on")
	if c := condition(j.Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("job conditions = %+v; want Completed", j.Status.Conditions)
	}
	if c := condition(j.Status.Conditions, model.ConditionRunning); c.Status != model.ConditionFalse {
		t.Errorf("Running = %+v; want False once done", c)
	}
	if j.Status.StartTime == nil || j.Status.CompletionTime == nil || j.Status.CompletionTime.Before(*j.Status.StartTime) {
		t.Errorf("times: start %v completion %v", j.Status.StartTime, j.Status.CompletionTime)
	}
	for i, want := range []string{"powerAction off", "oneTimeBootDeviceAction pxe (efiBoot)", "powerAction on", "powerAction status"} {
		task := w.get(t, model.KindTask, fmt.Sprintf("pxe-on-task-%d", i)).(*model.BMCTask)
		if task.Spec.Task.Describe() != want || task.Labels[model.BMCJobLabel] != "pxe-on" || task.Spec.Connection.Host != "127.0.0.1" {
			t.Errorf("task %d = %s, labels %v", i, task.Spec.Task.Describe(), task.Labels)
		}
		if c := condition(task.Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue || task.Status.CompletionTime == nil {
			t.Errorf("task %d status = %+v", i, task.Status)
		}
	}
	m := w.get(t, model.KindMachine, "m1").(*model.Machine)
	if m.Status.PowerState != model.PowerOn || len(m.Status.Conditions) != 1 || m.Status.Conditions[0].Status != model.ConditionTrue {
		t.Errorf("machine status = %+v; want on, Contactable", m.Status)
	}
	if sim.MachinePID() == 0 {
		t.Error("the stand-in machine does not run after power on")
	}
	if got := sim.Boot(); got != "pxe" {
		t.Errorf("simulator's boot device = %q, want pxe", got)
	}

	w.put(t, job("off", "m1", power(model.PowerActionOff)))
	if c := condition(w.wait(t, "off").Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("off: %+v", c)
	}
	if pid := sim.MachinePID(); pid != 0 {
		t.Errorf("the stand-in machine (pid %d) runs after power off", pid)
	}
	// The newer spelling of a boot device task (customboot's actions
	// use it) reaches the BMC the same way.
	w.put(t, job("disk", "m1", model.BMCAction{BootDevice: &model.BootDeviceConfig{Device: model.BootDeviceDisk, Persistent: true}}))
	if c := condition(w.wait(t, "disk").Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("bootDevice disk: %+v", c)
	}
	if got := sim.Boot(); got != "default" {
		t.Errorf("simulator's boot device after bootDevice disk = %q, want default (ipmi_sim's word for the disk)", got)
	}
	if m := w.get(t, model.KindMachine, "m1").(*model.Machine); m.Status.PowerState != model.PowerOff {
		t.Errorf("machine powerState = %q after off", m.Status.PowerState)
	}
}

// TestJobEventsInMachineRecord: a Job's start, each task's end and the
// Job's end go to the record of the machine whose Hardware names the Job's
// Machine (by its first MAC), a failure with its message and without the
// password; a Machine no Hardware names leaves no record.
func TestJobEventsInMachineRecord(t *testing.T) {
	sim := bmctest.StartSim(t, simUser, simPassword)
	w := newWorld(t)
	hw := &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: "default", Name: "node07"},
		Spec: model.HardwareSpec{BMCRef: &model.LocalObjectReference{Kind: "Machine", Name: "m1"},
			Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: "3c:ec:ef:00:00:07"}}, {DHCP: &model.DHCP{MAC: "3c:ec:ef:00:00:08"}}}}}
	other := &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: "default", Name: "node08"},
		Spec: model.HardwareSpec{Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: "3c:ec:ef:00:00:09"}}}}}
	w.put(t, hw, other, secret("bm-auth", map[string]string{"username": simUser, "password": simPassword}),
		machine("m1", "bm-auth", sim.Port, nil), machine("m2", "bm-auth", sim.Port, nil),
		job("netboot", "m1", power(model.PowerActionOff), bootdev(model.BootDevicePXE, false), power(model.PowerActionOn)))
	w.wait(t, "netboot")
	re := regexp.MustCompile(`in \d+ms`)
	var got []string
	for _, l := range w.events.lines() {
		got = append(got, re.ReplaceAllString(l, "in Nms"))
	}
	want := []string{
		"3c:ec:ef:00:00:07 bmc [started] job netboot started: 3 task(s) on machine/m1",
		"3c:ec:ef:00:00:07 bmc [completed] job netboot task 0 (powerAction off) completed in Nms",
		"3c:ec:ef:00:00:07 bmc [completed] job netboot task 1 (oneTimeBootDeviceAction pxe) completed in Nms",
		"3c:ec:ef:00:00:07 bmc [completed] job netboot task 2 (powerAction on) completed in Nms",
		"3c:ec:ef:00:00:07 bmc [completed] job netboot completed: 3 tasks completed",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	sim.FailControl(t, true)
	w.put(t, job("off", "m1", power(model.PowerActionOff)), job("unnamed", "m2", power(model.PowerActionStatus)))
	w.wait(t, "off")
	w.wait(t, "unnamed")
	lines := w.events.lines()[len(want):]
	if len(lines) != 3 {
		t.Fatalf("events after the failing job: %q; want start, task failed, job failed (and none for m2)", lines)
	}
	if !strings.HasPrefix(lines[1], "3c:ec:ef:00:00:07 bmc [failed] job off task 0 (powerAction off) failed after ") ||
		!strings.Contains(lines[1], "Unspecified error") ||
		!strings.HasPrefix(lines[2], "3c:ec:ef:00:00:07 bmc [failed] job off failed: task 0 (powerAction off), provider ipmitool: chassis control off:") {
		t.Errorf("failure events:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range w.events.lines() {
		if strings.Contains(l, simPassword) {
			t.Errorf("an event carries the password: %s", l)
		}
	}
}

// TestJobBeforeItsMachine: `anvil apply -f dir/` applies job.yaml before
// machine.yaml and secret.yaml; the Job waits for them (as Rufio requeues)
// and completes once they are applied.
func TestJobBeforeItsMachine(t *testing.T) {
	sim := bmctest.StartSim(t, simUser, simPassword)
	w := newWorldWith(t, time.Minute, steady)
	w.put(t, job("early", "late", power(model.PowerActionOn)))
	testtool.WaitFor(t, "the job to start waiting", func() bool {
		j := w.get(t, model.KindJob, "early").(*model.Job)
		return model.HasCondition(j.Status.Conditions, model.ConditionRunning)
	})
	w.put(t, machine("late", "late-secret", sim.Port, nil))
	w.put(t, secret("late-secret", map[string]string{"username": simUser, "password": simPassword}))
	j := w.wait(t, "early")
	if c := condition(j.Status.Conditions, model.ConditionCompleted); c.Status != model.ConditionTrue {
		t.Fatalf("conditions = %+v; want Completed once the Machine and Secret were applied", j.Status.Conditions)
	}
}

// TestJobBadInput: each bad input ends its Job Failed, with a message
// naming the task, the provider and the cause, and never the password;
// a good Job on another BMC at the same time completes.
func TestJobBadInput(t *testing.T) {
	sim := bmctest.StartSim(t, simUser, simPassword)
	// The good Job's BMC has a host of its own: Anvil serialises the
	// sessions of one host (all the bad BMCs here are 127.0.0.1).
	other := bmctest.StartSimAt(t, "127.0.0.2", simUser, simPassword)
	failing := bmctest.StartSim(t, simUser, simPassword)
	failing.FailControl(t, true)
	openErrors := metric(t, "anvil_bmc_errors_total", "open")
	// With cipher suite 3 set, opening a session takes five datagrams
	// (channel authentication capabilities, open session, RAKP 1, RAKP 3,
	// set session privilege level): the relay lets those through, then
	// the BMC hangs.
	suite3 := &model.ProviderOptions{IPMITOOL: &model.IPMIOptions{CipherSuite: "3"}}
	hang := bmctest.HangAfter(t, fmt.Sprintf("%s:%d", sim.Host, sim.Port), 5)
	// No resends, and time to spare on a loaded machine: HangAfter counts
	// datagrams, so a resent session-opening request would use up the
	// five it lets through and the hang would come before the session
	// is open (failing "open session", not "chassis control on").
	patient := bmc.IPMI{Timeout: 2 * time.Second, Retries: -1}
	w := newWorld(t, patient)
	w.put(t,
		secret("good", map[string]string{"username": simUser, "password": simPassword}),
		secret("wrong", map[string]string{"username": simUser, "password": "not-" + simPassword}),
		secret("nouser", map[string]string{"password": simPassword}),
		machine("wrongpw", "wrong", sim.Port, nil),
		machine("silent", "good", bmctest.Silent(t), nil),
		machine("hangs", "good", hang, suite3),
		machine("nouser", "nouser", sim.Port, nil),
		machine("nosecret", "missing", sim.Port, nil),
		machine("amt", "good", sim.Port, &model.ProviderOptions{PreferredOrder: []string{model.ProviderIntelAMT}}),
		machineAt("other", "good", other.Host, other.Port, nil),
		machine("erroring", "good", failing.Port, nil),
	)
	on := power(model.PowerActionOn)
	cases := []struct {
		job     *model.Job
		want    []string
		taskErr bool // the BMC was tried: the Task carries the failure too
	}{
		{job("wrong-password", "wrongpw", on),
			[]string{"task 0 (powerAction on), provider ipmitool:", "open session with 127.0.0.1:", "refused the username or password"}, true},
		{job("unreachable", "silent", on),
			[]string{"task 0 (powerAction on), provider ipmitool:", "open session", "did not answer"}, true},
		{job("hangs-mid-session", "hangs", on),
			[]string{"task 0 (powerAction on), provider ipmitool:", "chassis control on", "did not answer"}, true},
		{job("error-answer", "erroring", on),
			[]string{"task 0 (powerAction on), provider ipmitool: chassis control on: cc: 0xff", "Unspecified error"}, true},
		{job("no-machine", "ghost", on),
			[]string{"task 0 (powerAction on): spec.machineRef: Machine default/ghost does not exist (waited 200ms for it); no provider was tried"}, false},
		{crossNamespace(job("cross-namespace", "silent", on)),
			[]string{`task 0 (powerAction on): spec.machineRef: namespace "globex": a Job drives the Machines of its own namespace ("default") only`}, false},
		{job("no-username", "nouser", on),
			[]string{"task 0 (powerAction on): provider ipmitool:", "Secret default/nouser (authSecretRef of Machine default/nouser) has no username"}, false},
		{job("no-secret", "nosecret", on),
			[]string{"task 0 (powerAction on): provider ipmitool:", "Secret default/missing", "does not exist"}, false},
		{job("amt-only", "amt", on),
			[]string{"task 0 (powerAction on): providerOptions of Machine default/amt: preferredOrder [intelAMT] names no provider Anvil has (it has [ipmitool])"}, false},
		{job("virtual-media", "other", model.BMCAction{VirtualMediaAction: &model.VirtualMediaAction{MediaURL: "http://x/a.iso", Kind: "CD"}}),
			[]string{"task 0 (virtualMediaAction CD), provider ipmitool: virtual media: not supported by this provider (Redfish has it"}, true},
	}
	for _, tc := range cases {
		w.put(t, tc.job)
	}
	w.put(t, job("good", "other", power(model.PowerActionOn), power(model.PowerActionStatus)))
	if j := w.wait(t, "good"); condition(j.Status.Conditions, model.ConditionCompleted).Status != model.ConditionTrue {
		t.Errorf("the good job beside the bad ones: %+v", j.Status.Conditions)
	}
	for _, tc := range cases {
		t.Run(tc.job.Name, func(t *testing.T) {
			name := tc.job.Name
			j := w.wait(t, name)
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
			if strings.Contains(c.Message, simPassword) {
				t.Errorf("message %q holds the password", c.Message)
			}
			if j.Status.CompletionTime != nil {
				t.Errorf("a failed job has a completion time %v (Rufio sets it on success only)", j.Status.CompletionTime)
			}
			o, err := w.st.Get(context.Background(), model.KindTask, "default", name+"-task-0")
			if !tc.taskErr {
				if !errors.Is(err, store.ErrNotFound) {
					t.Errorf("a Task was written for a job that never reached a BMC: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc := condition(o.(*model.BMCTask).Status.Conditions, model.ConditionFailed)
			if tc.Status != model.ConditionTrue || !strings.Contains(c.Message, tc.Message) {
				t.Errorf("task condition %+v; want Failed with the job's cause", tc)
			}
		})
	}
	// Wrong password and silence: two failed opens, counted.
	if got := metric(t, "anvil_bmc_errors_total", "open") - openErrors; got < 2 {
		t.Errorf("anvil_bmc_errors_total{op=open} rose by %v; want at least 2", got)
	}
	if m := w.get(t, model.KindMachine, "wrongpw").(*model.Machine); m.Status.PowerState != model.PowerUnknown ||
		len(m.Status.Conditions) != 1 || m.Status.Conditions[0].Status != model.ConditionFalse {
		t.Errorf("machine with a wrong password: status %+v; want unknown, not Contactable", m.Status)
	}
}

// countingProvider is a fake BMC protocol that records how many sessions
// each BMC has open at once.
type countingProvider struct {
	mu      sync.Mutex
	open    map[string]int
	maxOpen map[string]int
	powered map[string]bool
}

func (p *countingProvider) Name() string { return model.ProviderIPMI }

func (p *countingProvider) Open(_ context.Context, c bmc.Conn) (bmc.Session, error) {
	key := fmt.Sprint(c.Port)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open[key]++
	p.maxOpen[key] = max(p.maxOpen[key], p.open[key])
	return &countingSession{p: p, key: key}, nil
}

type countingSession struct {
	p   *countingProvider
	key string
}

func (s *countingSession) PowerState(context.Context) (string, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	if s.p.powered[s.key] {
		return model.PowerOn, nil
	}
	return model.PowerOff, nil
}

func (s *countingSession) SetPower(_ context.Context, a string) error {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.powered[s.key] = a == model.PowerActionOn || a == model.PowerActionCycle || a == model.PowerActionReset
	return nil
}

func (s *countingSession) SetBootDevice(context.Context, string, bool, bool) error { return nil }

func (s *countingSession) Close(context.Context) error {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.open[s.key]--
	return nil
}

// TestOneSessionPerBMC: many Jobs for two BMCs at once; each BMC never has
// two sessions open, every session is closed, every Job completes.
func TestOneSessionPerBMC(t *testing.T) {
	p := &countingProvider{open: map[string]int{}, maxOpen: map[string]int{}, powered: map[string]bool{}}
	w := newWorld(t, p)
	w.put(t, secret("s", map[string]string{"username": "u", "password": "p"}),
		machine("a", "s", 1001, nil), machine("b", "s", 1002, nil))
	var names []string
	for i := range 20 {
		m := "a"
		if i%2 == 1 {
			m = "b"
		}
		name := fmt.Sprintf("j%d", i)
		names = append(names, name)
		w.put(t, job(name, m, power(model.PowerActionCycle), bootdev(model.BootDevicePXE, false), power(model.PowerActionStatus)))
	}
	for _, n := range names {
		if j := w.wait(t, n); !model.HasCondition(j.Status.Conditions, model.ConditionCompleted) {
			t.Errorf("job %s: %+v", n, j.Status.Conditions)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for bmcPort, n := range p.maxOpen {
		if n != 1 {
			t.Errorf("BMC %s had %d sessions open at once", bmcPort, n)
		}
		if p.open[bmcPort] != 0 {
			t.Errorf("BMC %s has %d sessions left open", bmcPort, p.open[bmcPort])
		}
	}
}

// TestInterruptedJob: a Job found Running when the executor starts (the
// server stopped mid-job) is failed, not run again.
func TestInterruptedJob(t *testing.T) {
	p := &countingProvider{open: map[string]int{}, maxOpen: map[string]int{}, powered: map[string]bool{}}
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "anvil.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	j := job("cut", "a", power(model.PowerActionCycle))
	j.Status.Conditions = model.SetCondition(nil, model.ConditionRunning, model.ConditionTrue, "")
	if _, err := st.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	ex := bmc.New(bmc.Config{Store: st, Unseal: func(*model.Secret) (map[string][]byte, error) { return nil, nil }, Providers: []bmc.Provider{p},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	w := &world{st: st}
	got := w.wait(t, "cut")
	cancel()
	<-done
	c := condition(got.Status.Conditions, model.ConditionFailed)
	if c.Status != model.ConditionTrue || !strings.Contains(c.Message, "interrupted") {
		t.Errorf("conditions = %+v; want Failed, interrupted", got.Status.Conditions)
	}
	if len(p.maxOpen) != 0 {
		t.Errorf("the interrupted job was run again: %v", p.maxOpen)
	}
}

// crossNamespace points j at a Machine of another namespace, as a Job
// stored before apply refused that would.
func crossNamespace(j *model.Job) *model.Job {
	j.Spec.MachineRef.Namespace = "globex"
	return j
}

// metric returns the value of the BMC counter name for provider ipmitool
// and operation op, from the default registry.
func metric(t *testing.T, name, op string) float64 {
	t.Helper()
	return providerMetric(t, name, model.ProviderIPMI, op)
}

// providerMetric is metric for any provider.
func providerMetric(t *testing.T, name, provider, op string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["provider"] == provider && labels["op"] == op {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
