package main

import (
	"strings"
	"testing"
)

const line = `{"test":"install","floor_s":6.2,"write_s":0.4,"agent_s":5,"success_s":9,"margin_s":2.4,"installed_s":20,"server":["bin/anvil","serve","--bind","10.77.0.1"]}`

func TestParse(t *testing.T) {
	ts, err := parse(strings.NewReader(line + "\n" + strings.Replace(line, `"margin_s":2.4`, `"margin_s":3.0`, 1) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Margin != 2.4 || ts[1].Margin != 3.0 || ts[0].Server[1] != "serve" {
		t.Errorf("parsed %+v", ts)
	}
	var b strings.Builder
	if med := printTable(&b, ts); med != 2.7 || !strings.Contains(b.String(), "MISSED") {
		t.Errorf("median %v, table:\n%s", med, b.String())
	}
	for name, in := range map[string]string{
		"empty":     "",
		"not JSON":  "floor 6.2\n",
		"no server": `{"test":"install","margin_s":1}` + "\n",
	} {
		if _, err := parse(strings.NewReader(in)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(line + "\n")
	f.Add("{}\n{\n")
	f.Fuzz(func(t *testing.T, in string) {
		ts, err := parse(strings.NewReader(in))
		if err == nil && (len(ts) == 0 || len(ts[0].Server) < 2) {
			t.Errorf("accepted %q as %+v", in, ts)
		}
	})
}
