package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// testFlags is a set with a flag of every type a key can hold, and a
// secret.
func testFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("bind", "0.0.0.0", "")
	fs.Int("http-port", 7080, "")
	fs.Int64("max-mib", 16, "")
	fs.Bool("no-dhcp", false, "")
	fs.Duration("poll", 30*time.Second, "")
	fs.Float64("rate", 100, "")
	fs.StringSlice("tls-san", nil, "")
	fs.StringArray("mirror", nil, "")
	fs.String("tls-key", "", "")
	MarkSecret(fs, "tls-key")
	return fs
}

// run is one load: args on the command line of fs, env as the
// environment, file (if not "") as the config file anvil.yaml.
type run struct {
	args []string
	env  map[string]string
	file string
}

func (r run) load(t *testing.T, fs *pflag.FlagSet) (*Config, error) {
	t.Helper()
	if err := fs.Parse(r.args); err != nil {
		t.Fatal(err)
	}
	o := Options{Name: "test", Flags: fs, File: filepath.Join(t.TempDir(), "anvil.yaml"),
		LookupEnv: func(k string) (string, bool) { v, ok := r.env[k]; return v, ok },
		Environ: func() []string {
			var kv []string
			for k, v := range r.env {
				kv = append(kv, k+"="+v)
			}
			return kv
		},
		Reserved: []string{"ANVIL_TOKEN"},
	}
	if r.file != "" {
		if err := os.WriteFile(o.File, []byte(r.file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return Load(o)
}

func (r run) mustLoad(t *testing.T) (*Config, *pflag.FlagSet) {
	t.Helper()
	fs := testFlags()
	c, err := r.load(t, fs)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return c, fs
}

func setting(t *testing.T, c *Config, name string) Setting {
	t.Helper()
	for _, s := range c.Settings {
		if s.Flag.Name == name {
			return s
		}
	}
	t.Fatalf("no setting %s", name)
	return Setting{}
}

// TestPrecedence: for a key of each kind, every combination of flag,
// environment and file gives the highest source's value, names it as the
// source and lists the others as overridden.
func TestPrecedence(t *testing.T) {
	keys := []struct {
		name                   string
		flag, env, file, deflt string // the value each source gives, as the flag prints it
		fileYAML               string
	}{
		{"http-port", "1001", "1002", "1003", "7080", "1003"},
		{"no-dhcp", "true", "true", "true", "false", "true"},
		{"poll", "1s", "2s", "3s", "30s", "3s"},
		{"tls-san", "[f1,f2]", "[e1,e2]", "[y1,y2]", "[]", "[y1, y2]"},
	}
	for _, k := range keys {
		for mask := 0; mask < 8; mask++ {
			useFlag, useEnv, useFile := mask&4 != 0, mask&2 != 0, mask&1 != 0
			var r run
			r.env = map[string]string{}
			want, wantSrc, wantOver := k.deflt, Default, []Source(nil)
			if useFile {
				r.file = "# settings\n\n" + k.name + ": " + k.fileYAML + "\n"
				want, wantSrc = k.file, File
			}
			if useEnv {
				r.env[EnvName(k.name)] = strings.Trim(k.env, "[]")
				if wantSrc != Default {
					wantOver = append([]Source{wantSrc}, wantOver...)
				}
				want, wantSrc = k.env, Env
			}
			if useFlag {
				r.args = []string{"--" + k.name + "=" + strings.Trim(k.flag, "[]")}
				if wantSrc != Default {
					wantOver = append([]Source{wantSrc}, wantOver...)
				}
				want, wantSrc = k.flag, Flag
			}
			name := k.name + "/" + map[bool]string{true: "flag", false: "-"}[useFlag] + map[bool]string{true: "+env", false: ""}[useEnv] + map[bool]string{true: "+file", false: ""}[useFile]
			t.Run(name, func(t *testing.T) {
				if k.name == "no-dhcp" {
					// A bool's sources all say true: false from a lower
					// one must lose to it, so the lower ones say false.
					r = boolRun(r, useFlag, useEnv, useFile)
				}
				c, fs := r.mustLoad(t)
				s := setting(t, c, k.name)
				if got := fs.Lookup(k.name).Value.String(); got != want {
					t.Errorf("value = %s; want %s", got, want)
				}
				if s.Source != wantSrc || !slices.Equal(s.Overridden, wantOver) {
					t.Errorf("source %v overriding %v; want %v overriding %v", s.Source, s.Overridden, wantSrc, wantOver)
				}
				if useFile && s.Line != 3 {
					t.Errorf("line = %d; want 3", s.Line)
				}
				if changed := fs.Lookup(k.name).Changed; changed != (mask != 0) {
					t.Errorf("Changed = %v with sources %03b", changed, mask)
				}
			})
		}
	}
}

// boolRun makes the lower sources of a bool say false and the highest
// true, so that the value tells which won.
func boolRun(r run, useFlag, useEnv, useFile bool) run {
	top := "flag"
	switch {
	case useFlag:
	case useEnv:
		top = "env"
	case useFile:
		top = "file"
	}
	v := func(src string) string { return map[bool]string{true: "true", false: "false"}[src == top] }
	if useFile {
		r.file = "# settings\n\nno-dhcp: " + v("file") + "\n"
	}
	if useEnv {
		r.env["ANVIL_NO_DHCP"] = v("env")
	}
	if useFlag {
		r.args = []string{"--no-dhcp=" + v("flag")}
	}
	return r
}

// TestUnknownKey: a key that is no flag is refused with its name and
// line, with the flag it most likely meant; every bad key is reported at
// once.
func TestUnknownKey(t *testing.T) {
	_, err := run{file: "bind: 10.0.0.2\nhtp-port: 8080\n\nhttp_port: 8081\nfrobnicate: true\n"}.load(t, testFlags())
	if err == nil {
		t.Fatal("unknown keys accepted")
	}
	for _, want := range []string{
		`anvil.yaml:2: unknown key "htp-port" (did you mean "http-port"?)`,
		`anvil.yaml:4: unknown key "http_port" (did you mean "http-port"?)`,
		`anvil.yaml:5: unknown key "frobnicate"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"frobnicate" (did you mean`) {
		t.Errorf("a far-off key got a suggestion: %v", err)
	}
}

// TestWrongType: a value the key cannot hold is refused with the key, its
// line and what it takes.
func TestWrongType(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"word for an integer", "bind: a\nhttp-port: eighty\n", `anvil.yaml:2: http-port: want an integer, got "eighty" (a string)`},
		{"quoted integer", "http-port: \"8080\"\n", `anvil.yaml:1: http-port: want an integer, got "8080" (a string)`},
		{"float for an integer", "max-mib: 1.5\n", `anvil.yaml:1: max-mib: want an integer, got "1.5" (a number)`},
		{"yes for a bool", "\nno-dhcp: yes\n", `anvil.yaml:2: no-dhcp: want true or false, got "yes" (a string)`},
		{"duration without a unit", "poll: 5x\n", `anvil.yaml:1: poll: want a duration such as 30s or 1m30s: time: unknown unit "x"`},
		{"scalar for a list", "tls-san: a.example\n", `anvil.yaml:1: tls-san: want a list of strings, got "a.example" (a string)`},
		{"mapping in a list", "tls-san:\n  - a\n  - {b: c}\n", `anvil.yaml:2: tls-san: item 2 (line 3): want a string, got a mapping`},
		{"mapping for a string", "bind: {a: 1}\n", `anvil.yaml:1: bind: want a string, got a mapping`},
		{"no value", "bind:\n", `anvil.yaml:1: bind: want a string, got no value`},
		{"twice", "bind: a\nrate: 2\nbind: b\n", `anvil.yaml:3: bind given twice (first on line 1)`},
		{"two documents", "bind: a\n---\nbind: b\n", `anvil.yaml:2: a second YAML document`},
		{"a list", "- bind\n", `anvil.yaml:1: want a mapping of keys (http-port: 7080), got a list`},
		{"syntax", "bind: a\n  http-port: [\n", `anvil.yaml: yaml: line 2`},
		{"mapping as a key", "{a: 1}: b\n", `anvil.yaml:1: want a key's name, got a mapping`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run{file: tc.file}.load(t, testFlags())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("load(%q) = %v;\nwant an error with %q", tc.file, err, tc.want)
			}
		})
	}
}

