package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/benchresult"
	"github.com/anvilproj/anvil/internal/discovery"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestDiscoverySmall runs the bench for real at a small scale: 20
// unknown machines discovered and enrolled against a freshly built
// `anvil serve --discovery`, then 20 against --discovery-max 15: every
// machine of the first phase must get its workflow and its first action,
// exactly 15 of the second, the other 5 refused to the end, and the
// result must validate.
func TestDiscoverySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds anvil and runs two servers")
	}
	root := testtool.ModuleRoot(t)
	bin := filepath.Join(t.TempDir(), "anvil")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/anvil")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/anvil: %v\n%s", err, out)
	}
	o := options{n: 20, stormMax: 15, anvil: bin, inventory: filepath.Join(root, "internal/hwinfo/testdata/dell-r610.golden.json"),
		getAction: true, wait: 30 * time.Second, probe: 20 * time.Millisecond, timeout: 3 * time.Minute, logLevel: "warn"}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	rep, res, err := measure(context.Background(), o)
	if rep == nil {
		t.Fatalf("no report: %v", err)
	}
	var b strings.Builder
	rep.print(&b)
	t.Logf("\n%s", b.String())
	if err != nil {
		t.Fatal(err)
	}
	tp, st := rep.Throughput, rep.Storm
	if tp.Enrolled != 20 || tp.HardwareMade != 20 || tp.ServerResults["discovered"] != 20 || tp.Enrolments["enrolled"] != 20 {
		t.Errorf("throughput: enrolled %d, made %d, server %v, enrolments %v; want 20 of each", tp.Enrolled, tp.HardwareMade, tp.ServerResults, tp.Enrolments)
	}
	if tp.PerSecond <= 0 || tp.MachineP99S <= 0 || tp.ServerCPUS <= 0 || tp.StoreAfterBytes <= tp.StoreBeforeBytes || tp.GetActionP50Ms <= 0 {
		t.Errorf("throughput figures missing: %+v", tp)
	}
	if st == nil || st.HardwareMade != 15 || st.Enrolled != 15 || st.Waiting != 5 || st.ServerResults["discovered"] != 15 || st.ServerResults["full"] < 5 {
		t.Errorf("storm: %+v; want 15 made and enrolled, 5 refused as full", st)
	}
	if st != nil && (st.API.Calls == 0 || st.API.Errors != 0) {
		t.Errorf("storm: API probe %+v; want calls, no errors", st.API)
	}
	if err := res.Validate(); err != nil {
		t.Errorf("result file: %v", err)
	}
	for _, g := range res.Goals {
		if !g.Met {
			t.Errorf("goal not met: %+v", g)
		}
	}
	if res.Server.Name != benchresult.ServerUnderTest {
		t.Errorf("server under test %q", res.Server.Name)
	}
}

// TestInventories: every machine's inventory is the fixture's with its
// own UUID, MACs and serials (discovery refuses a MAC or UUID another
// Hardware has), names its Hardware as discovery does, fits within the
// agent's cap, and a third have the memory the higher-priority rule set
// matches.
func TestInventories(t *testing.T) {
	base, err := loadFixture(filepath.Join(testtool.ModuleRoot(t), "internal/hwinfo/testdata/dell-r610.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	large := 0
	for i := range 3000 {
		raw, boot, err := inventory(base, i)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > 48<<10 {
			t.Fatalf("machine %d: inventory of %d bytes, over the agent's 48 KiB", i, len(raw))
		}
		var a model.Attributes
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		mac, err := macaddr.Parse(boot)
		if err != nil {
			t.Fatal(err)
		}
		if got := discovery.Name(discovery.ID(&a, mac)); got != hardwareName(i) {
			t.Fatalf("machine %d: discovery names it %s, the bench expects %s", i, got, hardwareName(i))
		}
		keys := []string{a.Anvil.UUID, a.Product.SerialNumber}
		for _, n := range a.NetworkInterfaces {
			keys = append(keys, n.MAC)
		}
		for _, k := range keys {
			if j, dup := seen[k]; dup {
				t.Fatalf("machines %d and %d share %s", j, i, k)
			}
			seen[k] = i
		}
		if a.Memory.Total == largeMemory {
			large++
		}
	}
	if large != 1000 {
		t.Errorf("%d of 3000 machines have %s; want a third", large, largeMemory)
	}
	if _, err := loadFixture(filepath.Join(testtool.ModuleRoot(t), "go.mod")); err == nil {
		t.Error("go.mod taken for an inventory")
	}
}

func TestOptionsCheck(t *testing.T) {
	for _, c := range []struct {
		o    options
		want string
	}{
		{options{n: 0, wait: time.Second, probe: time.Second}, "-n 0"},
		{options{n: 10, stormMax: 10, wait: time.Second, probe: time.Second}, "-storm-max 10"},
		{options{n: 10, stormMax: 5, probe: time.Second}, "-wait"},
	} {
		if err := c.o.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check(%+v) = %v; want an error naming %s", c.o, err, c.want)
		}
	}
}

// The peer's machines send the same inventory in Tinkerbell's message,
// and its objects are the Template and the rule set that matches every
// machine, with the namespace Tinkerbell needs.
func TestPeerInputs(t *testing.T) {
	base, err := loadFixture(filepath.Join(testtool.ModuleRoot(t), "internal/hwinfo/testdata/dell-r610.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	raw, mac, err := inventory(base, 7)
	if err != nil {
		t.Fatal(err)
	}
	var a model.Attributes
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	ta := tinkAttributes(&a)
	if ta.GetCpu().GetProcessors()[0].GetVendor() != "GenuineIntel" || ta.GetMemory().GetTotal() != a.Memory.Total ||
		ta.GetNetwork()[0].GetMac() != mac || len(ta.GetBlock()) != len(a.BlockDevices) || ta.GetProduct().GetSerialNumber() != a.Product.SerialNumber {
		t.Errorf("Tinkerbell's attributes %v do not carry the inventory %s", ta, raw)
	}
	objs := peerObjects()
	if len(objs) != 2 || objs[0].resource != "templates" || objs[1].resource != "workflowrulesets" ||
		!strings.Contains(objs[1].yaml, "namespace: default") || !strings.Contains(objs[1].yaml, "agentValue: device_1") {
		t.Errorf("peer objects: %+v", objs)
	}
}
