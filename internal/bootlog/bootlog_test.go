package bootlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

var (
	t0     = time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	quiet  = slog.New(slog.NewTextHandler(io.Discard, nil))
	mac07  = mustMAC("3c:ec:ef:12:34:07")
	mac08  = mustMAC("3c:ec:ef:12:34:08")
	macNew = mustMAC("02:00:00:00:00:99")
)

func mustMAC(s string) macaddr.MAC { return macaddr.MustParse(s) }

type env struct {
	st    *bolt.Store
	logs  *logstore.Store
	clock *clock.Fake
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "anvil.db"), bolt.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("bolt.Open: %v", err)
	}
	logs, err := logstore.Open(logstore.Config{Dir: filepath.Join(dir, "logs"), Logger: quiet})
	if err != nil {
		t.Fatalf("logstore.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := logs.Close(); err != nil {
			t.Errorf("logstore.Close: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("store.Close: %v", err)
		}
	})
	return &env{st: st, logs: logs, clock: clock.NewFake(t0)}
}

// hardware stores a Hardware with one interface.
func (e *env) hardware(t testing.TB, name, mac, ip string) {
	t.Helper()
	d := &model.DHCP{MAC: mac}
	if ip != "" {
		d.IP = &model.IP{Address: ip, Netmask: "255.255.255.0"}
	}
	h := &model.Hardware{
		TypeMeta:   model.TypeMeta{APIVersion: "tinkerbell.org/v1alpha1", Kind: model.KindHardware},
		ObjectMeta: model.ObjectMeta{Namespace: "default", Name: name},
		Spec:       model.HardwareSpec{Interfaces: []model.Interface{{DHCP: d}}},
	}
	if _, err := e.st.Create(context.Background(), h); err != nil {
		t.Fatalf("create hardware %s: %v", name, err)
	}
}

