package benchresult

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func valid() *Result {
	r := New("http")
	r.Server = AnvilServer("dev", "--no-dhcp")
	r.Peers = []Program{{Name: "nginx", Options: []string{"sendfile on"}}}
	r.Goals = []Goal{{Measure: "GB/s, 1 connection", Target: "≥ 1.0× nginx", Result: "2.0 GB/s", Peer: "1.4 GB/s", Met: true}}
	r.Samples = []float64{2.0}
	r.Finish()
	return r
}

func TestWriteReadRoundTrip(t *testing.T) {
	r := valid()
	path, err := r.Write(t.TempDir(), "1conn")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "http-1conn.json" {
		t.Errorf("path %s, want http-1conn.json", path)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bench != "http" || got.Cores != r.Cores || got.Commit != r.Commit || !got.Date.Equal(r.Date) ||
		len(got.Goals) != 1 || got.Goals[0] != r.Goals[0] || got.Server.Options[1] != "serve" {
		t.Errorf("read back %+v, want %+v", got, r)
	}
}

// TestRefusesAnotherServer: the runner must fail when the server under
// test is anything but `anvil serve`.
func TestRefusesAnotherServer(t *testing.T) {
	for name, p := range map[string]Program{
		"nginx named as anvil": {Name: ServerUnderTest, Options: []string{"nginx", "-c", "x"}},
		"anvil but not serve":  {Name: ServerUnderTest, Options: []string{"anvil", "agent"}},
		"a stand-in main":      {Name: "bench-main", Options: []string{"/tmp/go-build/main", "serve"}},
		"no command line":      {Name: ServerUnderTest},
	} {
		r := valid()
		r.Server = p
		if _, err := r.Write(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "server under test") {
			t.Errorf("%s: Write = %v, want a server-under-test error", name, err)
		}
	}
	if err := CheckServer(AnvilServer("", "--data-dir", "/x")); err != nil {
		t.Errorf("anvil serve refused: %v", err)
	}
	if err := CheckServer(Program{Name: ServerUnderTest, Options: []string{"/work/bin/anvil", "serve"}}); err != nil {
		t.Errorf("anvil serve by path refused: %v", err)
	}
}

func TestValidateNamesWhatIsMissing(t *testing.T) {
	r := &Result{Bench: "dhcp", Server: AnvilServer("")}
	err := r.Validate()
	if err == nil {
		t.Fatal("an empty result validated")
	}
	for _, want := range []string{"no date", "no core count", "no commit", "no goals", "no raw samples"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	r = valid()
	r.Peers = append(r.Peers, Program{Name: "kea-dhcp4"})
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "exact options") {
		t.Errorf("a peer without options: %v", err)
	}
}

func TestReadRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"bench":`), 0o644)
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("truncated file: %v", err)
	}
	os.WriteFile(bad, []byte(`{"bench":"x","server":{"name":"nginx","options":["nginx"]}}`), 0o644)
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), "server under test") {
		t.Errorf("nginx as server: %v", err)
	}
}

func TestLoadAverage(t *testing.T) {
	if v := LoadAverage(); v < 0 {
		t.Errorf("LoadAverage = %v", v)
	}
}
