package bmc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/bmc/bmctest"
	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store/bolt"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/test/redfishsim"
)

// newFakeClock is a clock the test moves: Now stands still until
// Advance, and what After returns fires once the clock has passed its
// time.
func newFakeClock() *clock.Fake {
	return clock.NewFake(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
}

// pollWorld is a store, a sealer, an Executor (running its Jobs when
// jobs) and a Poller of that Executor on a fake clock (not running: the
// test sweeps, or starts Run).
type pollWorld struct {
	*world
	clock  *clock.Fake
	poller *bmc.Poller
}

func newPollWorld(t *testing.T, cfg bmc.PollConfig, jobs bool, providers ...bmc.Provider) *pollWorld {
	t.Helper()
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := bolt.Open(filepath.Join(dir, "anvil.db"), bolt.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := secrets.OpenSealer(filepath.Join(dir, secrets.KeyFileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	ex := bmc.New(bmc.Config{Store: st, Unseal: sealer.Open, Providers: providers, Logger: logger,
		TaskTimeout: 10 * time.Second, PollInterval: 5 * time.Millisecond, RefGrace: 200 * time.Millisecond})
	clk := newFakeClock()
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	w := &pollWorld{world: &world{st: st, sealer: sealer}, clock: clk, poller: ex.Poller(cfg)}
	if jobs {
		w.run(t, ex.Run)
	}
	return w
}

// run runs fn until the test ends.
func (w *pollWorld) run(t *testing.T, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
}

func (w *pollWorld) sweep(t *testing.T) {
	t.Helper()
	if _, err := w.poller.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (w *pollWorld) machine(t *testing.T, name string) *model.Machine {
	t.Helper()
	return w.get(t, model.KindMachine, name).(*model.Machine)
}

func contactable(m *model.Machine) model.MachineCondition {
	for _, c := range m.Status.Conditions {
		if c.Type == model.ConditionContactable {
			return c
		}
	}
	return model.MachineCondition{}
}

// machineAt is machine() at a host of its own.
func machineAt(name, secretName, host string, port int, opts *model.ProviderOptions) *model.Machine {
	m := machine(name, secretName, port, opts)
	m.Spec.Connection.Host = host
	return m
}

// TestPollIPMISim: against OpenIPMI's ipmi_sim, a Machine applied while
// the poller runs is polled at once (not at the end of the interval); a
// power change made behind Anvil's back (a session of its own) shows in
// the Machine's status at the next interval; every session is closed.
func TestPollIPMISim(t *testing.T) {
	sim := bmctest.StartSim(t, simUser, simPassword)
	w := newPollWorld(t, bmc.PollConfig{Interval: time.Hour, Jitter: -1}, false, steady)
	w.run(t, w.poller.Run)
	w.put(t, secret("bm-auth", map[string]string{"username": simUser, "password": simPassword}),
		machine("m1", "bm-auth", sim.Port, nil))
	testtool.WaitFor(t, "the new machine to be polled", func() bool {
		m := w.machine(t, "m1")
		return m.Status.PowerState == model.PowerOff && contactable(m).Status == model.ConditionTrue
	})

	// Behind Anvil's back.
	s, err := steady.Open(context.Background(), bmc.Conn{Host: sim.Host, Port: sim.Port, Username: simUser, Password: simPassword, CipherSuite: "3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPower(context.Background(), model.PowerActionOn); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Hour)
	testtool.WaitFor(t, "the power state to follow", func() bool {
		return w.machine(t, "m1").Status.PowerState == model.PowerOn
	})
	if c := contactable(w.machine(t, "m1")); c.Status != model.ConditionTrue || c.Message != "" {
		t.Errorf("Contactable = %+v", c)
	}
}

// TestPollRedfish: the same against the Redfish service of the tests,
// with a machine in memory; each poll's session is deleted.
func TestPollRedfish(t *testing.T) {
	sim, fm := oneSystem(t, redfishsim.Config{})
	w := newPollWorld(t, bmc.PollConfig{Interval: time.Hour, Jitter: -1}, false,
		bmc.IPMI{}, bmc.Redfish{RootCAs: caPool(t, sim), Timeout: 5 * time.Second})
	w.put(t, secret("rf-auth", map[string]string{"username": rfUser, "password": rfPassword}),
		machine("rf", "rf-auth", sim.Port, &model.ProviderOptions{PreferredOrder: []string{model.ProviderRedfish}}))
	w.sweep(t)
	if m := w.machine(t, "rf"); m.Status.PowerState != model.PowerOff || contactable(m).Status != model.ConditionTrue {
		t.Fatalf("status after the first sweep = %+v", m.Status)
	}
	if err := fm.PowerOn(""); err != nil { // behind Anvil's back
		t.Fatal(err)
	}
	w.sweep(t) // not due yet: nothing read
	if st := w.machine(t, "rf").Status.PowerState; st != model.PowerOff {
		t.Errorf("polled before its interval: %s", st)
	}
	w.clock.Advance(time.Hour)
	w.sweep(t)
	if st := w.machine(t, "rf").Status.PowerState; st != model.PowerOn {
		t.Errorf("power state after the interval = %s, want on", st)
	}
	created, deleted := sim.Sessions()
	if created != 2 || deleted != 2 {
		t.Errorf("sessions created %d, deleted %d; want 2 and 2 (one per poll, each closed)", created, deleted)
	}
}

// fakeBMCs are BMCs in memory, one per host, that count the sessions each
// has open at once and the sessions each was asked for. Providers of any
// name share them, as IPMI and Redfish reach one BMC.
type fakeBMCs struct {
	mu       sync.Mutex
	open     map[string]int
	maxOpen  map[string]int
	attempts map[string]int
	power    map[string]string
	fail     map[string]error
	hold     time.Duration // how long a power-state read takes
}

func newFakeBMCs() *fakeBMCs {
	return &fakeBMCs{open: map[string]int{}, maxOpen: map[string]int{}, attempts: map[string]int{},
		power: map[string]string{}, fail: map[string]error{}}
}

func (b *fakeBMCs) provider(name string) bmc.Provider { return fakeProvider{name: name, b: b} }

func (b *fakeBMCs) count(host string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.attempts[host]
}

func (b *fakeBMCs) set(host, power string, fail error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.power[host], b.fail[host] = power, fail
}

type fakeProvider struct {
	name string
	b    *fakeBMCs
}

func (p fakeProvider) Name() string { return p.name }

func (p fakeProvider) Open(_ context.Context, c bmc.Conn) (bmc.Session, error) {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attempts[c.Host]++
	if err := b.fail[c.Host]; err != nil {
		return nil, err
	}
	b.open[c.Host]++
	b.maxOpen[c.Host] = max(b.maxOpen[c.Host], b.open[c.Host])
	return &fakeSession{b: b, host: c.Host}, nil
}

type fakeSession struct {
	b    *fakeBMCs
	host string
}

func (s *fakeSession) PowerState(ctx context.Context) (string, error) {
	if s.b.hold > 0 {
		select {
		case <-time.After(s.b.hold):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if st := s.b.power[s.host]; st != "" {
		return st, nil
	}
	return model.PowerOff, nil
}

func (s *fakeSession) SetPower(_ context.Context, a string) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.power[s.host] = model.PowerOff
	if a == model.PowerActionOn || a == model.PowerActionCycle || a == model.PowerActionReset {
		s.b.power[s.host] = model.PowerOn
	}
	return nil
}

func (s *fakeSession) SetBootDevice(context.Context, string, bool, bool) error { return nil }

func (s *fakeSession) Close(context.Context) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.open[s.host]--
	return nil
}

// TestPollBackoff: a BMC that does not answer is tried again after 1, 2,
// 4 and then every 8 intervals (Backoff = Interval, MaxBackoff = 8 ×), not
// every interval, while a healthy BMC beside it is polled every interval;
// the cause is in Contactable, and a repeated failure writes nothing.
// Once the BMC answers again it is polled every interval.
func TestPollBackoff(t *testing.T) {
	b := newFakeBMCs()
	const interval = time.Minute
	w := newPollWorld(t, bmc.PollConfig{Interval: interval, Backoff: interval, Jitter: -1}, false, b.provider(model.ProviderIPMI))
	w.put(t, secret("s", map[string]string{"username": "u", "password": "pw-never-shown"}),
		machineAt("dead", "s", "10.0.0.1", 623, nil), machineAt("alive", "s", "10.0.0.2", 623, nil))
	b.set("10.0.0.1", "", errors.New("open session: no answer with pw-never-shown"))

	var deadRVs []string
	for range 30 {
		w.sweep(t)
		deadRVs = append(deadRVs, w.machine(t, "dead").ResourceVersion)
		w.clock.Advance(interval)
	}
	// Tried at minutes 0, 1, 3, 7, 15 and 23.
	if got := b.count("10.0.0.1"); got != 6 {
		t.Errorf("dead BMC tried %d times in 30 intervals; want 6 (back-off 1, 2, 4, 8, 8 intervals)", got)
	}
	if got := b.count("10.0.0.2"); got != 30 {
		t.Errorf("healthy BMC polled %d times in 30 intervals; want 30", got)
	}
	m := w.machine(t, "dead")
	c := contactable(m)
	if m.Status.PowerState != model.PowerUnknown || c.Status != model.ConditionFalse ||
		c.Message != "provider ipmitool: open session: no answer with [redacted]" {
		t.Errorf("dead machine's status = %s, %+v", m.Status.PowerState, c)
	}
	if deadRVs[0] != deadRVs[len(deadRVs)-1] {
		t.Errorf("the dead machine was rewritten by polls that found the same failure: resourceVersion %s -> %s", deadRVs[0], deadRVs[len(deadRVs)-1])
	}

	// It answers again: found at its next try (minute 31), then polled
	// every interval.
	b.set("10.0.0.1", model.PowerOn, nil)
	for range 4 {
		w.sweep(t)
		w.clock.Advance(interval)
	}
	if got := b.count("10.0.0.1"); got != 6+3 {
		t.Errorf("after it answered again: tried %d times in all; want 9 (minutes 31, 32, 33)", got)
	}
	if m := w.machine(t, "dead"); m.Status.PowerState != model.PowerOn || contactable(m).Status != model.ConditionTrue {
		t.Errorf("status once back = %+v", m.Status)
	}
}

// TestPollSecretFixed: a Machine backed off after its BMC refused the
// password is polled at once when its Secret changes, not at the end of
// the back-off.
func TestPollSecretFixed(t *testing.T) {
	b := newFakeBMCs()
	w := newPollWorld(t, bmc.PollConfig{Interval: time.Hour, Jitter: -1}, false, b.provider(model.ProviderIPMI))
	w.put(t, secret("s", map[string]string{"username": "u", "password": "old"}), machineAt("m", "s", "10.0.0.3", 623, nil))
	b.set("10.0.0.3", "", errors.New("the BMC refused the username or password"))
	w.run(t, w.poller.Run)
	testtool.WaitFor(t, "the refusal to be recorded", func() bool {
		return contactable(w.machine(t, "m")).Status == model.ConditionFalse
	})
	b.set("10.0.0.3", model.PowerOn, nil)
	w.put(t, secret("s", map[string]string{"username": "u", "password": "new"}))
	testtool.WaitFor(t, "the machine to be polled with the new Secret", func() bool {
		m := w.machine(t, "m")
		return m.Status.PowerState == model.PowerOn && contactable(m).Status == model.ConditionTrue
	})
}

// TestPollNoWriteWhenUnchanged: a poll that finds the power state the
// Machine already records writes nothing (its resourceVersion stays);
// one that finds a change writes it.
func TestPollNoWriteWhenUnchanged(t *testing.T) {
	b := newFakeBMCs()
	w := newPollWorld(t, bmc.PollConfig{Interval: time.Minute}, false, b.provider(model.ProviderIPMI))
	w.put(t, secret("s", map[string]string{"username": "u", "password": "p"}), machineAt("m", "s", "10.0.0.4", 623, nil))
	b.set("10.0.0.4", model.PowerOn, nil)
	w.sweep(t)
	first := w.machine(t, "m")
	if first.Status.PowerState != model.PowerOn {
		t.Fatalf("status = %+v", first.Status)
	}
	for range 5 {
		w.clock.Advance(2 * time.Minute) // past the interval and its jitter
		w.sweep(t)
	}
	if got := b.count("10.0.0.4"); got != 6 {
		t.Fatalf("polled %d times; want 6", got)
	}
	if rv := w.machine(t, "m").ResourceVersion; rv != first.ResourceVersion {
		t.Errorf("resourceVersion %s -> %s after polls that found nothing new", first.ResourceVersion, rv)
	}
	b.set("10.0.0.4", model.PowerOff, nil)
	w.clock.Advance(2 * time.Minute)
	w.sweep(t)
	if m := w.machine(t, "m"); m.Status.PowerState != model.PowerOff || m.ResourceVersion == first.ResourceVersion {
		t.Errorf("after a change: %s at resourceVersion %s", m.Status.PowerState, m.ResourceVersion)
	}
}

// TestPollAndJobsOneSessionPerBMC: polls (every few milliseconds, 8 at a
// time) and Jobs run together on four BMCs, each reached by two Machines
// — one through IPMI on 623, one through Redfish on 443 — so that polls
// of both Machines and Jobs of both contend for each BMC. No BMC ever has
// two sessions open, every session is closed, every Job completes, and
// polls did run.
func TestPollAndJobsOneSessionPerBMC(t *testing.T) {
	b := newFakeBMCs()
	b.hold = time.Millisecond
	w := newPollWorld(t, bmc.PollConfig{Interval: 3 * time.Millisecond, Concurrency: 8, Clock: clock.Real}, true,
		b.provider(model.ProviderIPMI), b.provider(model.ProviderRedfish))
	w.put(t, secret("s", map[string]string{"username": "u", "password": "p"}))
	rf := &model.ProviderOptions{PreferredOrder: []string{model.ProviderRedfish}}
	var machines []string
	for i := range 4 {
		host := fmt.Sprintf("10.0.1.%d", i+1)
		w.put(t, machineAt(fmt.Sprintf("ipmi-%d", i), "s", host, 623, nil), machineAt(fmt.Sprintf("rf-%d", i), "s", host, 443, rf))
		machines = append(machines, fmt.Sprintf("ipmi-%d", i), fmt.Sprintf("rf-%d", i))
	}
	w.run(t, w.poller.Run)
	var jobs []string
	for i := range 40 {
		name := fmt.Sprintf("j%d", i)
		jobs = append(jobs, name)
		w.put(t, job(name, machines[i%len(machines)], power(model.PowerActionCycle), power(model.PowerActionStatus)))
	}
	for _, n := range jobs {
		if j := w.wait(t, n); !model.HasCondition(j.Status.Conditions, model.ConditionCompleted) {
			t.Errorf("job %s: %+v", n, j.Status.Conditions)
		}
	}
	// Polls beside the Jobs: every BMC was asked for more sessions than
	// its Jobs opened.
	testtool.WaitFor(t, "polls on every BMC", func() bool {
		for i := range 4 {
			if b.count(fmt.Sprintf("10.0.1.%d", i+1)) <= 10+4 {
				return false
			}
		}
		return true
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	for host, n := range b.maxOpen {
		if n != 1 {
			t.Errorf("BMC %s had %d sessions open at once", host, n)
		}
	}
	for _, name := range machines {
		if m := w.machine(t, name); !strings.HasPrefix(m.Status.PowerState, "o") {
			t.Errorf("machine %s: power state %q", name, m.Status.PowerState)
		}
	}
	t.Logf("sessions per BMC: %v", b.attempts)
}
