package config

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParse feeds any bytes to the file parser over a set with a flag of
// every type a key can hold. It must not panic; an error must name the
// file; a file it accepts must print (--print-config) as a file that it
// accepts again, alone, with the same values — unless a secret was set,
// whose placeholder it must refuse.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",                                  // no file's worth
		"# comments only\n",                 // no keys
		"bind: 10.0.0.2\nhttp-port: 8080\n", // the common case
		"http-port: 0x1F90\nmax-mib: 1_024\nrate: .inf\npoll: 0\n",                    // YAML's number spellings
		"no-dhcp: True\ntls-san: [a, 'b,c', 3]\nmirror:\n  - quay.io=http://m:5000\n", // bools and lists
		"bind: &b x\ntls-key: *b\n",                                                   // aliases; a secret
		"tls-key: <redacted>\n",                                                       // print-config's placeholder fed back
		"htp-port: 1\nbind: {a: 1}\nbind: b\n",                                        // unknown, wrong type, twice
		"a: 1\n---\nb: 2\n",                                                           // two documents
		"- x\n",                                                                       // not a mapping
		"bind: \"\\u00e9\\t\\n\"\n",                                                   // escapes in a string
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := testFlags()
		o := Options{Name: "fuzz", Flags: fs, File: "anvil.yaml", LookupEnv: noEnv, Environ: func() []string { return nil }}
		c, err := load(o, data, true)
		if err != nil {
			if !strings.Contains(err.Error(), "anvil.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		var out bytes.Buffer
		if err := c.Print(&out); err != nil {
			t.Fatalf("print: %v", err)
		}
		again := testFlags()
		_, err = load(Options{Name: "fuzz", Flags: again, File: "anvil.yaml", LookupEnv: noEnv, Environ: func() []string { return nil }}, out.Bytes(), true)
		redacted := false
		for _, s := range c.Settings {
			redacted = redacted || s.Redacted()
		}
		if redacted {
			if err == nil || !strings.Contains(err.Error(), "placeholder") {
				t.Fatalf("a redacted secret fed back: %v; want refused\n%s", err, out.String())
			}
			return
		}
		if err != nil {
			t.Fatalf("print-config's output refused: %v\ninput %q\noutput:\n%s", err, data, out.String())
		}
		for _, s := range c.Settings {
			if got, want := again.Lookup(s.Flag.Name).Value.String(), s.Flag.Value.String(); got != want {
				t.Fatalf("%s: %q after the round trip; was %q\n%s", s.Flag.Name, got, want, out.String())
			}
		}
	})
}

func noEnv(string) (string, bool) { return "", false }
