package config

import (
	"slices"
	"testing"
)

// TestReload: a fresh flag set given the running command line and a
// changed file sees what changed, not what the command line still wins;
// a change adopted live is no longer reported.
func TestReload(t *testing.T) {
	fs := testFlags()
	if err := fs.Parse([]string{"--http-port", "8080", "--tls-san", "a.example,b.example"}); err != nil {
		t.Fatal(err)
	}
	cmdLine := CommandLineOf(fs) // before Load, as the command does
	running, err := run{file: "http-port: 1\npoll: 1m\nmirror: [x]\n"}.load(t, fs)
	if err != nil {
		t.Fatal(err)
	}
	// What the command does with its flags after Load is no change of
	// the configuration.
	if err := fs.Set("bind", "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	fresh := testFlags()
	if err := cmdLine.Apply(fresh); err != nil {
		t.Fatal(err)
	}
	next, err := run{file: "http-port: 2\npoll: 2m\nmirror: [x, y]\nrate: 100\n"}.load(t, fresh)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range running.Changed(next) {
		names = append(names, s.Flag.Name)
	}
	// http-port: the flag wins over both files; rate: the file says
	// the default.
	if want := []string{"mirror", "poll"}; !slices.Equal(names, want) {
		t.Errorf("changed %q; want %q", names, want)
	}
	if err := running.Adopt(setting(t, next, "poll")); err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("poll").Value.String(); got != "2m0s" {
		t.Errorf("adopted poll is %s in the running flags; want 2m0s", got)
	}
	if ch := running.Changed(next); len(ch) != 1 || ch[0].Flag.Name != "mirror" {
		t.Errorf("after adopting poll, changed: %v; want mirror alone", ch)
	}
	if err := (CommandLine{"no-such-flag": {"1"}}).Apply(testFlags()); err == nil {
		t.Error("Apply of another command's flag: nil")
	}
}
