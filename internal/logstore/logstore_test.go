package logstore

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func open(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func line(wf, agent string, i int) Line {
	return Line{WorkflowID: wf, AgentID: agent, TaskName: "os", ActionName: "disk",
		Time: t0.Add(time.Duration(i) * time.Second), Stream: "stdout", Line: fmt.Sprintf("line %d", i)}
}

func TestAppendRead(t *testing.T) {
	s := open(t, Config{})
	if err := s.Append(line("default/wf1", "agent-a", 0), line("default/wf1", "agent-b", 1),
		line("default/wf2", "agent-a", 2), line("", "agent-a", 3)); err != nil {
		t.Fatalf("Append: %v", err)
	}
	tests := []struct {
		name      string
		wf, agent string
		tail      int
		want      []string
	}{
		{name: "workflow", wf: "default/wf1", want: []string{"line 0", "line 1"}},
		{name: "agent", agent: "agent-a", want: []string{"line 0", "line 2", "line 3"}},
		{name: "workflow and agent", wf: "default/wf1", agent: "agent-b", want: []string{"line 1"}},
		{name: "tail", agent: "agent-a", tail: 2, want: []string{"line 2", "line 3"}},
		{name: "tail larger than log", wf: "default/wf2", tail: 10, want: []string{"line 2"}},
		{name: "unknown workflow", wf: "default/nope", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Read(tc.wf, tc.agent, tc.tail)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if texts := texts(got); fmt.Sprint(texts) != fmt.Sprint(tc.want) {
				t.Errorf("Read(%q, %q, %d) = %q; want %q", tc.wf, tc.agent, tc.tail, texts, tc.want)
			}
		})
	}
	got, err := s.Read("default/wf1", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := line("default/wf1", "agent-b", 1); got[0] != want {
		t.Errorf("round trip = %+v; want %+v", got[0], want)
	}
}

func texts(ls []Line) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Line)
	}
	return out
}

func TestAppendRejectsAnonymousLine(t *testing.T) {
	s := open(t, Config{})
	if err := s.Append(line("default/wf", "", 0), Line{Line: "who?"}); err == nil {
		t.Fatal("Append of a line with no IDs succeeded; want error")
	}
	if got, _ := s.Read("default/wf", "", 0); len(got) != 0 {
		t.Errorf("after failed Append, Read = %d lines; want 0 (all or nothing)", len(got))
	}
	if _, err := s.Read("", "", 0); err == nil {
		t.Error("Read with no IDs succeeded; want error")
	}
}

