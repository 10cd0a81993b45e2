package tftp

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/machinelog"
)

var lt0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// TestRefusalLimiter drives one limiter (burst 3, a token a second) through
// a timeline of refusals from two sources.
func TestRefusalLimiter(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	steps := []struct {
		name    string
		at      time.Duration
		src     netip.Addr
		wantOK  bool
		wantSum int // summary count expected with this refusal; 0: none
	}{
		{name: "a burst 1", at: 0, src: a, wantOK: true},
		{name: "a burst 2", at: 0, src: a, wantOK: true},
		{name: "a burst 3", at: 0, src: a, wantOK: true},
		{name: "a over", at: 0, src: a, wantOK: false},
		{name: "a over again", at: 500 * time.Millisecond, src: a, wantOK: false},
		{name: "b has its own bucket", at: 500 * time.Millisecond, src: b, wantOK: true},
		{name: "a earned a token: summary of 2", at: time.Second, src: a, wantOK: true, wantSum: 2},
		{name: "a spent it", at: time.Second, src: a, wantOK: false},
		{name: "a later: summary of 1", at: 10 * time.Second, src: a, wantOK: true, wantSum: 1},
		{name: "a refilled to the burst, no more", at: time.Hour, src: a, wantOK: true},
		{name: "a 2", at: time.Hour, src: a, wantOK: true},
		{name: "a 3", at: time.Hour, src: a, wantOK: true},
		{name: "a 4 over", at: time.Hour, src: a, wantOK: false},
	}
	l := newRefusalLimiter(3, time.Second)
	for _, st := range steps {
		ok, sum := l.allow(st.src, lt0.Add(st.at))
		gotSum := 0
		if sum != nil {
			gotSum = sum.count
			if sum.source != st.src {
				t.Errorf("%s: summary for %v; want %v", st.name, sum.source, st.src)
			}
		}
		if ok != st.wantOK || gotSum != st.wantSum {
			t.Errorf("%s: allow(%v, +%v) = %v, summary of %d; want %v, %d", st.name, st.src, st.at, ok, gotSum, st.wantOK, st.wantSum)
		}
	}
	if sums := l.flush(); len(sums) != 1 || sums[0].source != a || sums[0].count != 1 || !sums[0].since.Equal(lt0.Add(time.Hour)) {
		t.Errorf("flush = %+v; want one summary of 1 for %v since +1h", sums, a)
	}
	if sums := l.flush(); len(sums) != 0 {
		t.Errorf("second flush = %+v; want nothing", sums)
	}
}

// TestRefusalLimiterSweep: a flood that stops is summarized by the next
// sweep, without another request from its source, and quiet sources are
// forgotten.
func TestRefusalLimiterSweep(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	l := newRefusalLimiter(1, time.Second)
	l.allow(a, lt0)
	for range 5 {
		l.allow(a, lt0)
	}
	if sums := l.due(lt0.Add(sweepEvery)); len(sums) != 1 || sums[0].count != 5 {
		t.Fatalf("due after the flood = %+v; want one summary of 5", sums)
	}
	if sums := l.due(lt0.Add(sweepEvery + time.Second)); sums != nil {
		t.Errorf("due within sweepEvery of the last = %+v; want nil", sums)
	}
	if sums := l.due(lt0.Add(2 * sweepEvery)); len(sums) != 0 {
		t.Errorf("due with nothing suppressed = %+v; want none", sums)
	}
	if n := len(l.sources); n != 0 {
		t.Errorf("%d sources tracked after they went quiet; want 0", n)
	}
}

// TestRefusalLimiterBounded: sources beyond maxLimitedSources share one
// bucket, so a flood from made-up addresses is limited in memory and in
// records.
func TestRefusalLimiterBounded(t *testing.T) {
	l := newRefusalLimiter(1, time.Hour)
	src := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	allowed := 0
	for i := range maxLimitedSources + 1000 {
		if ok, _ := l.allow(src(i), lt0); ok {
			allowed++
		}
	}
	if n := len(l.sources); n > maxLimitedSources+1 {
		t.Errorf("%d sources tracked; want at most %d", n, maxLimitedSources+1)
	}
	if want := maxLimitedSources + 1; allowed != want {
		t.Errorf("%d refusals recorded; want %d (one per tracked source, one for the shared bucket)", allowed, want)
	}
	sums := l.flush()
	if len(sums) != 1 || sums[0].source.IsValid() || sums[0].count != 999 {
		t.Errorf("flush = %+v; want one summary of 999 for the shared bucket", sums)
	}
}

