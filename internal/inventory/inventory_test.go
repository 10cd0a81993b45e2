package inventory

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
)

// labFile is the example of docs/inventory.md.
const labFile = "../../examples/inventory/lab.yaml"

func TestConvertLab(t *testing.T) {
	lab, err := os.ReadFile(labFile)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Convert("lab.yaml", lab, Options{AllowPXE: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hardware) != 3 {
		t.Fatalf("Convert made %d Hardware; want 3", len(res.Hardware))
	}
	hw := res.Hardware[1]
	want := &model.Hardware{
		TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindHardware},
		ObjectMeta: model.ObjectMeta{Name: "node2", Namespace: "default",
			Labels:      map[string]string{"role": "worker", "group.anvil.dev/workers": "true"},
			Annotations: map[string]string{VarsAnnotation: `{"disk":"/dev/vda","domain":"lab.example","gateway":"10.20.0.254","ip":"10.20.0.12","mac":"52:54:00:00:10:02","netmask":"255.255.255.0","role":"worker"}`}},
		Spec: model.HardwareSpec{
			Interfaces: []model.Interface{{
				Netboot: &model.Netboot{AllowPXE: model.Bool(true)},
				DHCP: &model.DHCP{MAC: "52:54:00:00:10:02", Hostname: "node2", DomainName: "lab.example",
					IP: &model.IP{Address: "10.20.0.12", Netmask: "255.255.255.0", Gateway: "10.20.0.254"}},
			}},
			Disks: []model.Disk{{Device: "/dev/vda"}},
		},
	}
	if !reflect.DeepEqual(hw, want) {
		g, _ := json.Marshal(hw)
		w, _ := json.Marshal(want)
		t.Errorf("node2 =\n%s\nwant\n%s", g, w)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		host   string
		vars   map[string]any
		groups []string
	}{
		{
			name: "host over child over parent over all",
			in: `all:
  vars: {a: all, b: all, c: all, d: all}
  children:
    parent:
      vars: {b: parent, c: parent, d: parent}
      children:
        child:
          vars: {c: child, d: child}
          hosts:
            h1: {d: host, mac: "52:54:00:00:00:01"}
`,
			host:   "h1",
			vars:   map[string]any{"a": "all", "b": "parent", "c": "child", "d": "host", "mac": "52:54:00:00:00:01"},
			groups: []string{"child", "parent"},
		},
		{
			name: "same depth: later name wins, unless ansible_group_priority",
			in: `all:
  children:
    alpha: {vars: {x: alpha, y: alpha, ansible_group_priority: 5}, hosts: {h1: }}
    beta: {vars: {x: beta, y: beta}, hosts: {h1: }}
`,
			host:   "h1",
			vars:   map[string]any{"x": "alpha", "y": "alpha"},
			groups: []string{"alpha", "beta"},
		},
		{
			name: "host in two groups: definitions merge, later wins",
			in: `all:
  children:
    a: {hosts: {h1: {mac: "52:54:00:00:00:01", x: 1}}}
    b: {hosts: {h1: {x: 2, y: true}}}
`,
			host:   "h1",
			vars:   map[string]any{"mac": "52:54:00:00:00:01", "x": 2, "y": true},
			groups: []string{"a", "b"},
		},
		{
			name: "null hosts, top-level groups without all, deepest path counts",
			in: `top:
  vars: {v: top}
  hosts:
    h1:
  children:
    mid:
      children:
        leaf: {vars: {v: leaf}}
leaf:
  hosts: {h1: null}
`,
			host:   "h1",
			vars:   map[string]any{"v": "leaf"},
			groups: []string{"leaf", "mid", "top"},
		},
		{
			name: "anchors and nested values",
			in: `all:
  vars:
    ntp: &ntp [ntp1, ntp2]
  hosts:
    h1: {servers: *ntp, cfg: {a: 1.5, b: null}}
`,
			host: "h1",
			vars: map[string]any{"ntp": []any{"ntp1", "ntp2"}, "servers": []any{"ntp1", "ntp2"},
				"cfg": map[string]any{"a": 1.5, "b": nil}},
			groups: nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hosts, err := Parse("inv.yaml", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var h *Host
			for i := range hosts {
				if hosts[i].Name == tc.host {
					h = &hosts[i]
				}
			}
			if h == nil {
				t.Fatalf("Parse: no host %s in %+v", tc.host, hosts)
			}
			if !reflect.DeepEqual(h.Vars, tc.vars) {
				t.Errorf("Parse vars = %#v; want %#v", h.Vars, tc.vars)
			}
			if !reflect.DeepEqual(h.Groups, tc.groups) {
				t.Errorf("Parse groups = %q; want %q", h.Groups, tc.groups)
			}
		})
	}
}

func TestConvertErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error, in order of lines
	}{
		{
			name: "missing MAC names host and line",
			in:   "all:\n  hosts:\n    good: {mac: \"52:54:00:00:00:01\"}\n    bad: {ip: 10.0.0.1}\n",
			want: []string{"inv.yaml:4: host bad: no mac variable"},
		},
		{
			name: "duplicate MAC in another spelling",
			in:   "all:\n  hosts:\n    a: {mac: \"52:54:00:00:00:01\"}\n    b: {mac: \"52-54-00-00-00-01\"}\n",
			want: []string{"inv.yaml:4: host b: mac 52-54-00-00-00-01 is also host a's (line 3)"},
		},
		{
			name: "duplicate IP",
			in:   "all:\n  hosts:\n    a: {mac: \"52:54:00:00:00:01\", ip: 10.0.0.1}\n    b: {mac: \"52:54:00:00:00:02\", ip: 10.0.0.1}\n",
			want: []string{"inv.yaml:4: host b: ip 10.0.0.1 is also host a's (line 3)"},
		},
		{
			name: "every problem at once",
			in:   "all:\n  hosts:\n    a: {mac: nope}\n    b: {mac: \"52:54:00:00:00:02\", ip: 10.0.0.300}\n    c: {}\n",
			want: []string{"inv.yaml:3: host a: spec.interfaces[0].dhcp.mac", "inv.yaml:4: host b: spec.interfaces[0].dhcp.ip.address",
				"inv.yaml:5: host c: no mac"},
		},
		{
			name: "invalid host name",
			in:   "all:\n  hosts:\n    Node_1: {mac: \"52:54:00:00:00:01\"}\n",
			want: []string{"inv.yaml:3: host Node_1: metadata.name"},
		},
		{
			name: "unknown group key",
			in:   "all:\n  host:\n    a: {mac: \"52:54:00:00:00:01\"}\n",
			want: []string{`inv.yaml:2: group all: unknown key "host"`},
		},
		{
			name: "cycle",
			in:   "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a:\n",
			want: []string{"groups are their own children: all → a → b → a"},
		},
		{
			name: "not a mapping",
			in:   "- a\n- b\n",
			want: []string{"inv.yaml:1: an inventory is a mapping"},
		},
		{
			name: "mac not scalar",
			in:   "all:\n  hosts:\n    a: {mac: [1, 2]}\n",
			want: []string{"inv.yaml:3: host a: mac must be a single value"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Convert("inv.yaml", []byte(tc.in), Options{})
			if err == nil {
				t.Fatalf("Convert(%q) = nil error; want %q", tc.in, tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("Convert error =\n%v\nwant %d lines: %q", err, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("Convert error line %d = %q; want it to contain %q", i+1, lines[i], w)
				}
			}
		})
	}
}

