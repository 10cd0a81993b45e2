package logstore

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func follow(t *testing.T, s *Store, sel Selection, tail int) (*Subscription, []Line) {
	t.Helper()
	sub, lines, err := s.Follow(sel, tail)
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	t.Cleanup(sub.Close)
	return sub, lines
}

func appendLines(t *testing.T, s *Store, lines ...Line) {
	t.Helper()
	if err := s.Append(lines...); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

// poked reports whether a poke is pending. Append hands lines over before
// it returns, so this is decided, not raced, once Append has returned.
func poked(sub *Subscription) bool {
	select {
	case <-sub.Ready():
		return true
	default:
		return false
	}
}

// TestFollowTailThenNewLines: Follow gives the tail, then exactly the
// lines appended after it to the followed workflow, no other's; nothing
// between the two is lost or repeated.
func TestFollowTailThenNewLines(t *testing.T) {
	s := open(t, Config{})
	for i := range 5 {
		appendLines(t, s, line("default/wf1", "a", i))
	}
	sub, tail := follow(t, s, Selection{WorkflowID: "default/wf1"}, 3)
	if got, want := texts(tail), []string{"line 2", "line 3", "line 4"}; !slices.Equal(got, want) {
		t.Fatalf("tail = %q; want %q", got, want)
	}
	if poked(sub) {
		t.Fatal("a new subscription is poked before any append")
	}
	appendLines(t, s, line("default/wf2", "a", 99))
	if poked(sub) {
		t.Fatal("an append to another workflow poked the subscription")
	}
	appendLines(t, s, line("default/wf1", "a", 5), line("default/wf2", "a", 98), line("default/wf1", "a", 6))
	if !poked(sub) {
		t.Fatal("an append to the followed workflow did not poke")
	}
	got, skipped := sub.Take()
	if want := []string{"line 5", "line 6"}; !slices.Equal(texts(got), want) || skipped != 0 {
		t.Fatalf("Take = %q, %d skipped; want %q, 0", texts(got), skipped, want)
	}
	if got, _ := sub.Take(); len(got) != 0 {
		t.Fatalf("a second Take = %q; want nothing", texts(got))
	}
}

// TestFollowCoalesces: many appends leave one pending poke, and one Take
// returns all their lines in order.
func TestFollowCoalesces(t *testing.T) {
	s := open(t, Config{})
	sub, _ := follow(t, s, Selection{HardwareID: "default/node07"}, 0)
	for i := range 10 {
		appendLines(t, s, Line{HardwareID: "default/node07", Time: t0, Stream: "dhcp", Line: fmt.Sprintf("dhcp %d", i)})
	}
	if n := len(sub.ready); n != 1 {
		t.Fatalf("pending pokes = %d after 10 appends; want 1", n)
	}
	<-sub.Ready()
	got, _ := sub.Take()
	if len(got) != 10 || got[0].Line != "dhcp 0" || got[9].Line != "dhcp 9" {
		t.Fatalf("Take = %q; want dhcp 0..9", texts(got))
	}
}

// TestFollowLineInTwoFilesOnce: a line kept in two followed files (a
// workflow's and its agent's) is delivered and read once.
func TestFollowLineInTwoFilesOnce(t *testing.T) {
	s := open(t, Config{})
	sel := Selection{WorkflowID: "default/wf1", AgentIDs: []string{"agent-a"}}
	appendLines(t, s, line("default/wf1", "agent-a", 0))
	sub, tail := follow(t, s, sel, 0)
	if got := texts(tail); !slices.Equal(got, []string{"line 0"}) {
		t.Fatalf("tail = %q; want [line 0] once", got)
	}
	appendLines(t, s, line("default/wf1", "agent-a", 1), line("", "agent-a", 2))
	got, _ := sub.Take()
	if want := []string{"line 1", "line 2"}; !slices.Equal(texts(got), want) {
		t.Fatalf("Take = %q; want %q", texts(got), want)
	}
	all, err := s.ReadSelection(sel, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"line 0", "line 1", "line 2"}; !slices.Equal(texts(all), want) {
		t.Fatalf("ReadSelection = %q; want %q", texts(all), want)
	}
}

// TestReadSelectionMachineView: a Hardware's record, its agent's lines
// and its MAC's unknown record come merged by time, the tail of the whole.
func TestReadSelectionMachineView(t *testing.T) {
	s := open(t, Config{})
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	appendLines(t, s,
		Line{Machine: "52:54:00:0d:00:01", Time: at(0), Stream: "dhcp", Line: "unknown then"},
		Line{HardwareID: "acme/n1", Time: at(1), Stream: "dhcp", Line: "offer"},
		Line{WorkflowID: "acme/wf", AgentID: "52:54:00:0d:00:01", Time: at(3), Stream: "stdout", Line: "agent"},
		Line{HardwareID: "acme/n1", Time: at(2), Stream: "tftp", Line: "ipxe.efi"},
		Line{HardwareID: "acme/other", Time: at(4), Stream: "dhcp", Line: "not ours"},
	)
	sel := Selection{HardwareID: "acme/n1", AgentIDs: []string{"52:54:00:0d:00:01"}, Machines: []string{"52:54:00:0d:00:01"}}
	got, err := s.ReadSelection(sel, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"unknown then", "offer", "ipxe.efi", "agent"}; !slices.Equal(texts(got), want) {
		t.Fatalf("ReadSelection = %q; want %q", texts(got), want)
	}
	got, _ = s.ReadSelection(sel, 2)
	if want := []string{"ipxe.efi", "agent"}; !slices.Equal(texts(got), want) {
		t.Fatalf("ReadSelection tail 2 = %q; want %q", texts(got), want)
	}
	if _, err := s.ReadSelection(Selection{}, 0); err == nil {
		t.Fatal("ReadSelection of nothing: no error")
	}
}

// TestFollowBounded: a reader that does not take keeps at most the
// bounds; the rest is counted, and lines flow again after a Take.
func TestFollowBounded(t *testing.T) {
	s := open(t, Config{FollowLines: 3})
	sub, _ := follow(t, s, Selection{WorkflowID: "default/wf1"}, 0)
	for i := range 5 {
		appendLines(t, s, line("default/wf1", "a", i))
	}
	got, skipped := sub.Take()
	if want := []string{"line 0", "line 1", "line 2"}; !slices.Equal(texts(got), want) || skipped != 2 {
		t.Fatalf("Take = %q, %d skipped; want %q, 2 skipped", texts(got), skipped, want)
	}
	appendLines(t, s, line("default/wf1", "a", 5))
	if got, skipped := sub.Take(); !slices.Equal(texts(got), []string{"line 5"}) || skipped != 0 {
		t.Fatalf("after a Take: %q, %d skipped; want [line 5], 0", texts(got), skipped)
	}

	// The byte bound: one long line fits, the next does not.
	s2 := open(t, Config{FollowBytes: 1000})
	sub2, _ := follow(t, s2, Selection{WorkflowID: "default/wf1"}, 0)
	long := line("default/wf1", "a", 0)
	long.Line = strings.Repeat("x", 600)
	appendLines(t, s2, long, long)
	if got, skipped := sub2.Take(); len(got) != 1 || skipped != 1 {
		t.Fatalf("two 600-byte lines against 1000 bytes: got %d, %d skipped; want 1, 1", len(got), skipped)
	}
}

// TestFollowCloseAndLimit: a closed subscription gets nothing and leaves
// no entry behind; at most MaxFollowers are open; a subscription starts
// no goroutine.
func TestFollowCloseAndLimit(t *testing.T) {
	s := open(t, Config{MaxFollowers: 2})
	before := runtime.NumGoroutine()
	a, _, err := s.Follow(Selection{WorkflowID: "default/wf1", AgentIDs: []string{"a"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.Follow(Selection{WorkflowID: "default/wf1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Follow(Selection{WorkflowID: "default/wf2"}, 0); !errors.Is(err, ErrTooManyFollowers) {
		t.Fatalf("a third Follow with MaxFollowers 2: %v; want ErrTooManyFollowers", err)
	}
	if n := runtime.NumGoroutine(); n != before {
		t.Errorf("goroutines %d → %d with two subscriptions; want none started", before, n)
	}
	a.Close()
	a.Close() // twice is fine
	appendLines(t, s, line("default/wf1", "a", 0))
	if poked(a) {
		t.Error("a closed subscription was poked")
	}
	if got, _ := a.Take(); len(got) != 0 {
		t.Errorf("a closed subscription got %q", texts(got))
	}
	if got, _ := b.Take(); len(got) != 1 {
		t.Errorf("the open one got %d lines; want 1", len(got))
	}
	c, _, err := s.Follow(Selection{WorkflowID: "default/wf2"}, 0)
	if err != nil {
		t.Fatalf("Follow after a Close: %v", err)
	}
	b.Close()
	c.Close()
	s.mu.Lock()
	left, n := len(s.subs), s.followers
	s.mu.Unlock()
	if left != 0 || n != 0 {
		t.Fatalf("after closing all: %d files followed, %d followers; want 0, 0", left, n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c.Close() // after the store's Close
	if _, _, err := s.Follow(Selection{WorkflowID: "default/wf1"}, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Follow after Close: %v; want ErrClosed", err)
	}
}

// TestFollowConcurrent: writers append while a reader takes; every line
// is either taken, in order per writer, or counted as skipped.
func TestFollowConcurrent(t *testing.T) {
	s := open(t, Config{FollowLines: 50, SyncInterval: -1})
	sub, _ := follow(t, s, Selection{WorkflowID: "default/wf1"}, 0)
	const writers, per = 4, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if err := s.Append(Line{WorkflowID: "default/wf1", AgentID: fmt.Sprint(w), Time: t0, Line: fmt.Sprint(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	last := map[string]int{}
	total := 0
	for total < writers*per {
		<-sub.Ready()
		got, skipped := sub.Take()
		for _, l := range got {
			var i int
			fmt.Sscan(l.Line, &i)
			if prev, ok := last[l.AgentID]; ok && i <= prev {
				t.Fatalf("writer %s: line %d after %d", l.AgentID, i, prev)
			}
			last[l.AgentID] = i
		}
		total += len(got) + skipped
	}
	wg.Wait()
	if total != writers*per {
		t.Fatalf("taken + skipped = %d; want %d", total, writers*per)
	}
}