// TestEveryProblemAtOnce: the file's problems of every kind, found in
// reading it and in setting its values, are reported together.
func TestEveryProblemAtOnce(t *testing.T) {
	_, err := run{file: "bind: a\nhtp-port: 1\nbind: b\nno-dhcp: yes\ntls-san: x\npoll: 10\n"}.load(t, testFlags())
	for _, want := range []string{":2: unknown key", ":3: bind given twice", ":4: no-dhcp: want true or false", ":5: tls-san: want a list", ":6: poll: want a duration"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nlacks %q", err, want)
		}
	}
}

// TestFileValues: YAML's own spellings reach the flags as YAML means
// them, aliases included; an empty file or one of comments is no keys.
func TestFileValues(t *testing.T) {
	_, fs := run{file: "http-port: 0x1F90\nmax-mib: 1_024\nrate: 2.5e1\npoll: 0\nno-dhcp: True\nbind: &b 10.0.0.2\ntls-key: *b\ntls-san: [a, 'b,c', 3]\nmirror: [\"quay.io=http://m:5000\"]\n"}.mustLoad(t)
	for name, want := range map[string]string{"http-port": "8080", "max-mib": "1024", "rate": "25", "poll": "0s", "no-dhcp": "true",
		"bind": "10.0.0.2", "tls-key": "10.0.0.2", "tls-san": `[a,"b,c",3]`, "mirror": "[quay.io=http://m:5000]"} {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("%s = %s; want %s", name, got, want)
		}
	}
	for _, file := range []string{"# nothing yet\n", "---\n", "~\n", "\n"} {
		c, _ := run{file: file}.mustLoad(t)
		for _, s := range c.Settings {
			if s.Source != Default {
				t.Errorf("file %q set %s", file, s.Flag.Name)
			}
		}
	}
}

