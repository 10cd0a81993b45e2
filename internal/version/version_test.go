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
