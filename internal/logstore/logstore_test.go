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