func TestFileNamesStayInDir(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Config{Dir: dir})
	ids := []string{"../../etc/passwd", "a/b", "..", string(make([]byte, 300))}
	for _, id := range ids {
		if err := s.Append(line(id, id, 0)); err != nil {
			t.Fatalf("Append(%q): %v", id, err)
		}
		got, err := s.Read(id, "", 0)
		if err != nil || len(got) != 1 {
			t.Errorf("Read(%q) = %d lines, %v; want 1", id, len(got), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2*len(ids) {
		t.Errorf("dir has %d files; want %d", len(entries), 2*len(ids))
	}
	if _, err := os.Stat(filepath.Join(dir, "..", "etc")); err == nil {
		t.Error("an ID escaped the log directory")
	}
}

func TestTrim(t *testing.T) {
	s := open(t, Config{MaxLines: 10})
	for i := 0; i < 100; i++ {
		if err := s.Append(line("default/wf", "", i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Read("default/wf", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 10 || len(got) > 11 {
		t.Fatalf("after 100 appends with MaxLines 10, Read = %d lines; want 10..11", len(got))
	}
	if last := got[len(got)-1].Line; last != "line 99" {
		t.Errorf("newest line = %q; want %q", last, "line 99")
	}
}

func TestReopenKeepsLinesAndCount(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, MaxLines: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if err := s.Append(line("default/wf", "", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(line("default/wf", "", 0)); err != ErrClosed {
		t.Errorf("Append after Close = %v; want ErrClosed", err)
	}
	s = open(t, Config{Dir: dir, MaxLines: 10})
	for i := 8; i < 20; i++ {
		if err := s.Append(line("default/wf", "", i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Read("default/wf", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > 11 || got[len(got)-1].Line != "line 19" {
		t.Errorf("after reopen, Read = %q; want at most 11 lines ending in line 19", texts(got))
	}
}

func TestTornLineSkipped(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Config{Dir: dir})
	if err := s.Append(line("default/wf", "", 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, fileName("wf-", "default/wf")), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"line":"tor`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := s.Read("default/wf", "", 0)
	if err != nil || len(got) != 1 {
		t.Errorf("Read with a torn last line = %d lines, %v; want 1, nil", len(got), err)
	}
}

func TestConcurrentAppendRead(t *testing.T) {
	s := open(t, Config{MaxLines: 500, MaxOpenFiles: 2})
	const writers, per = 8, 200
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				wf := fmt.Sprintf("default/wf%d", w%3)
				if err := s.Append(line(wf, fmt.Sprintf("agent-%d", w), i)); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					if _, err := s.Read(wf, "", 10); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for w := 0; w < writers; w++ {
		got, err := s.Read("", fmt.Sprintf("agent-%d", w), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != per {
			t.Errorf("agent-%d has %d lines; want %d", w, len(got), per)
		}
	}
}

func event(hw, machine, stream string, i int) Line {
	return Line{HardwareID: hw, Machine: machine, Time: t0.Add(time.Duration(i) * time.Second),
		Stream: stream, Line: fmt.Sprintf("line %d", i)}
}

func TestMachineRecords(t *testing.T) {
	s := open(t, Config{})
	if err := s.Append(event("default/node1", "", "dhcp", 0), event("", "3c:ec:ef:00:00:01", "dhcp", 1),
		event("default/node1", "", "tftp", 2), event("", "10.0.0.9", "tftp", 3), event("default/node2", "", "syslog", 4),
		line("default/wf1", "agent-a", 5)); err != nil {
		t.Fatalf("Append: %v", err)
	}
	tests := []struct {
		name string
		read func() ([]Line, error)
		want []string
	}{
		{name: "hardware", read: func() ([]Line, error) { return s.ReadHardware("default/node1", 0) }, want: []string{"line 0", "line 2"}},
		{name: "hardware tail", read: func() ([]Line, error) { return s.ReadHardware("default/node1", 1) }, want: []string{"line 2"}},
		{name: "unknown by MAC", read: func() ([]Line, error) { return s.ReadMachine("3c:ec:ef:00:00:01", 0) }, want: []string{"line 1"}},
		{name: "unknown by IP", read: func() ([]Line, error) { return s.ReadMachine("10.0.0.9", 0) }, want: []string{"line 3"}},
		{name: "hardware without record", read: func() ([]Line, error) { return s.ReadHardware("default/none", 0) }, want: nil},
		{name: "machine record not in agent file", read: func() ([]Line, error) { return s.Read("", "agent-a", 0) }, want: []string{"line 5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.read()
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if texts := texts(got); fmt.Sprint(texts) != fmt.Sprint(tc.want) {
				t.Errorf("read = %q; want %q", texts, tc.want)
			}
		})
	}
	got, err := s.ReadHardware("default/node1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := event("default/node1", "", "tftp", 2); got[0] != want {
		t.Errorf("round trip = %+v; want %+v", got[0], want)
	}
	if _, err := s.ReadHardware("", 0); err == nil {
		t.Error("ReadHardware with no ID succeeded; want error")
	}
	if _, err := s.ReadMachine("", 0); err == nil {
		t.Error("ReadMachine with no machine succeeded; want error")
	}
}

func TestUnknownMachines(t *testing.T) {
	s := open(t, Config{})
	if err := s.Append(event("", "3c:ec:ef:00:00:01", "dhcp", 0), event("", "10.0.0.9", "tftp", 1),
		event("", "3c:ec:ef:00:00:01", "dhcp", 2), event("default/node1", "", "dhcp", 3)); err != nil {
		t.Fatal(err)
	}
	got, err := s.UnknownMachines(0)
	if err != nil {
		t.Fatal(err)
	}
	var summary []string
	for _, l := range got {
		summary = append(summary, l.Machine+" "+l.Line)
	}
	if want := []string{"3c:ec:ef:00:00:01 line 2", "10.0.0.9 line 1"}; fmt.Sprint(summary) != fmt.Sprint(want) {
		t.Errorf("UnknownMachines = %q; want %q (newest event of each, newest first)", summary, want)
	}
	if got, err := s.UnknownMachines(1); err != nil || len(got) != 1 || got[0].Machine != "3c:ec:ef:00:00:01" {
		t.Errorf("UnknownMachines(1) = %+v, %v; want the newest machine only", got, err)
	}
}

func TestLastLineSkipsTornTail(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Config{Dir: dir})
	if err := s.Append(event("", "aa:bb:cc:dd:ee:ff", "dhcp", 0), event("", "aa:bb:cc:dd:ee:ff", "dhcp", 1)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, fileName(prefixUnknown, "aa:bb:cc:dd:ee:ff")), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("{\"line\":\"torn\n{\"line\":\"tor"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := s.UnknownMachines(0)
	if err != nil || len(got) != 1 || got[0].Line != "line 1" {
		t.Errorf("UnknownMachines with torn last lines = %+v, %v; want line 1", got, err)
	}
}

func TestUnknownMachinesBounded(t *testing.T) {
	dir := t.TempDir()
	const max = 10
	s, err := Open(Config{Dir: dir, MaxUnknownMachines: max})
	if err != nil {
		t.Fatal(err)
	}
	mac := func(i int) string { return fmt.Sprintf("02:00:00:00:00:%02x", i) }
	for i := 0; i < 30; i++ {
		// Machine 0 keeps talking, so it is never the least recent.
		if err := s.Append(event("", mac(i), "dhcp", i), event("", mac(0), "dhcp", i)); err != nil {
			t.Fatal(err)
		}
	}
	countFiles := func() int {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	if n := countFiles(); n < max || n > max+max/10 {
		t.Errorf("after 30 unknown machines with MaxUnknownMachines %d: %d files; want %d..%d", max, n, max, max+max/10)
	}
	for _, m := range []string{mac(0), mac(29)} {
		if got, err := s.ReadMachine(m, 0); err != nil || len(got) == 0 {
			t.Errorf("ReadMachine(%s) = %d lines, %v; want it kept (recently heard from)", m, len(got), err)
		}
	}
	if got, _ := s.ReadMachine(mac(1), 0); len(got) != 0 {
		t.Errorf("ReadMachine(%s) = %d lines; want its record evicted", mac(1), len(got))
	}
	// The hardware records are not subject to the bound.
	if err := s.Append(event("default/node1", "", "dhcp", 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A new process knows the earlier files and still bounds them.
	s = open(t, Config{Dir: dir, MaxUnknownMachines: max})
	for i := 100; i < 130; i++ {
		if err := s.Append(event("", mac(i), "dhcp", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := countFiles(); n < max+1 || n > max+max/10+1 {
		t.Errorf("after reopen: %d files; want %d..%d (plus the hardware record)", n, max+1, max+max/10+1)
	}
	if got, _ := s.ReadHardware("default/node1", 0); len(got) != 1 {
		t.Errorf("hardware record = %d lines after unknown evictions; want 1", len(got))
	}
}

func TestIdleHandlesClosedWithoutLoss(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Config{Dir: dir, MaxOpenFiles: 2, SyncInterval: -1})
	for i := 0; i < 50; i++ {
		if err := s.Append(event(fmt.Sprintf("default/node%d", i%7), "", "dhcp", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.open); n > 2 {
		t.Errorf("%d handles open; want at most MaxOpenFiles 2", n)
	}
	if n := len(s.dirty); n != 7 {
		t.Errorf("%d files await a sync; want all 7 (closing a handle must not forget it)", n)
	}
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if n := len(s.dirty); n != 0 {
		t.Errorf("after Sync %d files await a sync; want 0", n)
	}
	total := 0
	for i := 0; i < 7; i++ {
		got, err := s.ReadHardware(fmt.Sprintf("default/node%d", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		total += len(got)
	}
	if total != 50 {
		t.Errorf("read back %d lines; want 50", total)
	}
}

func TestSyncDuringAppends(t *testing.T) {
	s := open(t, Config{MaxOpenFiles: 3, MaxLines: 50, SyncInterval: time.Millisecond})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				if err := s.Append(event(fmt.Sprintf("default/node%d", (w+i)%5), "", "dhcp", i),
					event("", fmt.Sprintf("02:00:00:00:00:%02x", i%9), "dhcp", i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			if err := s.Sync(); err != nil {
				t.Error(err)
				return
			}
			if _, err := s.UnknownMachines(0); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
}

// A crash's torn last line costs that line only: after a restart, the
// next line appended to the file is read back whole.
func TestTornTailThenAppend(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Config{Dir: dir})
	if err := s.Append(line("default/wf", "", 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, fileName("wf-", "default/wf")), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"line":"tor`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s = open(t, Config{Dir: dir})
	if err := s.Append(line("default/wf", "", 1)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read("default/wf", "", 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("Read after a torn line and an append = %q, %v; want lines 0 and 1", texts(got), err)
	}
}
