package version

import (
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v1.2.3"
	if got := Get().String(); !strings.HasPrefix(got, "anvil v1.2.3 (commit ") {
		t.Errorf("Get().String() = %q; want it to start with anvil v1.2.3", got)
	}
	Version = ""
	if got := Get(); got.Version == "" || got.Commit == "" {
		t.Errorf("Get() = %+v; want no blank fields", got)
	}
}

func TestGetDate(t *testing.T) {
	oldV, oldD := Version, Date
	t.Cleanup(func() { Version, Date = oldV, oldD })
	Version, Date = "v1.2.3", "2026-11-28T12:00:00Z"
	got := Get()
	if got.Date != Date {
		t.Errorf("Get().Date = %q; want %q", got.Date, Date)
	}
	if s := got.String(); !strings.Contains(s, " of 2026-11-28T12:00:00Z, ") {
		t.Errorf("Get().String() = %q; want the commit's date in it", s)
	}
}
