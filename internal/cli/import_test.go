package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// labInventory returns the example of docs/inventory.md.
func labInventory(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(examples, "inventory", "lab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImportInventory imports twice (the second changes nothing), then
// dry-runs and imports a change of one host's IP and role.
func TestImportInventory(t *testing.T) {
	srv := startServer(t)
	inv := writeFile(t, "lab.yaml", labInventory(t))

	out := mustRun(t, srv, "import", "inventory", inv, "--dry-run")
	if want := "hardware/node1 created (dry run)\nhardware/node2 created (dry run)\nhardware/node3 created (dry run)\n"; out != want {
		t.Errorf("first dry run:\n%s\nwant\n%s", out, want)
	}
	if out := mustRun(t, srv, "get", "hardware"); !strings.Contains(out, "No hardware found") {
		t.Errorf("a dry run stored something:\n%s", out)
	}
	out = mustRun(t, srv, "import", "inventory", inv)
	if strings.Count(out, " created\n") != 3 {
		t.Errorf("first import output:\n%s\nwant 3 created", out)
	}
	out = mustRun(t, srv, "import", "inventory", inv)
	if want := "hardware/node1 unchanged\nhardware/node2 unchanged\nhardware/node3 unchanged\n"; out != want {
		t.Errorf("second import:\n%s\nwant\n%s", out, want)
	}
	if out := mustRun(t, srv, "get", "hardware", "-l", "group.anvil.dev/workers,role=worker", "-o", "name"); out != "hardware/node2\nhardware/node3\n" {
		t.Errorf("get -l group.anvil.dev/workers,role=worker = %q; want node2 and node3", out)
	}

	changed := strings.Replace(labInventory(t), "ip: 10.20.0.13}", "ip: 10.20.0.23, rack: r2}", 1)
	if err := os.WriteFile(inv, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	out = mustRun(t, srv, "import", "inventory", inv, "--dry-run")
	want := `hardware/node1 unchanged (dry run)
hardware/node2 unchanged (dry run)
hardware/node3 configured (dry run)
  metadata.annotations["anvil.dev/inventory-vars"].ip: "10.20.0.13" → "10.20.0.23"
  metadata.annotations["anvil.dev/inventory-vars"].rack: (none) → "r2"
  metadata.labels.rack: (none) → "r2"
  spec.interfaces[0].dhcp.ip.address: "10.20.0.13" → "10.20.0.23"
`
	if out != want {
		t.Errorf("dry run of a change:\n%s\nwant\n%s", out, want)
	}
	if out := mustRun(t, srv, "get", "hardware", "node3", "-o", "yaml"); !strings.Contains(out, "10.20.0.13") {
		t.Errorf("a dry run changed node3:\n%s", out)
	}
	out = mustRun(t, srv, "import", "inventory", inv)
	if want := "hardware/node1 unchanged\nhardware/node2 unchanged\nhardware/node3 configured\n"; out != want {
		t.Errorf("import of a change:\n%s\nwant\n%s", out, want)
	}
	if out := mustRun(t, srv, "get", "hardware", "node3", "-o", "yaml"); !strings.Contains(out, "10.20.0.23") {
		t.Errorf("node3 after import:\n%s", out)
	}
}

func TestImportInventoryRefuses(t *testing.T) {
	srv := startServer(t)
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"missing MAC", "all:\n  hosts:\n    a: {ip: 10.0.0.1}\n", "bad.yaml:3: host a: no mac variable"},
		{"duplicate MAC", "all:\n  hosts:\n    a: {mac: \"52:54:00:00:00:01\"}\n    b: {mac: \"52:54:00:00:00:01\"}\n",
			"bad.yaml:4: host b: mac 52:54:00:00:00:01 is also host a's (line 3)"},
		{"MAC of an existing Hardware", "all:\n  hosts:\n    other: {mac: \"52:54:00:00:10:01\"}\n",
			"default/other: mac 52:54:00:00:10:01 is already Hardware default/node1's"},
	}
	mustRun(t, srv, "import", "inventory", writeFile(t, "lab.yaml", labInventory(t)))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, srv, "import", "inventory", writeFile(t, "bad.yaml", tc.in))
			var exit *ExitError
			if !errors.As(err, &exit) || exit.Code != 1 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("import: err = %v; want exit 1 with %q", err, tc.want)
			}
		})
	}
	if out := mustRun(t, srv, "get", "hardware", "-o", "name"); strings.Count(out, "\n") != 3 {
		t.Errorf("a refused import stored something:\n%s", out)
	}
}