// TestEnv: the variables' bools, lists, durations and numbers, and the
// errors naming the variable.
func TestEnv(t *testing.T) {
	_, fs := run{env: map[string]string{
		"ANVIL_NO_DHCP": "1", "ANVIL_TLS_SAN": `a.example,"b,c",10.0.0.2`, "ANVIL_MIRROR": "quay.io=http://m:5000,docker.io=http://m:5001",
		"ANVIL_POLL": "1m30s", "ANVIL_RATE": "0.5", "ANVIL_HTTP_PORT": "0x1F90", "ANVIL_BIND": "",
	}}.mustLoad(t)
	for name, want := range map[string]string{"no-dhcp": "true", "tls-san": `[a.example,"b,c",10.0.0.2]`,
		"mirror": "[quay.io=http://m:5000,docker.io=http://m:5001]", "poll": "1m30s", "rate": "0.5", "http-port": "8080",
		"bind": "0.0.0.0"} { // empty: unset
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("%s = %s; want %s", name, got, want)
		}
	}
	for _, b := range []struct{ env, want string }{{"false", "false"}, {"FALSE", "false"}, {"0", "false"}, {"t", "true"}, {"True", "true"}} {
		_, fs := run{env: map[string]string{"ANVIL_NO_DHCP": b.env}}.mustLoad(t)
		if got := fs.Lookup("no-dhcp").Value.String(); got != b.want {
			t.Errorf("ANVIL_NO_DHCP=%s: %s; want %s", b.env, got, b.want)
		}
	}
	_, err := run{env: map[string]string{"ANVIL_NO_DHCP": "yes", "ANVIL_POLL": "90", "ANVIL_HTTP_PORT": "http", "ANVIL_TLS_SAN": `"a,b`}}.load(t, testFlags())
	for _, want := range []string{
		`ANVIL_NO_DHCP="yes": want true or false`,
		`ANVIL_POLL="90": want a duration such as 30s or 1m30s: time: missing unit`,
		`ANVIL_HTTP_PORT="http": want an integer`,
		`ANVIL_TLS_SAN="\"a,b": want a list of strings`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nlacks %q", err, want)
		}
	}
}

// TestOverriddenValuesAreChecked: a broken value is refused even where a
// higher source overrides it: it would break the day the flag is dropped.
func TestOverriddenValuesAreChecked(t *testing.T) {
	_, err := run{args: []string{"--poll=1s"}, env: map[string]string{"ANVIL_POLL": "soon"}, file: "poll: later\n"}.load(t, testFlags())
	if err == nil || !strings.Contains(err.Error(), "anvil.yaml:1: poll:") || !strings.Contains(err.Error(), `ANVIL_POLL="soon"`) {
		t.Errorf("load = %v; want both lower sources refused", err)
	}
}

// TestFileMissing: a missing default file is no file; a missing named
// one, or one that cannot be read, is an error.
func TestFileMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "anvil.yaml")
	if c, err := Load(Options{Flags: testFlags(), File: missing}); err != nil || c.FileFound {
		t.Errorf("missing default file: %v (found %v); want none, no error", err, c != nil && c.FileFound)
	}
	if _, err := Load(Options{Flags: testFlags(), File: missing, FileRequired: true}); err == nil || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Errorf("missing named file: %v; want an error naming it", err)
	}
	if _, err := Load(Options{Flags: testFlags(), File: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "config file") {
		t.Errorf("a directory as the default file: %v; want an error", err)
	}
}

// TestReservedAndStrayVariables: a flag whose variable another command
// reads is refused; such variables are not warned of, a misspelt one is,
// with the setting it meant.
func TestReservedAndStrayVariables(t *testing.T) {
	fs := testFlags()
	fs.String("token", "", "")
	if _, err := (run{}).load(t, fs); err == nil || !strings.Contains(err.Error(), "--token would be ANVIL_TOKEN") {
		t.Errorf("a flag named like a reserved variable: %v; want refused", err)
	}
	c, fs := run{env: map[string]string{"ANVIL_TOKEN": "x", "ANVIL_HTTP_PROT": "1", "ANVIL_CONFIG": "/x", "ANVIL_EMPTY": "", "PATH": "/bin"}}.mustLoad(t)
	want := []string{"ANVIL_HTTP_PROT is set but is no setting of test; ignored (did you mean ANVIL_HTTP_PORT?)"}
	if !slices.Equal(c.Warnings, want) {
		t.Errorf("warnings %q; want %q", c.Warnings, want)
	}
	if fs.Lookup("http-port").Changed {
		t.Error("a misspelt variable set the flag")
	}
}