// TestRefusalFlood: a flood of bad requests from one address is answered
// and counted in full, but becomes DefaultRefusalBurst events and then a
// summary, not one event per request.
func TestRefusalFlood(t *testing.T) {
	const flood = 200
	clk := clock.NewFake(lt0)
	srv := startServer(t, Config{FS: fixture(), Clock: clk})
	refused := counterValue(t, transfersTotal.WithLabelValues(OutcomeRefused))
	suppressed := counterValue(t, suppressedTotal)

	c := newClient(t, srv.addr)
	for i := range flood {
		c.sendTo(srv.addr, rrq(fmt.Sprintf("../etc/passwd-%d", i), "octet"))
		p, _, err := c.recv(5 * time.Second)
		if err != nil {
			t.Fatalf("request %d: no answer: %v", i, err)
		}
		if op, code := packetHead(p); op != opERROR || code != errAccess {
			t.Fatalf("request %d: answer %q; want ERROR %d", i, p, errAccess)
		}
	}
	// Requests are handled one after the other: when the last ERROR is
	// here, every earlier request has been recorded or not.
	if n := srv.events.count(); n != DefaultRefusalBurst {
		t.Fatalf("%d events for %d refusals in an instant; want %d", n, flood, DefaultRefusalBurst)
	}

	// A second later the source has a token: the summary comes first,
	// then the refusal.
	clk.Advance(DefaultRefusalEvery)
	c.sendTo(srv.addr, rrq("../etc/shadow", "octet"))
	if _, _, err := c.recv(5 * time.Second); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	evs := srv.events.wait(t, DefaultRefusalBurst+2)[DefaultRefusalBurst:]
	want := fmt.Sprintf("%d more refused or not-found requests from 127.0.0.1 since %s", flood-DefaultRefusalBurst, lt0.Format("15:04:05"))
	if evs[0].Outcome != OutcomeSuppressed || !strings.Contains(evs[0].Message, want) ||
		evs[0].IP != netip.MustParseAddr("127.0.0.1") || evs[0].Service != machinelog.ServiceTFTP {
		t.Errorf("event after the flood = %+v; want outcome %s, %q", evs[0], OutcomeSuppressed, want)
	}
	if evs[1].Outcome != OutcomeRefused || !strings.Contains(evs[1].Message, "../etc/shadow") {
		t.Errorf("next event = %+v; want the refusal of ../etc/shadow", evs[1])
	}
	if d := counterValue(t, transfersTotal.WithLabelValues(OutcomeRefused)) - refused; d != flood+1 {
		t.Errorf("refused count went up by %v; want %d: every request is counted", d, flood+1)
	}
	if d := counterValue(t, suppressedTotal) - suppressed; d != flood-DefaultRefusalBurst {
		t.Errorf("suppressed count went up by %v; want %d", d, flood-DefaultRefusalBurst)
	}

	// A served transfer is never limited.
	if res := c.get("one", getOpts{}); string(res.data) != "x" {
		t.Fatalf("get one = %q; want x", res.data)
	}
	if ev := srv.events.find(t, DefaultRefusalBurst+2, "RRQ one"); ev.Outcome != OutcomeServed {
		t.Errorf("event = %+v; want served", ev)
	}
}

// TestRefusalFloodSummaryAtStop: refusals still unreported when Serve ends
// are summarized then.
func TestRefusalFloodSummaryAtStop(t *testing.T) {
	clk := clock.NewFake(lt0)
	srv := startServer(t, Config{FS: fixture(), Clock: clk, RefusalBurst: 1})
	for range 4 {
		// A client port each: a request from the port of a transfer
		// still ending would be taken for a retransmission.
		c := newClient(t, srv.addr)
		c.sendTo(srv.addr, rrq("nothing-here", "octet"))
		if _, _, err := c.recv(5 * time.Second); err != nil {
			t.Fatalf("no answer: %v", err)
		}
	}
	srv.stop(t)
	evs := srv.events.wait(t, 2)
	if evs[0].Outcome != OutcomeNotFound || evs[1].Outcome != OutcomeSuppressed || !strings.Contains(evs[1].Message, "3 more") {
		t.Errorf("events = %+v; want one not-found, then a summary of 3", evs)
	}
}

// TestRefusalLimitOff: a negative RefusalBurst records every refusal.
func TestRefusalLimitOff(t *testing.T) {
	srv := startServer(t, Config{FS: fixture(), RefusalBurst: -1})
	c := newClient(t, srv.addr)
	const n = DefaultRefusalBurst + 5
	for range n {
		c.sendTo(srv.addr, rrq("../x", "octet"))
		if _, _, err := c.recv(5 * time.Second); err != nil {
			t.Fatalf("no answer: %v", err)
		}
	}
	if got := len(srv.events.wait(t, n)); got != n {
		t.Errorf("%d events; want %d", got, n)
	}
}