func TestLabels(t *testing.T) {
	in := `all:
  vars:
    rack: r1
    site: "lab example"
    weight: 10
    ssd: true
    long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
    "bad key": x
    ntp: [a, b]
    ansible_user: core
    ansible_password: hunter2
    empty:
  children:
    "web servers":
      hosts:
        h1: {mac: "52:54:00:00:00:01", ip: 10.0.0.5/24, hostname: h1.lab, disks: [/dev/sda, /dev/sdb]}
    _k8s_:
      children:
        gpu.nodes: {hosts: {h1: }}
`
	res, err := Convert("inv.yaml", []byte(in), Options{Namespace: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	hw := res.Hardware[0]
	wantLabels := map[string]string{
		"rack": "r1", "weight": "10", "ssd": "true",
		"group.anvil.dev/web-servers": "true", "group.anvil.dev/k8s": "true", "group.anvil.dev/gpu.nodes": "true",
	}
	if !reflect.DeepEqual(hw.Labels, wantLabels) {
		t.Errorf("labels = %v; want %v", hw.Labels, wantLabels)
	}
	var vars map[string]any
	if err := json.Unmarshal([]byte(hw.Annotations[VarsAnnotation]), &vars); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"site", "long", "bad key", "ntp", "ansible_user", "empty", "rack", "mac", "ip", "disks", "hostname"} {
		if _, ok := vars[k]; !ok {
			t.Errorf("annotation lacks %q: %v", k, vars)
		}
	}
	for _, k := range []string{"ansible_password"} {
		if _, ok := vars[k]; ok {
			t.Errorf("annotation has %q: %v", k, vars)
		}
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "ansible_password") {
		t.Errorf("warnings = %q; want one about ansible_password", res.Warnings)
	}
	d := hw.Spec.Interfaces[0].DHCP
	if d.IP.Address != "10.0.0.5" || d.IP.Netmask != "255.255.255.0" || d.Hostname != "h1.lab" || hw.Namespace != "lab" {
		t.Errorf("dhcp = %+v ip %+v ns %s; want 10.0.0.5/255.255.255.0, hostname h1.lab, namespace lab", d, d.IP, hw.Namespace)
	}
	if got := hw.Spec.Disks; len(got) != 2 || got[1].Device != "/dev/sdb" {
		t.Errorf("disks = %v; want /dev/sda, /dev/sdb", got)
	}
	if *hw.Spec.Interfaces[0].Netboot.AllowPXE {
		t.Error("allowPXE = true with Options.AllowPXE false")
	}
}

// TestVarsForTemplates: every variable of a host reaches templates as
// .Vars, the ones Build also maps onto the spec included, with its YAML
// type. The inventory is docs/guide-flatcar.md's, whose Butane template
// reads .Vars.gateway: the variables the spec took used to be left out, and
// the guide's config failed with `map has no entry for key "gateway"`.
func TestVarsForTemplates(t *testing.T) {
	in := `all:
  vars: {gateway: 10.0.0.254, netmask: 255.255.255.0, apiServer: "10.0.0.10:6443"}
  children:
    workers:
      vars: {role: worker, port: 6443, disks: [/dev/vda]}
      hosts:
        node-1: {mac: "52:54:00:00:00:01", ip: 10.0.0.21, domain: lab.example, sshKey: "ssh-ed25519 AAAA... you@laptop"}
`
	res, err := Convert("lab.yaml", []byte(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	vars, err := res.Hardware[0].Vars()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"gateway": "10.0.0.254", "netmask": "255.255.255.0", "apiServer": "10.0.0.10:6443",
		"role": "worker", "port": float64(6443), "disks": []any{"/dev/vda"},
		"mac": "52:54:00:00:00:01", "ip": "10.0.0.21", "domain": "lab.example",
		"sshKey": "ssh-ed25519 AAAA... you@laptop",
	}
	if !reflect.DeepEqual(vars, want) {
		t.Errorf("Vars() = %v; want %v", vars, want)
	}
	// The spec still gets what it maps, and only role becomes a label.
	d := res.Hardware[0].Spec.Interfaces[0].DHCP
	if d.IP.Gateway != "10.0.0.254" || d.DomainName != "lab.example" {
		t.Errorf("dhcp = %+v ip %+v; want gateway 10.0.0.254, domain lab.example", d, d.IP)
	}
	if got := res.Hardware[0].Labels; !reflect.DeepEqual(got, map[string]string{"role": "worker", "port": "6443", "group.anvil.dev/workers": "true"}) {
		t.Errorf("labels = %v; want role, port and the group", got)
	}
}

func TestSanitizeLabelName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"workers", "workers"},
		{"web servers", "web-servers"},
		{"_private_", "private"},
		{"--", ""},
		{"größe", "gr----e"},
		{strings.Repeat("a", 62) + "_b", strings.Repeat("a", 62)},
	}
	for _, tc := range tests {
		if got := SanitizeLabelName(tc.in); got != tc.want {
			t.Errorf("SanitizeLabelName(%q) = %q; want %q", tc.in, got, tc.want)
		}
		if got := SanitizeLabelName(tc.in); got != "" && checkLabelName(got) != "" {
			t.Errorf("SanitizeLabelName(%q) = %q, not a valid label name: %s", tc.in, got, checkLabelName(got))
		}
	}
}

// FuzzConvert: no inventory makes Convert panic, and whatever it accepts
// validates as Hardware with valid label keys.
func FuzzConvert(f *testing.F) {
	if lab, err := os.ReadFile(labFile); err == nil {
		f.Add(string(lab)) // the documented example
	}
	f.Add("all:\n  hosts:\n    h: {mac: x}\n") // a bad MAC
	f.Add("a: &x {children: {b: *x}}\n")       // an alias loop
	f.Add("all:\n  children:\n    'g g': {hosts: {h1: {mac: '52:54:00:00:00:01', k: v}}}\n")
	f.Fuzz(func(t *testing.T, in string) {
		res, err := Convert("fuzz.yaml", []byte(in), Options{})
		if err != nil {
			return
		}
		for _, hw := range res.Hardware {
			if err := model.Validate(hw); err != nil {
				t.Errorf("Convert accepted %q but its Hardware is invalid: %v", in, err)
			}
			for k, v := range hw.Labels {
				name := strings.TrimPrefix(k, GroupLabelPrefix)
				if checkLabelName(name) != "" || checkLabelValue(v) != "" {
					t.Errorf("label %s=%s invalid", k, v)
				}
			}
		}
	})
}
