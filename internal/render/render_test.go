package render_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ignition "github.com/coreos/ignition/v2/config"
	"github.com/vincent-petithory/dataurl"

	"github.com/anvilproj/anvil/internal/clock"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/render"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/internal/tmplbudget"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the renderer's output")

// The two machines of the per-host tests: different hostnames, addresses
// and SSH keys, one worker and one control-plane node.
var (
	sshKey1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEhzj9AlwOq9OVKbSnjzzIYndgBdeUcrldThyspVG5NG admin@laptop-1"
	sshKey2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOeVTkopFEE9/IKCocKBWTc9SzkuDhT5h73/x8D7xeA8 admin@laptop-2"
)

func hosts() []render.Data {
	common := map[string]any{"gateway": "10.0.0.1", "apiServer": "10.0.0.10:6443", "domain": "lab.example"}
	host := func(name, mac, ip, role, key string) render.Data {
		vars := map[string]any{"sshKey": key}
		for k, v := range common {
			vars[k] = v
		}
		return render.Data{
			Hardware:  &model.Hardware{},
			Namespace: "default",
			Name:      name,
			Labels:    map[string]string{"role": role},
			Vars:      vars,
			MAC:       mac,
			IP:        ip,
			Hostname:  name,
			ServerURL: "http://10.0.0.1:7080",
		}
	}
	return []render.Data{
		host("node-1", "52:54:00:00:00:01", "10.0.0.11", "worker", sshKey1),
		host("node-2", "52:54:00:00:00:02", "10.0.0.12", "control-plane", sshKey2),
	}
}