// TestRedaction: a secret's value appears nowhere in Print's output, from
// whichever source, and the placeholder fed back is refused.
func TestRedaction(t *testing.T) {
	for _, r := range []run{
		{args: []string{"--tls-key=/secret/flag.key"}, env: map[string]string{"ANVIL_TLS_KEY": "/secret/env.key"}, file: "tls-key: /secret/file.key\n"},
		{env: map[string]string{"ANVIL_TLS_KEY": "/secret/env.key"}},
		{file: "tls-key: /secret/file.key\n"},
	} {
		c, _ := r.mustLoad(t)
		var out bytes.Buffer
		if err := c.Print(&out); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "/secret/") {
			t.Errorf("print-config shows a secret:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "tls-key: "+Redacted+" # ") || !strings.Contains(out.String(), "secret, redacted") {
			t.Errorf("print-config does not say tls-key is redacted:\n%s", out.String())
		}
		_, err := run{file: out.String()}.load(t, testFlags())
		if err == nil || !strings.Contains(err.Error(), "tls-key") || !strings.Contains(err.Error(), "placeholder") {
			t.Errorf("print-config's output with a redacted secret fed back: %v; want the placeholder refused", err)
		}
	}
	c, _ := run{}.mustLoad(t)
	if s := setting(t, c, "tls-key"); s.Redacted() {
		t.Error("an empty secret is redacted: nothing to hide, and the output could not be fed back")
	}
}

// mixed sets keys from every source.
var mixed = run{
	args: []string{"--http-port=9000", "--tls-san=a.example,b.example"},
	env:  map[string]string{"ANVIL_HTTP_PORT": "9001", "ANVIL_POLL": "1m30s", "ANVIL_MIRROR": "quay.io=http://m:5000"},
	file: "# site settings\nhttp-port: 9002\nbind: \"true\"\nrate: .inf\nno-dhcp: true\nmax-mib: 64\n",
}

// TestPrintConfig: print-config's output, parsed back, holds every key
// with its effective value, and each value's comment names its source and
// what it overrode.
func TestPrintConfig(t *testing.T) {
	c, _ := mixed.mustLoad(t)
	var out bytes.Buffer
	if err := c.Print(&out); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("print-config output is not YAML: %v\n%s", err, out.String())
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	comments := map[string]string{}
	m := doc.Content[0]
	for i := 0; i < len(m.Content); i += 2 {
		comments[m.Content[i].Value] = m.Content[i+1].LineComment
	}
	if len(got) != len(c.Settings) {
		t.Errorf("print-config has %d keys; want %d:\n%s", len(got), len(c.Settings), out.String())
	}
	for _, s := range c.Settings {
		v := got[s.Flag.Name]
		if items, ok := v.([]any); ok {
			var ss []string
			for _, it := range items {
				ss = append(ss, it.(string))
			}
			v = ss
			if ss == nil {
				v = []string{}
			}
		}
		if i, ok := v.(int); ok {
			v = int64(i)
		}
		if want := s.Value(); !reflect.DeepEqual(v, want) {
			t.Errorf("%s: printed %#v; effective %#v", s.Flag.Name, v, want)
		}
	}
	for key, want := range map[string]string{
		"http-port": "# flag --http-port; overrides env ANVIL_HTTP_PORT, file line 2",
		"tls-san":   "# flag --tls-san",
		"poll":      "# env ANVIL_POLL",
		"bind":      "# file line 3",
		"tls-key":   "# default",
	} {
		if comments[key] != want {
			t.Errorf("%s's comment %q; want %q", key, comments[key], want)
		}
	}
	if !strings.Contains(out.String(), "# Config file: "+c.File+"\n") {
		t.Errorf("print-config does not name the file:\n%s", out.String())
	}
}

// TestRoundTrip: print-config's output fed back as the file, alone (no
// flags, no environment), gives the same effective values.
func TestRoundTrip(t *testing.T) {
	c, first := mixed.mustLoad(t)
	var out bytes.Buffer
	if err := c.Print(&out); err != nil {
		t.Fatal(err)
	}
	_, second := run{file: out.String()}.mustLoad(t)
	first.VisitAll(func(f *pflag.Flag) {
		if got := second.Lookup(f.Name).Value.String(); got != f.Value.String() {
			t.Errorf("%s: %s after the round trip; was %s", f.Name, got, f.Value.String())
		}
	})
}
