package render_test

import (
	"testing"

	ignition "github.com/coreos/ignition/v2/config"

	"github.com/anvilproj/anvil/internal/render"
)

// FuzzRender renders arbitrary templates of every format with arbitrary
// host values. Properties: no panic; an error comes with no bytes; a
// successful Ignition or Butane rendering is valid Ignition again (round
// trip through Ignition's parser); output never exceeds MaxOutputSize.
func FuzzRender(f *testing.F) {
	seeds := []struct {
		tmpl   string
		format uint8
		host   string
		v      string
	}{
		// Butane with per-host values.
		{"variant: flatcar\nversion: 1.1.0\nstorage:\n  files:\n    - path: /etc/hostname\n      contents:\n        inline: {{ .Hostname }}\n", 0, "node-1", "x"},
		// Ignition JSON with a var.
		{`{"ignition":{"version":"3.4.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":[{{ .Vars.v | toJSON }}]}]}}`, 1, "h", "ssh-ed25519 AAAA"},
		// cloud-config with toYaml and a label.
		{"#cloud-config\nhostname: {{ .Hostname | quote }}\nwrite_files: {{ list (dict \"path\" \"/x\" \"content\" .Vars.v) | toYaml | nindent 2 }}\n", 2, "a: b", "c"},
		// meta-data.
		{"instance-id: {{ .Name }}\nlocal-hostname: {{ .Hostname }}\n", 3, "h", ""},
		// Loops and the bounded helpers.
		{"{{ range until 3 }}{{ . }}{{ end }} {{ seq 1 3 }} {{ repeat 3 .Vars.v }} {{ .ConfigURL .Hostname }}", 4, "n", "ab"},
		// A secret without a store, a missing key, a bad action.
		{"{{ secret \"a\" \"hex32\" }}{{ .Vars.missing }}{{ end }}", 4, "", ""},
	}
	for _, s := range seeds {
		f.Add(s.tmpl, s.format, s.host, s.v)
	}
	f.Fuzz(func(t *testing.T, tmpl string, format uint8, host, v string) {
		cfg := render.Config{Name: "fuzz", Format: render.Formats[int(format)%len(render.Formats)], Template: tmpl}
		data := render.Data{
			Name:      host,
			Hostname:  host,
			MAC:       "52:54:00:00:00:01",
			Labels:    map[string]string{"role": v},
			Vars:      map[string]any{"v": v, "n": len(v)},
			ServerURL: "http://10.0.0.1:7080",
		}
		res, err := render.Render(t.Context(), cfg, data, nil)
		if err != nil {
			if res.Body != nil {
				t.Fatalf("Render returned %d bytes with error %v", len(res.Body), err)
			}
			return
		}
		if len(res.Body) > render.MaxOutputSize {
			t.Fatalf("Render output %d bytes > MaxOutputSize", len(res.Body))
		}
		if cfg.Format == render.FormatButane || cfg.Format == render.FormatIgnition {
			if _, rpt, err := ignition.Parse(res.Body); err != nil {
				t.Fatalf("rendered %s is not valid Ignition: %v\n%s\n%s", cfg.Format, err, rpt, res.Body)
			}
		}
	})
}
