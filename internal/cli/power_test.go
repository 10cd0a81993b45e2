package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/bmc/bmctest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// bmcExample writes examples/bmc/bmc.yaml with sim's address and
// password, and returns its path.
func bmcExample(t *testing.T, sim *bmctest.Sim, password string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(examples, "bmc", "bmc.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer("host: 10.0.0.57", "host: 127.0.0.1", "port: 623", "port: "+strconv.Itoa(sim.Port),
		"password: change-me", "password: "+password).Replace(string(raw))
	file := filepath.Join(t.TempDir(), "bmc.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestReprovisionThroughBMC: `anvil reprovision` of a Hardware with a
// bmcRef says the BMC powers the machine, and it does: the netboot Job
// powers the simulator's stand-in machine on after a one-time PXE boot,
// and the machine's record shows the Job.
func TestReprovisionThroughBMC(t *testing.T) {
	const password = "cli-test-bmc-pw"
	sim := bmctest.StartSim(t, "admin", password)
	srv := startServer(t)
	tpl := writeFile(t, "template.yaml", `apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: install}
spec:
  data: |
    version: "0.1"
    name: install
    global_timeout: 600
    tasks:
    - name: os
      worker: "{{.device_1}}"
      actions:
      - {name: reboot, image: reboot, timeout: 30}
`)
	mustRun(t, srv, "apply", "-f", bmcExample(t, sim, password), "-f", tpl)
	out := mustRun(t, srv, "reprovision", "node07", "--template", "install", "--name", "node07-again")
	job := "tink-controller-node07-one-time-netboot"
	want := "machine/bmc-node07: the BMC powers it off, sets a one-time PXE boot and powers it on before the workflow starts (job/" + job + ")\n"
	if !strings.Contains(out, want) {
		t.Errorf("reprovision output lacks %q:\n%s", want, out)
	}
	testtool.WaitFor(t, "job/"+job+" to complete", func() bool {
		out, _, err := run(t, srv, "get", "jobs", job)
		return err == nil && strings.Contains(out, "Completed")
	})
	if sim.MachinePID() == 0 || sim.Boot() != "pxe" {
		t.Errorf("after the netboot job: stand-in pid %d, boot %q; want running, pxe", sim.MachinePID(), sim.Boot())
	}
	record := mustRun(t, srv, "logs", "hardware/node07")
	for _, want := range []string{"bmc     job " + job + " started: 3 task(s) on machine/bmc-node07",
		"task 1 (oneTimeBootDeviceAction pxe (efiBoot)) completed", "bmc     job " + job + " completed: 3 tasks completed"} {
		if !strings.Contains(record, want) {
			t.Errorf("logs hardware/node07 lacks %q:\n%s", want, record)
		}
	}
}

// TestPowerCommands drives a real BMC (OpenIPMI's ipmi_sim) through the
// CLI and a real server: the example's Secret, Machine and Hardware apply,
// `power` and `bootdev` run Jobs that power the simulator's stand-in
// machine and set its next boot, `describe job/NAME` shows the tasks, a
// Rufio-shaped Job applied as a manifest runs too, and the Secret is never
// shown.
func TestPowerCommands(t *testing.T) {
	const password = "cli-test-bmc-pw"
	sim := bmctest.StartSim(t, "admin", password)
	srv := startServer(t)

	out := mustRun(t, srv, "apply", "-f", bmcExample(t, sim, password))
	for _, want := range []string{"secret/bmc-node07 created", "machine/bmc-node07 created", "hardware/node07 created"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output %q lacks %q", out, want)
		}
	}

	if out := mustRun(t, srv, "describe", "hardware/node07"); !strings.Contains(out, "BMC:         machine/bmc-node07") {
		t.Errorf("describe hardware/node07 does not name its BMC:\n%s", out)
	}
	out = mustRun(t, srv, "power", "status", "hardware/node07")
	if !strings.Contains(out, ": Completed\n") || !strings.HasSuffix(out, "hardware/node07 (machine/bmc-node07): power off\n") {
		t.Errorf("power status = %q", out)
	}
	out = mustRun(t, srv, "power", "on", "hardware/node07")
	if !strings.HasSuffix(out, "hardware/node07 (machine/bmc-node07): power on\n") || sim.MachinePID() == 0 {
		t.Errorf("power on = %q; stand-in pid %d", out, sim.MachinePID())
	}
	out = mustRun(t, srv, "bootdev", "pxe", "hardware/node07", "--efi")
	if !strings.Contains(out, ": Completed\n") || sim.Boot() != "pxe" {
		t.Errorf("bootdev pxe = %q; the simulator's boot device %q", out, sim.Boot())
	}
	job := strings.TrimPrefix(strings.SplitN(out, ":", 2)[0], "job/")
	desc := mustRun(t, srv, "describe", "job/"+job)
	for _, want := range []string{"Machine:     default/bmc-node07", "State:       Completed", "oneTimeBootDeviceAction pxe (efiBoot)", "Completed  True"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe job/%s lacks %q:\n%s", job, want, desc)
		}
	}
	out = mustRun(t, srv, "power", "off", "machine/bmc-node07")
	if out != strings.SplitN(out, "\n", 2)[0]+"\nmachine/bmc-node07: power off\n" || sim.MachinePID() != 0 {
		t.Errorf("power off = %q; stand-in pid %d", out, sim.MachinePID())
	}

	// Rufio's own Job shape, applied as a manifest, runs the same way.
	mustRun(t, srv, "apply", "-f", filepath.Join(examples, "bmc", "job.yaml"))
	testtool.WaitFor(t, "job/node07-netboot to complete", func() bool {
		out, _, err := run(t, srv, "get", "jobs", "node07-netboot")
		return err == nil && strings.Contains(out, "Completed")
	})
	if sim.MachinePID() == 0 || sim.Boot() != "pxe" {
		t.Errorf("after the netboot job: stand-in pid %d, boot %q; want running, pxe", sim.MachinePID(), sim.Boot())
	}
	if out := mustRun(t, srv, "get", "machines"); !strings.Contains(out, "bmc-node07") || !strings.Contains(out, " on ") {
		t.Errorf("get machines = %q", out)
	}

	// The Secret: keys only, in every form.
	for _, args := range [][]string{{"get", "secrets"}, {"get", "secret", "bmc-node07", "-o", "yaml"}, {"describe", "secret/bmc-node07"}} {
		out := mustRun(t, srv, args...)
		if strings.Contains(out, password) || !strings.Contains(out, "password") {
			t.Errorf("anvil %s = %q: want the key named, never its value", strings.Join(args, " "), out)
		}
	}

	// A Machine that does not exist: said at once, no Job is created
	// (the executor would wait bmc.DefaultRefGrace for it to be applied).
	_, _, err := run(t, srv, "power", "on", "machine/ghost")
	if err == nil || err.Error() != "machine/ghost: Machine default/ghost: not found" {
		t.Errorf("power on machine/ghost: %v", err)
	}
	_, _, err = run(t, srv, "power", "sideways", "machine/bmc-node07")
	if err == nil || !strings.Contains(err.Error(), `unknown power action "sideways"`) {
		t.Errorf("power sideways: %v", err)
	}
}
