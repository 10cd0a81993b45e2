package cli

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/test/amtsim"
)

// TestPowerCommandsAMT runs docs/bmc.md's Intel AMT example through the
// CLI and a real server against the test AMT (recorded WS-Management
// exchanges): power status, the netboot Job, describe, and the refusal
// of a persistent boot device.
func TestPowerCommandsAMT(t *testing.T) {
	const password = "cli-test-amt-pw"
	sim := amtsim.Start(t, amtsim.Config{Username: "admin", Password: password}, false)
	t.Cleanup(func() {
		for _, u := range sim.Unmatched() {
			t.Errorf("a request matched no recorded exchange:\n%s", u)
		}
	})
	u, _ := url.Parse(sim.HTTP.URL)
	srv := startServer(t)
	raw, err := os.ReadFile(filepath.Join(examples, "bmc", "intel-amt.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer("port: 16992", "port: "+u.Port(), "password: change-me", "password: "+password).Replace(string(raw))
	file := filepath.Join(t.TempDir(), "bmc.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, srv, "apply", "-f", file)
	if out := mustRun(t, srv, "power", "status", "hardware/node09"); !strings.HasSuffix(out, "hardware/node09 (machine/bmc-node09): power off\n") {
		t.Errorf("power status = %q", out)
	}
	mustRun(t, srv, "apply", "-f", filepath.Join(examples, "bmc", "intel-amt-job.yaml"))
	testtool.WaitFor(t, "job/node09-netboot to complete", func() bool {
		out, _, err := run(t, srv, "get", "jobs", "node09-netboot")
		return err == nil && strings.Contains(out, "Completed")
	})
	if boots := sim.Boots(); !slices.Equal(boots, []string{"pxe"}) || sim.Power() != amtsim.On {
		t.Errorf("the machine booted %q, PowerState %d; want [pxe], on", boots, sim.Power())
	}
	if out := mustRun(t, srv, "describe", "machine/bmc-node09"); !strings.Contains(out, "Intel AMT:   port "+u.Port()+", http") || !strings.Contains(out, "Power:       on") {
		t.Errorf("describe machine:\n%s", out)
	}
	_, _, err = run(t, srv, "bootdev", "pxe", "hardware/node09", "--persistent")
	if err == nil || !strings.Contains(err.Error(), "provider intelAMT: a persistent boot device: not supported by Intel AMT (its boot override lasts one boot)") {
		t.Errorf("bootdev --persistent: %v", err)
	}
}