// start runs a Recorder until the test ends.
func (e *env) start(t testing.TB, cfg Config) *Recorder {
	t.Helper()
	cfg.Store, cfg.Logs, cfg.Logger = e.st, e.logs, quiet
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	r := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

func flush(t testing.TB, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func counter(t testing.TB, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// lines renders a record as "stream: line" strings.
func lines(t testing.TB, read func() ([]logstore.Line, error)) []string {
	t.Helper()
	ls, err := read()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		out = append(out, l.Stream+": "+l.Line)
	}
	return out
}

// TestAttribution files one boot's worth of events from two known machines
// (node07 with a reserved IP, node08 in proxy mode with none) and unknown
// ones, and reads every record back.
func TestAttribution(t *testing.T) {
	e := newEnv(t)
	e.hardware(t, "node07", mac07.String(), "10.0.0.7")
	e.hardware(t, "node08", mac08.String(), "")
	r := e.start(t, Config{})
	noAddress := counter(t, droppedTotal.WithLabelValues(dropNoAddress))
	skipped := counter(t, eventsTotal.WithLabelValues("dhcp", recordSkipped))

	ip := netip.MustParseAddr
	events := []machinelog.Event{
		// node07: by MAC, then by its reserved IP.
		{Service: "dhcp", MAC: mac07, IP: ip("10.0.0.7"), Outcome: "offered", Message: "DISCOVER from 3c:ec:ef:12:34:07: OFFER 10.0.0.7"},
		{Service: "tftp", IP: ip("10.0.0.7"), Outcome: "served", Message: "RRQ ipxe.efi from 10.0.0.7:1024: sent"},
		{Service: "dhcp", MAC: mac07, Outcome: "not-pxe-client", Message: "DISCOVER from 3c:ec:ef:12:34:07: no answer"},
		// An unknown MAC with node07's reserved IP: filed by the IP.
		{Service: "http", MAC: mustMAC("02:00:00:00:00:77"), IP: ip("10.0.0.7"), Outcome: "not-found", Message: "GET /ipxe/script/02:00:00:00:00:77/auto.ipxe: no Hardware"},
		// node08 has no IP: the script request teaches it, syslog uses it.
		{Service: "http", MAC: mac08, IP: ip("10.0.0.8"), Outcome: "served", Message: "GET /ipxe/script/3c:ec:ef:12:34:08/auto.ipxe: workflow pending"},
		{Service: "syslog", IP: ip("10.0.0.8"), Outcome: "received", Message: "info node08 anvil: agent started"},
		// An unknown machine, by MAC, then by the IP seen with it.
		{Service: "dhcp", MAC: macNew, Outcome: "unknown-mac", Message: "DISCOVER from 02:00:00:00:00:99: no answer: no Hardware has this MAC"},
		{Service: "http", MAC: macNew, IP: ip("10.0.0.50"), Outcome: "not-found", Message: "GET /ipxe/script/02:00:00:00:00:99/auto.ipxe: no Hardware"},
		{Service: "tftp", IP: ip("10.0.0.50"), Outcome: "served", Message: "RRQ ipxe.efi from 10.0.0.50:1024: sent"},
		// Unknown, by IP only.
		{Service: "syslog", IP: ip("10.0.0.99"), Outcome: "unparsed", Message: "[   12.3] e1000e: link up"},
		// A DECLINE's address is not the client's: not learned.
		{Service: "dhcp", MAC: mac07, IP: ip("10.0.0.60"), Outcome: "declined", Message: "DECLINE from 3c:ec:ef:12:34:07: logged, address 10.0.0.60"},
		{Service: "syslog", IP: ip("10.0.0.60"), Outcome: "received", Message: "notice other: hello"},
		// Not boot attempts from an unknown machine: counted, not kept.
		{Service: "dhcp", MAC: mustMAC("02:00:00:00:00:aa"), Outcome: "not-pxe-client", Message: "DISCOVER from 02:00:00:00:00:aa: no answer"},
		// Nothing to file it under.
		{Service: "syslog", Outcome: "received", Message: "from nowhere"},
		// Control characters from the network are escaped.
		{Service: "dhcp", MAC: macNew, Outcome: "unknown-mac", Message: "DISCOVER from 02:00:00:00:00:99 (\x1b[2Jevil\n): no answer"},
	}
	for _, ev := range events {
		r.Record(ev)
	}
	flush(t, r)

	tests := []struct {
		name string
		read func() ([]logstore.Line, error)
		want []string
	}{
		{name: "node07", read: func() ([]logstore.Line, error) { return e.logs.ReadHardware("default/node07", 0) }, want: []string{
			"dhcp: DISCOVER from 3c:ec:ef:12:34:07: OFFER 10.0.0.7",
			"tftp: RRQ ipxe.efi from 10.0.0.7:1024: sent",
			"dhcp: [not-pxe-client] DISCOVER from 3c:ec:ef:12:34:07: no answer",
			"http: [not-found] GET /ipxe/script/02:00:00:00:00:77/auto.ipxe: no Hardware",
			"dhcp: [declined] DECLINE from 3c:ec:ef:12:34:07: logged, address 10.0.0.60",
		}},
		{name: "node08", read: func() ([]logstore.Line, error) { return e.logs.ReadHardware("default/node08", 0) }, want: []string{
			"http: GET /ipxe/script/3c:ec:ef:12:34:08/auto.ipxe: workflow pending",
			"syslog: info node08 anvil: agent started",
		}},
		{name: "unknown MAC", read: func() ([]logstore.Line, error) { return e.logs.ReadMachine("02:00:00:00:00:99", 0) }, want: []string{
			"dhcp: [unknown-mac] DISCOVER from 02:00:00:00:00:99: no answer: no Hardware has this MAC",
			"http: [not-found] GET /ipxe/script/02:00:00:00:00:99/auto.ipxe: no Hardware",
			"tftp: RRQ ipxe.efi from 10.0.0.50:1024: sent",
			`dhcp: [unknown-mac] DISCOVER from 02:00:00:00:00:99 (\x1b[2Jevil\n): no answer`,
		}},
		{name: "unknown IP", read: func() ([]logstore.Line, error) { return e.logs.ReadMachine("10.0.0.99", 0) }, want: []string{
			"syslog: [unparsed] [   12.3] e1000e: link up",
		}},
		{name: "declined address", read: func() ([]logstore.Line, error) { return e.logs.ReadMachine("10.0.0.60", 0) }, want: []string{
			"syslog: notice other: hello",
		}},
		{name: "not a boot attempt", read: func() ([]logstore.Line, error) { return e.logs.ReadMachine("02:00:00:00:00:aa", 0) }, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := lines(t, tc.read); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Errorf("record =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	ls, err := e.logs.ReadHardware("default/node07", 1)
	if err != nil || len(ls) != 1 || !ls[0].Time.Equal(t0) {
		t.Errorf("an event without a time: %+v, %v; want it stamped with Now (%v)", ls, err, t0)
	}
	if n := counter(t, droppedTotal.WithLabelValues(dropNoAddress)) - noAddress; n != 1 {
		t.Errorf("dropped{no-address} grew by %v; want 1", n)
	}
	if n := counter(t, eventsTotal.WithLabelValues("dhcp", recordSkipped)) - skipped; n != 1 {
		t.Errorf("events{dhcp,skipped} grew by %v; want 1", n)
	}
}

// TestCacheTTL: a Hardware created for a machine heard from as unknown
// gets its events once the negative lookup expires, not before.
func TestCacheTTL(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, Config{CacheTTL: 5 * time.Second})
	ev := machinelog.Event{Service: "dhcp", MAC: macNew, Outcome: "unknown-mac", Message: "DISCOVER"}
	r.Record(ev)
	flush(t, r)
	e.hardware(t, "new", macNew.String(), "")
	e.clock.Advance(4 * time.Second)
	ev.Message = "DISCOVER again" // an identical line would be folded
	r.Record(ev)                  // within the TTL: still unknown
	flush(t, r)
	e.clock.Advance(2 * time.Second)
	ev.Outcome = "offered"
	r.Record(ev) // past it: the Hardware's
	flush(t, r)

	if got := lines(t, func() ([]logstore.Line, error) { return e.logs.ReadMachine(macNew.String(), 0) }); len(got) != 2 {
		t.Errorf("unknown record = %q; want the 2 events before the TTL ran out", got)
	}
	if got := lines(t, func() ([]logstore.Line, error) { return e.logs.ReadHardware("default/new", 0) }); len(got) != 1 {
		t.Errorf("hardware record = %q; want the 1 event after the TTL", got)
	}
}

// TestLearnedAddressExpires: an IP seen with a MAC attributes IP-only
// events for AddressTTL from the last sighting.
func TestLearnedAddressExpires(t *testing.T) {
	e := newEnv(t)
	e.hardware(t, "node08", mac08.String(), "")
	r := e.start(t, Config{AddressTTL: time.Minute})
	ip := netip.MustParseAddr("10.0.0.8")
	r.Record(machinelog.Event{Service: "http", MAC: mac08, IP: ip, Outcome: "served", Message: "script"})
	e.clock.Advance(50 * time.Second)
	r.Record(machinelog.Event{Service: "syslog", IP: ip, Outcome: "received", Message: "in time"})
	flush(t, r)
	e.clock.Advance(20 * time.Second)
	r.Record(machinelog.Event{Service: "syslog", IP: ip, Outcome: "received", Message: "too late"})
	flush(t, r)
	if got := lines(t, func() ([]logstore.Line, error) { return e.logs.ReadHardware("default/node08", 0) }); len(got) != 2 {
		t.Errorf("hardware record = %q; want the script and the line in time", got)
	}
	if got := lines(t, func() ([]logstore.Line, error) { return e.logs.ReadMachine("10.0.0.8", 0) }); len(got) != 1 {
		t.Errorf("IP record = %q; want the line after the address expired", got)
	}
}

// TestRecordDropsWhenFull: with nobody writing, Record still returns at
// once, keeping QueueSize events and counting the rest.
func TestRecordDropsWhenFull(t *testing.T) {
	e := newEnv(t)
	r := New(Config{Store: e.st, Logs: e.logs, Logger: quiet, QueueSize: 4})
	before := counter(t, droppedTotal.WithLabelValues(dropQueueFull))
	start := time.Now()
	for i := 0; i < 10; i++ {
		r.Record(machinelog.Event{Service: "dhcp", MAC: macNew, Message: fmt.Sprint(i)})
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("10 Records with a full queue took %v; want no blocking", d)
	}
	if n := counter(t, droppedTotal.WithLabelValues(dropQueueFull)) - before; n != 6 {
		t.Errorf("dropped{queue-full} grew by %v; want 6", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil { // stops at once, writing the queue
		t.Fatal(err)
	}
	if got := lines(t, func() ([]logstore.Line, error) { return e.logs.ReadMachine(macNew.String(), 0) }); len(got) != 4 {
		t.Errorf("record = %q; want the 4 queued events", got)
	}
}

// TestStop: Run writes what is queued when ctx ends; later events are
// dropped and counted; Run runs once.
func TestStop(t *testing.T) {
	e := newEnv(t)
	r := New(Config{Store: e.st, Logs: e.logs, Logger: quiet})
	for i := 0; i < 100; i++ {
		r.Record(machinelog.Event{Service: "dhcp", MAC: macNew, Message: fmt.Sprint(i)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := lines(t, func() ([]logstore.Line, error) { return e.logs.ReadMachine(macNew.String(), 0) }); len(got) != 100 {
		t.Errorf("after stop, record has %d lines; want all 100", len(got))
	}
	before := counter(t, droppedTotal.WithLabelValues(dropStopped))
	r.Record(machinelog.Event{Service: "dhcp", MAC: macNew})
	if n := counter(t, droppedTotal.WithLabelValues(dropStopped)) - before; n != 1 {
		t.Errorf("dropped{stopped} grew by %v; want 1", n)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Errorf("Flush after stop = %v; want nil", err)
	}
	if err := r.Run(context.Background()); err == nil {
		t.Error("second Run succeeded; want error")
	}
}

type failingLogs struct{}

func (failingLogs) Append(...logstore.Line) error { return errors.New("disk full") }

func TestWriteErrorCounted(t *testing.T) {
	e := newEnv(t)
	r := New(Config{Store: e.st, Logs: failingLogs{}, Logger: quiet, Clock: e.clock})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	before := counter(t, droppedTotal.WithLabelValues(dropWriteError))
	for i := 0; i < 3; i++ {
		r.Record(machinelog.Event{Service: "tftp", IP: netip.MustParseAddr("10.0.0.1"), Message: fmt.Sprint("transfer ", i)})
	}
	flush(t, r)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := counter(t, droppedTotal.WithLabelValues(dropWriteError)) - before; n != 3 {
		t.Errorf("dropped{write-error} grew by %v; want 3", n)
	}
}

// TestConcurrentRecord: many services recording at once while the writer
// runs (run with -race).
func TestConcurrentRecord(t *testing.T) {
	e := newEnv(t)
	e.hardware(t, "node07", mac07.String(), "10.0.0.7")
	r := e.start(t, Config{QueueSize: 100000})
	const writers, per = 8, 500
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mac := macaddr.From([6]byte{2, 0, 0, 0, 0, byte(w)})
			for i := 0; i < per; i++ {
				// Distinct texts: identical ones would be folded.
				r.Record(machinelog.Event{Service: "dhcp", MAC: mac07, Message: fmt.Sprintf("known %d/%d", w, i)})
				r.Record(machinelog.Event{Service: "dhcp", MAC: mac, Message: fmt.Sprintf("unknown %d", i)})
			}
		}()
	}
	wg.Wait()
	flush(t, r)
	if got, _ := e.logs.ReadHardware("default/node07", 0); len(got) != writers*per {
		t.Errorf("node07 record has %d lines; want %d", len(got), writers*per)
	}
	for w := 0; w < writers; w++ {
		mac := macaddr.From([6]byte{2, 0, 0, 0, 0, byte(w)})
		if got, _ := e.logs.ReadMachine(mac.String(), 0); len(got) != per {
			t.Errorf("%s record has %d lines; want %d", mac, len(got), per)
		}
	}
}

// BenchmarkRecord measures a DHCP flood from a fleet of 10,000 known
// machines: the caller's cost per Record (ns/op) and what the writer keeps
// up with (written/s: events on disk per second of the run, including the
// final flush).
func BenchmarkRecord(b *testing.B) {
	e := newEnv(b)
	const fleet = 10000
	macs := make([]macaddr.MAC, fleet)
	for i := range macs {
		macs[i] = macaddr.From([6]byte{0x3c, 0xec, 0xef, 0, byte(i >> 8), byte(i)})
		e.hardware(b, fmt.Sprintf("node%05d", i), macs[i].String(), "")
	}
	r := e.start(b, Config{Clock: clock.Real})
	before := counter(b, droppedTotal.WithLabelValues(dropQueueFull))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		r.Record(machinelog.Event{Service: "dhcp", MAC: macs[i%fleet], Outcome: "offered",
			Message: "DISCOVER from 3c:ec:ef:00:00:00 (UEFI x86-64, PXEClient): OFFER 10.0.0.7 ipxe.efi"})
	}
	b.StopTimer()
	flush(b, r)
	dropped := counter(b, droppedTotal.WithLabelValues(dropQueueFull)) - before
	b.ReportMetric((float64(b.N)-dropped)/time.Since(start).Seconds(), "written/s")
	b.ReportMetric(dropped, "dropped")
}

// TestRepeatsAreFolded: a machine retrying DHCP writes its line once per
// repeatWindow; the next line written says how many were left out.
func TestRepeatsAreFolded(t *testing.T) {
	e := newEnv(t)
	e.hardware(t, "node07", mac07.String(), "10.0.0.7")
	r := e.start(t, Config{})
	retry := func(at time.Time) machinelog.Event {
		return machinelog.Event{Time: at, Service: machinelog.ServiceDHCP, MAC: mac07, Outcome: "offered",
			Message: "DISCOVER from node07: OFFER 10.0.0.7"}
	}
	for i := range 5 {
		r.Record(retry(t0.Add(time.Duration(i) * time.Second)))
	}
	r.Record(machinelog.Event{Time: t0.Add(6 * time.Second), Service: machinelog.ServiceTFTP, MAC: mac07,
		Outcome: "served", Message: "RRQ ipxe.efi: sent"})
	r.Record(retry(t0.Add(repeatWindow + time.Second)))
	flush(t, r)
	got := lines(t, func() ([]logstore.Line, error) { return e.logs.ReadHardware("default/node07", 0) })
	want := []string{
		"dhcp: DISCOVER from node07: OFFER 10.0.0.7",
		"tftp: RRQ ipxe.efi: sent",
		"dhcp: DISCOVER from node07: OFFER 10.0.0.7 (and 4 identical lines since " + t0.Format("15:04:05") + ")",
	}
	if !slices.Equal(got, want) {
		t.Errorf("record =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAttributionAnyMACSpelling: a Hardware whose MAC is written dotted or
// hyphenated in upper case gets the events of its per-MAC TFTP paths and
// script requests (which carry the MAC in canonical form).
func TestAttributionAnyMACSpelling(t *testing.T) {
	e := newEnv(t)
	e.hardware(t, "dotted", "3CEC.EF12.3407", "")
	e.hardware(t, "hyphens", "3C-EC-EF-12-34-08", "")
	r := e.start(t, Config{})
	r.Record(machinelog.Event{Service: "tftp", MAC: mac07, IP: netip.MustParseAddr("10.0.0.7"), Outcome: "served",
		Message: "RRQ 3c:ec:ef:12:34:07/ipxe.efi from 10.0.0.7:1024: sent"})
	r.Record(machinelog.Event{Service: "http", MAC: mac08, IP: netip.MustParseAddr("10.0.0.8"), Outcome: "served",
		Message: "GET /ipxe/script/3c:ec:ef:12:34:08/auto.ipxe: workflow pending"})
	flush(t, r)
	for _, tc := range []struct{ hardware, want string }{
		{"default/dotted", "tftp: RRQ 3c:ec:ef:12:34:07/ipxe.efi from 10.0.0.7:1024: sent"},
		{"default/hyphens", "http: GET /ipxe/script/3c:ec:ef:12:34:08/auto.ipxe: workflow pending"},
	} {
		got := lines(t, func() ([]logstore.Line, error) { return e.logs.ReadHardware(tc.hardware, 0) })
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("record of %s = %q; want [%q]", tc.hardware, got, tc.want)
		}
	}
}
