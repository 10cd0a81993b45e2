package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestAppendListFilter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", "audit.log")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	recs := []Record{
		{Time: t0, Subject: "alice", Org: "acme", Procedure: "/anvil.v1.HardwareService/Create", Namespace: "acme", Object: "name=n1", Outcome: "ok"},
		{Time: t0.Add(time.Minute), Subject: "bob", Org: "globex", Procedure: "/anvil.v1.HardwareService/Delete", Namespace: "acme", Object: "name=n1", Outcome: "permission_denied", Message: "no"},
		{Time: t0.Add(2 * time.Minute), Subject: "root", Procedure: "/anvil.v1.ManifestService/Apply", Namespace: "globex", Outcome: "ok"},
		{Time: t0.Add(3 * time.Minute), Subject: "alice", Org: "acme", Procedure: "/anvil.v1.WorkflowService/Reprovision", Namespace: "acme", Outcome: "ok"},
	}
	for _, r := range recs {
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		f    Filter
		want []int
	}{
		{"all", Filter{}, []int{0, 1, 2, 3}},
		{"org acme: its namespace, and calls by its callers", Filter{Org: "acme"}, []int{0, 1, 3}},
		{"org globex", Filter{Org: "globex"}, []int{1, 2}},
		{"subject", Filter{Subject: "alice"}, []int{0, 3}},
		{"since", Filter{Since: t0.Add(90 * time.Second)}, []int{2, 3}},
		{"limit keeps the newest", Filter{Limit: 2}, []int{2, 3}},
		{"procedure, any case", Filter{Procedure: "hardwareservice/"}, []int{0, 1}},
		{"object", Filter{Object: "NAME=n1"}, []int{0, 1}},
		{"procedure and limit: the newest matching", Filter{Procedure: "Service/", Object: "n1", Limit: 1}, []int{1}},
	} {
		got, err := l.List(c.f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %d records, want %d: %+v", c.name, len(got), len(c.want), got)
			continue
		}
		for i, w := range c.want {
			if got[i] != recs[w] {
				t.Errorf("%s: record %d = %+v, want %+v", c.name, i, got[i], recs[w])
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(recs[0]); err != ErrClosed {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
}

// A crash mid-write leaves a torn last line: reopening loses only it.
func TestTornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r := Record{Time: time.Unix(1, 0).UTC(), Subject: "a", Procedure: "p", Outcome: "ok"}
	if err := l.Append(r); err != nil {
		t.Fatal(err)
	}
	l.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2026-11-23T10:00:00Z","subj`)
	f.Close()

	l, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r2 := Record{Time: time.Unix(2, 0).UTC(), Subject: "b", Procedure: "p", Outcome: "ok"}
	if err := l.Append(r2); err != nil {
		t.Fatal(err)
	}
	got, err := l.List(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != r || got[1] != r2 {
		t.Fatalf("after a torn line: %+v, want the two whole records", got)
	}
	if l.Corrupt() != 1 {
		t.Errorf("Corrupt() = %d, want 1", l.Corrupt())
	}
}

func TestConcurrentAppends(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 25 {
				if err := l.Append(Record{Subject: fmt.Sprintf("s%d", i), Object: fmt.Sprint(j), Outcome: "ok"}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	got, err := l.List(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 200 || l.Corrupt() != 0 {
		t.Fatalf("%d records, %d corrupt; want 200 whole records", len(got), l.Corrupt())
	}
}
