package benchresult

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func valid() *Result {
	r := New("http")
	r.Server = AnvilServer("dev", []string{"anvil", "serve", "--no-dhcp"})
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
	if err := CheckServer(AnvilServer("", []string{"/usr/bin/anvil", "serve", "--data-dir", "/x"})); err != nil {
		t.Errorf("anvil serve refused: %v", err)
	}
	if err := CheckServer(Program{Name: ServerUnderTest, Options: []string{"/work/bin/anvil", "serve"}}); err != nil {
		t.Errorf("anvil serve by path refused: %v", err)
	}
}

func TestValidateNamesWhatIsMissing(t *testing.T) {
	r := &Result{Bench: "dhcp", Server: AnvilServer("", []string{"anvil", "serve"})}
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

// TestSubjectInsteadOfServer: a benchmark that starts no server names the
// Anvil code it measured; it may not name a server beside it, nor make a
// peer its subject.
func TestSubjectInsteadOfServer(t *testing.T) {
	r := valid()
	r.Server = Program{}
	r.Subject = &Program{Name: "anvil image2disk action", Options: []string{"image2diskbench", "write"}}
	if err := r.Validate(); err != nil {
		t.Errorf("a subject without a server: %v", err)
	}
	r.Server = AnvilServer("", []string{"anvil", "serve"})
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "both a server under test") {
		t.Errorf("a subject and a server: %v", err)
	}
	r.Server = Program{}
	r.Subject = &Program{Name: "curl | zstd -dc | dd", Options: []string{"curl"}}
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "Anvil code") {
		t.Errorf("a peer as the subject: %v", err)
	}
	r.Subject = nil
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "server under test") {
		t.Errorf("neither a server nor a subject: %v", err)
	}
}

func TestSaveWritesOnlyValidResults(t *testing.T) {
	dir := t.TempDir()
	r := valid()
	if err := r.Save(dir, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(filepath.Join(dir, "http-x.json")); err != nil {
		t.Errorf("saved result does not read back: %v", err)
	}
	r.Server = Program{Name: "nginx", Options: []string{"nginx"}}
	if err := r.Save(dir, "y"); err == nil {
		t.Error("Save wrote a result measuring nginx as the server under test")
	}
	if _, err := os.Stat(filepath.Join(dir, "http-y.json")); !os.IsNotExist(err) {
		t.Errorf("a refused result left a file: %v", err)
	}
	if err := r.Save("", ""); err == nil {
		t.Error("Save without a directory did not validate")
	}
}

func TestVersion(t *testing.T) {
	if v := Version("sh", "-c", "echo; echo '  tool 1.2  '; echo more"); v != "tool 1.2" {
		t.Errorf("Version = %q, want the first non-empty line", v)
	}
	if v := Version("/nonexistent/program"); v != "unknown" {
		t.Errorf("Version of a missing program = %q", v)
	}
}

// FuzzRead: whatever a file holds, Read returns an error or a result
// that validates; it never returns one naming another server under test.
func FuzzRead(f *testing.F) {
	b, _ := valid().Marshal()
	f.Add(b)
	f.Add([]byte(`{"bench":"x","server":{"name":"anvil serve","options":["nginx","serve"]}}`))
	f.Add([]byte(`{"bench":"x","subject":{"name":"anvil","options":["x"]},"server":{"name":"anvil serve"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "r.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Read(path)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Errorf("Read returned a result that does not validate: %v", err)
		}
		if r.Subject == nil {
			if err := CheckServer(r.Server); err != nil {
				t.Errorf("Read accepted server %+v: %v", r.Server, err)
			}
		}
	})
}

// TestCommitIgnoresResultFiles: a result file rewritten by an earlier
// section does not make the next section's tree "dirty"; any other
// tracked change does.
func TestCommitIgnoresResultFiles(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	os.MkdirAll(filepath.Join(dir, DefaultDir), 0o755)
	os.WriteFile(filepath.Join(dir, DefaultDir, "x.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main"), 0o644)
	git("add", ".")
	git("commit", "-q", "-m", "x")
	t.Chdir(filepath.Join(dir, "bench")) // a bench may run below the root
	os.WriteFile(filepath.Join(dir, DefaultDir, "x.json"), []byte(`{"new":1}`), 0o644)
	if c := Commit(); strings.HasSuffix(c, "+dirty") || len(c) != 40 {
		t.Errorf("Commit = %q after a result file changed, want the clean commit", c)
	}
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main // changed"), 0o644)
	if c := Commit(); !strings.HasSuffix(c, "+dirty") {
		t.Errorf("Commit = %q after code changed, want +dirty", c)
	}
}
