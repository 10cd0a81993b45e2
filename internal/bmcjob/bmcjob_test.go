package bmcjob_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/bmcjob"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/wire"
)

// dnsSubdomain is RFC 1123's subdomain, what a Job's name must be.
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// TestPowerJob: the Job is what the executor and the API take — one
// power task on the Machine, labelled with its maker — and it travels
// through the API's message unchanged and valid.
func TestPowerJob(t *testing.T) {
	j, err := bmcjob.Power("acme", "bmc-node07", model.PowerActionCycle, bmcjob.CreatedByUI)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(j.Name, "bmc-node07-power-cycle-") || !dnsSubdomain.MatchString(j.Name) {
		t.Errorf("name %q; want bmc-node07-power-cycle-SUFFIX, a DNS subdomain", j.Name)
	}
	if j.Labels[bmcjob.CreatedByLabel] != "anvil-ui" || j.Spec.MachineRef != (model.ObjectReference{Name: "bmc-node07", Namespace: "acme"}) ||
		len(j.Spec.Tasks) != 1 || *j.Spec.Tasks[0].PowerAction != "cycle" {
		t.Errorf("job = %+v", j)
	}
	msg, err := bmcjob.Message(j)
	if err != nil {
		t.Fatal(err)
	}
	back, err := wire.Decode(model.KindJob, msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.Validate(back); err != nil {
		t.Errorf("the Job as the API decodes it is invalid: %v", err)
	}
	if got := back.(*model.Job); got.Name != j.Name || got.Spec.Tasks[0].Describe() != "powerAction cycle" {
		t.Errorf("decoded %+v; want the same job", got)
	}
	if j2, _ := bmcjob.Power("acme", "bmc-node07", model.PowerActionCycle, bmcjob.CreatedByUI); j2.Name == j.Name {
		t.Errorf("two jobs got the same name %q", j.Name)
	}
}

func TestPowerRefusesUnknownAction(t *testing.T) {
	_, err := bmcjob.Power("acme", "m", "sideways", bmcjob.CreatedByCLI)
	if err == nil || !strings.Contains(err.Error(), `unknown power action "sideways" (want one of on, off, soft, cycle, reset, status)`) {
		t.Errorf("Power(sideways) = %v; want the known actions named", err)
	}
}

// TestLongMachineName: a Machine name near the limit still gives a name
// of at most 253 characters that is a DNS subdomain.
func TestLongMachineName(t *testing.T) {
	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 190)
	j := bmcjob.New("default", long, "bootdev-pxe", bmcjob.CreatedByCLI, model.BMCAction{})
	if len(j.Name) > 253 || !dnsSubdomain.MatchString(j.Name) {
		t.Errorf("name of %d characters %q; want at most 253, a DNS subdomain", len(j.Name), j.Name)
	}
}

func TestMachineOf(t *testing.T) {
	hw := &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: "acme", Name: "n1"}}
	if _, err := bmcjob.MachineOf(hw); err == nil || !strings.Contains(err.Error(), "hardware acme/n1 has no spec.bmcRef") {
		t.Errorf("no bmcRef: %v", err)
	}
	hw.Spec.BMCRef = &model.LocalObjectReference{Name: "bmc-n1"}
	if m, err := bmcjob.MachineOf(hw); err != nil || m != "bmc-n1" {
		t.Errorf("MachineOf = %q, %v; want bmc-n1", m, err)
	}
}
