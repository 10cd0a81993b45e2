package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/server"
)

const enrollTestdata = "testdata/enroll"

// TestEnroll drives auto-enrolment through the CLI against a real server
// whose controller is off, so each pass is the command's: the dry run
// names each discovered machine's rule (and the other that also
// matched), a pass enrols, a second pass does nothing more, and a rule
// naming an attribute that does not exist is refused at apply.
func TestEnroll(t *testing.T) {
	srv := startServerWith(t, func(c *server.Config) { c.DisableEnroll = true })
	mustRun(t, srv, "apply", "-f", examples+"/template.yaml", "-f", examples+"/enrolment/rulesets.yaml", "-f", enrollTestdata+"/discovered.yaml")

	dry := mustRun(t, srv, "enroll", "--dry-run")
	for _, want := range []string{
		"discovery-4c4c4544-0042   would-enrol   default/dell-r650#rules[0]   enroll-discovery-4c4c4544-0042",
		"discovery-hpe-01          would-enrol   default/any-uefi#rules[0]    enroll-discovery-hpe-01",
		"discovery-old-01          no-match      -                            -",
		"discovery-4c4c4544-0042: also matched default/any-uefi#rules[0] (only the first rule acts)",
		"discovery-old-01: no rule of the 2 workflow rule set(s) of namespace default matches it",
	} {
		if !strings.Contains(dry, want) {
			t.Errorf("enroll --dry-run output lacks %q:\n%s", want, dry)
		}
	}
	if out := mustRun(t, srv, "get", "workflows"); !strings.Contains(out, "No workflow found") {
		t.Fatalf("a dry run made workflows:\n%s", out)
	}

	first := mustRun(t, srv, "enroll")
	if strings.Count(first, " enrolled ") != 2 {
		t.Errorf("first pass: want 2 enrolled:\n%s", first)
	}
	// The machine's record says which rule enrolled it (written
	// asynchronously: wait for it).
	deadline := time.Now().Add(30 * time.Second)
	for rec := ""; !strings.Contains(rec, "enrolled by default/dell-r650#rules[0]: workflow enroll-discovery-4c4c4544-0042 from template debian-raw"); {
		if time.Now().After(deadline) {
			t.Fatalf("the machine's record lacks the enrolment:\n%s", rec)
		}
		time.Sleep(20 * time.Millisecond)
		rec = mustRun(t, srv, "logs", "hardware/discovery-4c4c4544-0042")
	}
	second := mustRun(t, srv, "enroll")
	if strings.Count(second, "already-enrolled") != 2 || strings.Contains(second, " enrolled ") {
		t.Errorf("second pass: want 2 already-enrolled and none enrolled:\n%s", second)
	}
	wfs := mustRun(t, srv, "get", "workflows")
	if n := strings.Count(wfs, "enroll-discovery-"); n != 2 {
		t.Errorf("%d enrolment workflows, want 2:\n%s", n, wfs)
	}
	wf := mustRun(t, srv, "get", "workflow", "enroll-discovery-4c4c4544-0042", "-o", "yaml")
	for _, want := range []string{"anvil.dev/enrolled-by: default/dell-r650#rules[0]", "device_1: a8:a1:59:d0:e2:52", "role: storage", "templateRef: debian-raw"} {
		if !strings.Contains(wf, want) {
			t.Errorf("enrolment workflow lacks %q:\n%s", want, wf)
		}
	}
	if wf := mustRun(t, srv, "get", "workflow", "enroll-discovery-hpe-01", "-o", "yaml"); !strings.Contains(wf, "disabled: true") {
		t.Errorf("any-uefi's workflow is not disabled:\n%s", wf)
	}

	list := mustRun(t, srv, "get", "wrs")
	if !strings.Contains(list, "dell-r650   100        2       debian-raw") {
		t.Errorf("get wrs:\n%s", list)
	}
	desc := mustRun(t, srv, "describe", "workflowruleset", "dell-r650")
	for _, want := range []string{"Priority:    100", "Selector:    site=lab", "[1] {\"baseboard\"", "device_1 = the machine's first MAC, role = storage",
		"Enrolled:    enroll-discovery-4c4c4544-0042 (rules[0])"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe lacks %q:\n%s", want, desc)
		}
	}

	_, errOut, err := run(t, srv, "apply", "-f", enrollTestdata+"/bad-ruleset.yaml")
	if err == nil {
		t.Fatal("a rule set naming chassis.manufacturer was applied")
	}
	msg := errOut + err.Error()
	for _, want := range []string{"spec.rules[1]", `chassis.manufacturer: unknown attribute "manufacturer" (chassis has: serial, vendor)`} {
		if !strings.Contains(msg, want) {
			t.Errorf("apply refusal lacks %q: %s", want, msg)
		}
	}
}

// TestEnrollController: with the server's controller on, a discovered
// machine applied after its rule set is enrolled without a command.
func TestEnrollController(t *testing.T) {
	srv := startServer(t)
	mustRun(t, srv, "apply", "-f", examples+"/template.yaml", "-f", examples+"/enrolment/rulesets.yaml")
	mustRun(t, srv, "apply", "-f", enrollTestdata+"/discovered.yaml")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := mustRun(t, srv, "get", "workflows")
		if strings.Count(out, "enroll-discovery-") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller did not enrol both machines in 30s:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := mustRun(t, srv, "enroll", "--dry-run")
	if strings.Count(out, "already-enrolled") != 2 {
		t.Errorf("after the controller, dry run:\n%s", out)
	}
}