// newSecrets opens a Store in a temporary directory with a seeded random
// source and a fixed clock, so golden files are stable.
func newSecrets(t *testing.T) *secrets.Store {
	t.Helper()
	s, err := secrets.Open(secrets.Config{
		Dir:   t.TempDir(),
		Rand:  rand.NewChaCha8([32]byte{'a', 'n', 'v', 'i', 'l'}),
		Clock: clock.NewFake(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the renderer's output (go test -update rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// cloudInitSchema checks a cloud-config with Debian's cloud-init.
func cloudInitSchema(t *testing.T, body []byte) {
	t.Helper()
	bin := testtool.RequireBinary(t, "cloud-init", "cloud-init")
	f := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(f, body, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "schema", "--config-file", f).CombinedOutput()
	if err != nil {
		t.Errorf("cloud-init schema --config-file: %v\n%s\n--- user-data:\n%s", err, out, body)
	}
}

func TestRenderPerHost(t *testing.T) {
	sec := newSecrets(t)
	configs := []struct {
		file   string
		cfg    render.Config
		ctype  string
		golden string // suffix of testdata/golden/HOST-…
	}{
		{"flatcar.bu", render.Config{Name: "ignition", Format: render.FormatButane}, "application/json", "ignition.json"},
		{"user-data.yaml", render.Config{Name: "user-data", Format: render.FormatCloudConfig}, "text/cloud-config; charset=utf-8", "user-data"},
		{"meta-data.yaml", render.Config{Name: "meta-data", Format: render.FormatNoCloudMetaData}, "application/yaml", "meta-data"},
	}
	token, err := sec.Secret("default", "bootstrap-token", secrets.KindKubeadmToken)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range configs {
		c.cfg.Template = readTestdata(t, c.file)
		for _, h := range hosts() {
			t.Run(c.cfg.Name+"/"+h.Hostname, func(t *testing.T) {
				res, err := render.Render(t.Context(), c.cfg, h, sec)
				if err != nil {
					t.Fatalf("Render = %v", err)
				}
				if res.ContentType != c.ctype {
					t.Errorf("ContentType = %q; want %q", res.ContentType, c.ctype)
				}
				if len(res.Warnings) != 0 {
					t.Errorf("Warnings = %v; want none", res.Warnings)
				}
				golden(t, h.Hostname+"-"+c.golden, res.Body)
				switch c.cfg.Format {
				case render.FormatButane:
					checkIgnition(t, res.Body, h, token)
				case render.FormatCloudConfig:
					for _, want := range []string{"hostname: " + h.Hostname, `"` + h.Vars["sshKey"].(string) + `"`, `"` + token + `"`} {
						if !bytes.Contains(res.Body, []byte(want)) {
							t.Errorf("user-data lacks %q:\n%s", want, res.Body)
						}
					}
					cloudInitSchema(t, res.Body)
				case render.FormatNoCloudMetaData:
					want := "instance-id: " + h.Name + "\nlocal-hostname: " + h.Hostname + "\n"
					if string(res.Body) != want {
						t.Errorf("meta-data = %q; want %q", res.Body, want)
					}
				}
			})
		}
	}
}

// checkIgnition parses rendered Ignition with Ignition's parser and checks
// the host's own hostname, SSH key and the shared join token are in it.
func checkIgnition(t *testing.T, body []byte, h render.Data, token string) {
	t.Helper()
	ign, rpt, err := ignition.Parse(body)
	if err != nil {
		t.Fatalf("ignition.Parse = %v\n%s", err, rpt)
	}
	if got := ign.Passwd.Users[0].SSHAuthorizedKeys; len(got) != 1 || string(got[0]) != h.Vars["sshKey"].(string) {
		t.Errorf("core's SSH keys = %v; want [%s]", got, h.Vars["sshKey"])
	}
	var hostname string
	for _, f := range ign.Storage.Files {
		if f.Path == "/etc/hostname" && f.Contents.Source != nil {
			u, err := dataurl.DecodeString(*f.Contents.Source)
			if err != nil {
				t.Fatalf("decode /etc/hostname source %q: %v", *f.Contents.Source, err)
			}
			hostname = string(u.Data)
		}
	}
	if hostname != h.Hostname {
		t.Errorf("/etc/hostname = %q; want %q", hostname, h.Hostname)
	}
	unit := ign.Systemd.Units[0]
	if unit.Contents == nil || !strings.Contains(*unit.Contents, "--token "+token) {
		t.Errorf("kubeadm-join.service lacks the join token %s", token)
	}
	if wantEnabled := h.Labels["role"] == "worker"; unit.Enabled == nil || *unit.Enabled != wantEnabled {
		t.Errorf("kubeadm-join.service enabled = %v; want %v", unit.Enabled, wantEnabled)
	}
}

func TestRenderErrors(t *testing.T) {
	const flatcarHead = "variant: flatcar\nversion: 1.1.0\n"
	const ignHead = `{"ignition":{"version":"3.4.0"},` + "\n"
	h := hosts()[0]
	tests := []struct {
		name      string
		cfg       render.Config
		data      *render.Data // nil: host node-1
		wantStage string
		wantLine  int    // 0: not checked
		wantMsg   string // in the error text
	}{
		{
			name:      "missing var",
			cfg:       render.Config{Format: render.FormatPlain, Template: "a\nkey: {{ .Vars.sshKeyTypo }}\n"},
			wantStage: "execute", wantLine: 2, wantMsg: `map has no entry for key "sshKeyTypo"`,
		},
		{
			name:      "missing label",
			cfg:       render.Config{Format: render.FormatPlain, Template: "{{ .Labels.rack }}"},
			wantStage: "execute", wantLine: 1, wantMsg: `map has no entry for key "rack"`,
		},
		{
			name:      "unknown field",
			cfg:       render.Config{Format: render.FormatPlain, Template: "\n\n{{ .Hostnme }}"},
			wantStage: "execute", wantLine: 3, wantMsg: "can't evaluate field Hostnme",
		},
		{
			name:      "template syntax",
			cfg:       render.Config{Format: render.FormatPlain, Template: "ok\n{{ if }}\n"},
			wantStage: "template", wantLine: 2, wantMsg: "missing value for if",
		},
		{
			name:      "undefined function",
			cfg:       render.Config{Format: render.FormatPlain, Template: "{{ env \"HOME\" }}"},
			wantStage: "template", wantLine: 1, wantMsg: `function "env" not defined`,
		},
		{
			name:      "butane bad yaml",
			cfg:       render.Config{Format: render.FormatButane, Template: flatcarHead + "storage: [\n"},
			wantStage: "butane", wantLine: 3, wantMsg: "did not find expected node content",
		},
		{
			name:      "butane unknown field",
			cfg:       render.Config{Format: render.FormatButane, Template: flatcarHead + "passwd:\n  userz: []\n"},
			wantStage: "butane", wantLine: 4, wantMsg: "Unused key userz",
		},
		{
			name:      "butane wrong version",
			cfg:       render.Config{Format: render.FormatButane, Template: "variant: flatcar\nversion: 9.9.9\n"},
			wantStage: "butane", wantLine: 2, wantMsg: "No translator exists for variant flatcar with version 9.9.9",
		},
		{
			name:      "butane unknown variant",
			cfg:       render.Config{Format: render.FormatButane, Template: "variant: flatcat\nversion: 1.1.0\n"},
			wantStage: "butane", wantLine: 2, wantMsg: "No translator exists for variant flatcat",
		},
		{
			name:      "butane no variant",
			cfg:       render.Config{Format: render.FormatButane, Template: "version: 1.1.0\n"},
			wantStage: "butane", wantMsg: "variant",
		},
		{
			name:      "butane relative path",
			cfg:       render.Config{Format: render.FormatButane, Template: flatcarHead + "storage:\n  files:\n    - path: etc/hostname\n"},
			wantStage: "butane", wantLine: 5, wantMsg: "path not absolute",
		},
		{
			name:      "butane decimal mode",
			cfg:       render.Config{Format: render.FormatButane, Template: flatcarHead + "storage:\n  files:\n    - path: /etc/x\n      mode: 644\n"},
			wantStage: "butane", wantLine: 6, wantMsg: "leading zero",
		},
		{
			name:      "butane local file",
			cfg:       render.Config{Format: render.FormatButane, Template: flatcarHead + "storage:\n  files:\n    - path: /etc/x\n      contents:\n        local: /etc/shadow\n"},
			wantStage: "butane", wantLine: 7, wantMsg: "files directory",
		},
		{
			name:      "ignition relative path",
			cfg:       render.Config{Format: render.FormatIgnition, Template: ignHead + `"storage":{"files":[{"path":"etc/x"}]}}`},
			wantStage: "ignition", wantLine: 2, wantMsg: "path not absolute",
		},
		{
			name:      "ignition invalid mode",
			cfg:       render.Config{Format: render.FormatIgnition, Template: ignHead + `"storage":{"files":[{"path":"/etc/x","mode":99999}]}}`},
			wantStage: "ignition", wantLine: 2, wantMsg: "illegal file mode",
		},
		{
			name:      "ignition unsupported version",
			cfg:       render.Config{Format: render.FormatIgnition, Template: `{"ignition":{"version":"2.2.0"}}`},
			wantStage: "ignition", wantLine: 1, wantMsg: "unsupported config version",
		},
		{
			name:      "ignition not json",
			cfg:       render.Config{Format: render.FormatIgnition, Template: "variant: flatcar\n"},
			wantStage: "ignition", wantMsg: "",
		},
		{
			name:      "cloud-config without header",
			cfg:       render.Config{Format: render.FormatCloudConfig, Template: "hostname: {{ .Hostname }}\n"},
			wantStage: "cloud-config", wantLine: 1, wantMsg: `"#cloud-config"`,
		},
		{
			name:      "cloud-config not a mapping",
			cfg:       render.Config{Format: render.FormatCloudConfig, Template: "#cloud-config\n- hostname\n"},
			wantStage: "cloud-config", wantLine: 2, wantMsg: "cannot unmarshal !!seq",
		},
		{
			name:      "cloud-config duplicate key",
			cfg:       render.Config{Format: render.FormatCloudConfig, Template: "#cloud-config\nhostname: a\nhostname: b\n"},
			wantStage: "cloud-config", wantLine: 3, wantMsg: `mapping key "hostname" already defined at line 2`,
		},
		{
			name:      "meta-data bad yaml",
			cfg:       render.Config{Format: render.FormatNoCloudMetaData, Template: "instance-id: {{ .Name }}\n  local-hostname: x: y\n"},
			wantStage: "meta-data", wantLine: 2, wantMsg: "mapping values are not allowed",
		},
		{
			name:      "template too large",
			cfg:       render.Config{Format: render.FormatPlain, Template: strings.Repeat("x", render.MaxTemplateSize+1)},
			wantStage: "size", wantMsg: "more than the 1 MiB limit",
		},
		{
			name:      "output too large",
			cfg:       render.Config{Format: render.FormatPlain, Template: "{{ range 5000 }}" + strings.Repeat("x", 1024) + "{{ end }}"},
			wantStage: "budget", wantMsg: "output budget: output is more than 4194304 bytes",
		},
		{
			name:      "repeat too large",
			cfg:       render.Config{Format: render.FormatPlain, Template: `{{ repeat 100000000 "xx" }}`},
			wantStage: "budget", wantLine: 1, wantMsg: "value budget: repeat: 100000000 × 2 bytes",
		},
		{
			name:      "range too long",
			cfg:       render.Config{Format: render.FormatPlain, Template: "\n{{ range 100000000000 }}{{ end }}"},
			wantStage: "budget", wantLine: 2, wantMsg: "steps budget: range over 100000000000",
		},
		{
			name: "computed range too long",
			cfg:  render.Config{Format: render.FormatPlain, Template: "\n\n{{ range (atoi \"100000000000\") }}{{ end }}"},
			// The step budget, or on a slow (race-instrumented, busy)
			// machine the time budget first: either stops it.
			wantStage: "budget", wantLine: 3, wantMsg: "template exceeded its",
		},
		{
			name:      "recursive template",
			cfg:       render.Config{Format: render.FormatPlain, Template: `{{ define "r" }}{{ template "r" }}{{ end }}{{ template "r" }}`},
			wantStage: "budget", wantLine: 1, wantMsg: "depth budget",
		},
		{
			name:      "unknown format",
			cfg:       render.Config{Format: "kickstart", Template: "x"},
			wantStage: "format", wantMsg: `unknown format "kickstart"`,
		},
		{
			name:      "secret without a store",
			cfg:       render.Config{Format: render.FormatPlain, Template: `{{ secret "t" "hex32" }}`},
			wantStage: "execute", wantLine: 1, wantMsg: "no secret store",
		},
		{
			name:      "nil hardware",
			cfg:       render.Config{Format: render.FormatPlain, Template: `{{ .Hardware.Spec.AgentID }}`},
			data:      &render.Data{},
			wantStage: "execute", wantLine: 1, wantMsg: "nil pointer",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Name = "cfg"
			data := h
			if tc.data != nil {
				data = *tc.data
			}
			var sec render.SecretSource
			if !strings.Contains(tc.name, "without a store") {
				sec = newSecrets(t)
			}
			res, err := render.Render(t.Context(), tc.cfg, data, sec)
			if err == nil {
				t.Fatalf("Render = %q, nil; want an error", res.Body)
			}
			if res.Body != nil {
				t.Errorf("Render returned %d bytes with its error; want none", len(res.Body))
			}
			var re *render.Error
			if !errors.As(err, &re) {
				t.Fatalf("Render error %T %v; want *render.Error", err, err)
			}
			if re.Stage != tc.wantStage {
				t.Errorf("Stage = %q; want %q (%v)", re.Stage, tc.wantStage, err)
			}
			if tc.wantLine != 0 && re.Problems[0].Line != tc.wantLine {
				t.Errorf("Problems[0].Line = %d; want %d (%v)", re.Problems[0].Line, tc.wantLine, err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error = %q; want it to contain %q", err, tc.wantMsg)
			}
			if !strings.Contains(err.Error(), `config "cfg"`) {
				t.Errorf("error = %q; want it to name the config", err)
			}
			if tc.wantStage == "size" && !errors.Is(err, render.ErrTooLarge) {
				t.Errorf("error = %v; want it to wrap ErrTooLarge", err)
			}
			if tc.wantStage == "budget" && !errors.Is(err, tmplbudget.ErrExceeded) {
				t.Errorf("error = %v; want it to wrap tmplbudget.ErrExceeded", err)
			}
		})
	}
}

// TestRenderStopsWithItsContext: a config whose request went away stops
// rendering, with the context's error.
func TestRenderStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cfg := render.Config{Name: "x", Format: render.FormatPlain, Template: `{{ range 10 }}x{{ end }}`}
	if _, err := render.Render(ctx, cfg, hosts()[0], nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Render with an ended context = %v; want context.Canceled", err)
	}
}

func TestRenderSecretKindConflict(t *testing.T) {
	sec := newSecrets(t)
	cfg := render.Config{Name: "x", Format: render.FormatPlain, Template: `{{ secret "k" "hex32" }} {{ secret "k" "password" }}`}
	_, err := render.Render(t.Context(), cfg, hosts()[0], sec)
	if err == nil || !strings.Contains(err.Error(), "is of kind hex32, not password") {
		t.Errorf("Render = %v; want a kind conflict", err)
	}
}

func TestRenderSSHHostKey(t *testing.T) {
	sec := newSecrets(t)
	cfg := render.Config{Name: "x", Format: render.FormatCloudConfig, Template: "#cloud-config\n" +
		"ssh_keys:\n  ed25519_private: |\n{{ secret \"host-key\" \"ssh-ed25519\" | indent 4 }}\n" +
		"  ed25519_public: {{ secret \"host-key\" \"ssh-ed25519\" | sshPublicKey | quote }}\n"}
	res, err := render.Render(t.Context(), cfg, hosts()[0], sec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(res.Body, []byte("BEGIN OPENSSH PRIVATE KEY")) || !bytes.Contains(res.Body, []byte(`ed25519_public: "ssh-ed25519 AAAA`)) {
		t.Errorf("user-data lacks the host key pair:\n%s", res.Body)
	}
	cloudInitSchema(t, res.Body)
}

func TestConfigURL(t *testing.T) {
	d := render.Data{ServerURL: "http://10.0.0.1:7080/", MAC: "52:54:00:00:00:01"}
	tests := []struct{ name, want string }{
		{"ignition", "http://10.0.0.1:7080/configs/52:54:00:00:00:01/ignition"},
		{"", "http://10.0.0.1:7080/configs/52:54:00:00:00:01/"}, // the NoCloud prefix
		{"a b", "http://10.0.0.1:7080/configs/52:54:00:00:00:01/a%20b"},
	}
	for _, tc := range tests {
		if got := d.ConfigURL(tc.name); got != tc.want {
			t.Errorf("ConfigURL(%q) = %q; want %q", tc.name, got, tc.want)
		}
	}
}
