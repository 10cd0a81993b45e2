package bmc_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/testtool"
	"github.com/anvilproj/anvil/test/redfishsim"
)

// r640 is the simulator's example server.
func r640() *redfishsim.Inventory { return redfishsim.ExampleInventory() }

// wantR640 is r640 as the provider reads it (no Source: the poller's).
func wantR640() *model.OutOfBand {
	cpu := "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"
	dimm := func(loc, serial string) model.OOBMemory {
		return model.OOBMemory{Locator: loc, Type: "DDR4", CapacityMiB: 32768, SpeedMHz: 2933, Manufacturer: "Hynix",
			PartNumber: "HMA84GR7CJR4N-XN", SerialNumber: serial}
	}
	return &model.OutOfBand{
		Manufacturer: "Dell Inc.", Model: "PowerEdge R640", SerialNumber: "7XK2Q53",
		UUID: "4c4c4544-0058-4b10-8032-b7c04f513533", SKU: "7XK2Q53", BIOSVersion: "2.19.1", PowerState: "Off",
		ProcessorSummary: &model.OOBProcessorSummary{Count: 2, Model: cpu},
		MemorySummary:    &model.OOBMemorySummary{TotalGiB: 96},
		Processors: []model.OOBProcessor{
			{Socket: "CPU.Socket.1", Manufacturer: "Intel", Model: cpu, Cores: 20, Threads: 40},
			{Socket: "CPU.Socket.2", Manufacturer: "Intel", Model: cpu, Cores: 20, Threads: 40},
		},
		Memory: []model.OOBMemory{dimm("A1", "3A1F22C1"), dimm("A2", "3A1F22C2"), dimm("B1", "3A1F22C3")},
		Drives: []model.OOBDrive{
			{Model: "MZ7KH480HAHQ0D3", SerialNumber: "S47MNY0M123456", CapacityBytes: 480103981056, MediaType: "SSD"},
			{Model: "ST2000NM0055", SerialNumber: "ZC20ABCD", CapacityBytes: 2000398934016, MediaType: "HDD"},
		},
		EthernetInterfaces: []model.OOBEthernet{
			{ID: "1", MAC: "e4:43:4b:1a:2b:3c", SpeedMbps: 10000, LinkStatus: "LinkUp"},
			{ID: "2", MAC: "e4:43:4b:1a:2b:3d", LinkStatus: "LinkDown"},
		},
	}
}

func inventorySystem(t *testing.T, inv *redfishsim.Inventory) (*redfishsim.Server, *redfishsim.FakeMachine) {
	t.Helper()
	fm := &redfishsim.FakeMachine{}
	return redfishsim.Start(t, redfishsim.Config{Username: rfUser, Password: rfPassword,
		Systems: []redfishsim.System{{ID: "1", Machine: fm, Inventory: inv}}}), fm
}

func readInventory(t *testing.T, sim *redfishsim.Server) (*model.OutOfBand, error) {
	t.Helper()
	ctx := context.Background()
	s, err := bmc.Redfish{RootCAs: caPool(t, sim)}.Open(ctx, rfConn(sim))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	is, ok := s.(bmc.InventorySession)
	if !ok {
		t.Fatalf("a Redfish session (%T) is not an InventorySession", s)
	}
	return is.Inventory(ctx)
}

// TestRedfishInventory: the provider reads the system's identity and its
// Processors, Memory (empty slots left out), Storage drives and
// EthernetInterfaces from the simulator; a system without the
// collections (an older BMC) gives its identity alone.
func TestRedfishInventory(t *testing.T) {
	sim, _ := inventorySystem(t, r640())
	got, err := readInventory(t, sim)
	if err != nil {
		t.Fatal(err)
	}
	if want := wantR640(); !reflect.DeepEqual(got, want) {
		t.Errorf("inventory:\n got %+v\nwant %+v", got, want)
	}

	bare, _ := inventorySystem(t, nil)
	got, err = readInventory(t, bare)
	if err != nil {
		t.Fatal(err)
	}
	if want := (&model.OutOfBand{PowerState: "Off"}); !reflect.DeepEqual(got, want) {
		t.Errorf("a system without inventory: %+v", got)
	}
}

// TestRedfishInventoryBounds: a BMC listing 10,000 drives and 5,000
// NICs is read for the first 64 of each only (the requests show it), a
// megabyte model string is cut to 256 bytes, each cut is named in
// truncated; an answer over 4 MiB fails the read, naming the resource; a
// collection that answers 500 fails it too, naming it.
func TestRedfishInventoryBounds(t *testing.T) {
	inv := r640()
	inv.Model = strings.Repeat("é", 1<<19) // a megabyte, two bytes a rune
	inv.Drives = make([]redfishsim.Drive, 10000)
	for i := range inv.Drives {
		inv.Drives[i] = redfishsim.Drive{Model: "X", SerialNumber: strings.Repeat("s", 1000), MediaType: "SSD", CapacityBytes: 1 << 40}
	}
	inv.NICs = make([]redfishsim.NIC, 5000)
	sim, _ := inventorySystem(t, inv)
	before := sim.Requests()
	got, err := readInventory(t, sim)
	if err != nil {
		t.Fatal(err)
	}
	// service root, session, systems, system (open); the system, four
	// collections, 2+4 members, Storage/1, 64 drives, 64 NICs.
	if n := sim.Requests() - before; n > 160 {
		t.Errorf("%d requests: the read followed more members than it keeps", n)
	}
	if len(got.Drives) != model.OOBMaxItems || len(got.EthernetInterfaces) != model.OOBMaxItems {
		t.Errorf("read %d drives, %d NICs; want %d of each", len(got.Drives), len(got.EthernetInterfaces), model.OOBMaxItems)
	}
	got.Bound()
	if len(got.Model) > model.OOBMaxString || !strings.HasPrefix(got.Model, "éé") || !utf8Valid(got.Model) {
		t.Errorf("model kept as %d bytes (valid UTF-8 %v)", len(got.Model), utf8Valid(got.Model))
	}
	if len(got.Drives[0].SerialNumber) != model.OOBMaxString {
		t.Errorf("a drive's serial kept as %d bytes", len(got.Drives[0].SerialNumber))
	}
	want := []string{"drives", "ethernetInterfaces", "model", "drives[].strings"}
	if !reflect.DeepEqual(got.Truncated, want) {
		t.Errorf("truncated = %q; want %q", got.Truncated, want)
	}

	inv = r640()
	inv.SerialNumber = strings.Repeat("9", 5<<20)
	big, _ := inventorySystem(t, inv)
	if _, err := readInventory(t, big); err == nil || !strings.Contains(err.Error(), "read /redfish/v1/Systems/1: the BMC answered more than 4 MiB") {
		t.Errorf("a 5 MiB system: %v", err)
	}

	failing, _ := inventorySystem(t, r640())
	failing.Fail("/redfish/v1/Systems/1/Memory", 500)
	if _, err := readInventory(t, failing); err == nil || !strings.Contains(err.Error(), "read /redfish/v1/Systems/1/Memory: the BMC answered HTTP 500") {
		t.Errorf("a failing Memory collection: %v", err)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// hardwareFor is a Hardware whose spec.bmcRef names the Machine.
func hardwareFor(name, machineName string) *model.Hardware {
	return &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: "default", Name: name},
		Spec: model.HardwareSpec{BMCRef: &model.LocalObjectReference{Kind: "Machine", Name: machineName},
			Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: "e4:43:4b:1a:2b:3c"}}}}}
}

func (w *pollWorld) hardware(t *testing.T, name string) *model.Hardware {
	t.Helper()
	return w.get(t, model.KindHardware, name).(*model.Hardware)
}

// TestPollInventory: the Poller reads the inventory at its first contact
// with a Machine and writes it, with its source, to every Hardware naming
// the Machine (not to others); later polls within the inventory interval
// read only the power state; after the interval a changed inventory (a
// disk swapped) is written, an unchanged one writes nothing; the
// ReadInventoryAnnotation reads it at once.
func TestPollInventory(t *testing.T) {
	sim, _ := inventorySystem(t, r640())
	w := newPollWorld(t, bmc.PollConfig{Interval: time.Hour, Jitter: -1, InventoryInterval: 24 * time.Hour}, false,
		bmc.Redfish{RootCAs: caPool(t, sim), Timeout: 5 * time.Second})
	m := machine("rf", "rf-auth", sim.Port, &model.ProviderOptions{PreferredOrder: []string{model.ProviderRedfish}})
	other := hardwareFor("node08", "elsewhere")
	w.put(t, secret("rf-auth", map[string]string{"username": rfUser, "password": rfPassword}), m,
		hardwareFor("node07", "rf"), hardwareFor("node07b", "rf"), other)
	t0 := w.clock.Now().UTC()
	w.sweep(t)

	want := wantR640()
	want.Source = model.OutOfBandSource{Machine: "rf", Provider: model.ProviderRedfish, ReadAt: t0}
	for _, name := range []string{"node07", "node07b"} {
		h := w.hardware(t, name)
		if h.Status.Attributes == nil || !reflect.DeepEqual(h.Status.Attributes.OutOfBand, want) {
			t.Fatalf("%s: attributes %+v", name, h.Status.Attributes)
		}
	}
	if a := w.hardware(t, "node08").Status.Attributes; a != nil {
		t.Errorf("a Hardware naming another Machine got %+v", a.OutOfBand)
	}

	swapped := r640()
	swapped.Drives[1] = redfishsim.Drive{Model: "ST4000NM0035", SerialNumber: "ZC40EFGH", MediaType: "HDD", CapacityBytes: 4000787030016}
	sim.SetInventory("1", swapped)
	w.clock.Advance(time.Hour)
	w.sweep(t)
	if d := w.hardware(t, "node07").Status.Attributes.OutOfBand.Drives[1]; d.SerialNumber != "ZC20ABCD" {
		t.Errorf("inventory read again within its interval: %+v", d)
	}

	w.clock.Advance(23 * time.Hour)
	t24 := w.clock.Now().UTC()
	w.sweep(t)
	oob := w.hardware(t, "node07").Status.Attributes.OutOfBand
	if d := oob.Drives[1]; d.SerialNumber != "ZC40EFGH" || !oob.Source.ReadAt.Equal(t24) {
		t.Errorf("after 24 h: drive %+v read at %s", d, oob.Source.ReadAt)
	}

	rv := w.hardware(t, "node07").ResourceVersion
	w.clock.Advance(25 * time.Hour)
	w.sweep(t)
	if h := w.hardware(t, "node07"); h.ResourceVersion != rv {
		t.Errorf("an unchanged inventory was written again: %+v", h.Status.Attributes.OutOfBand.Source)
	}

	sim.SetInventory("1", r640())
	m = w.machine(t, "rf")
	m.Annotations = map[string]string{bmc.ReadInventoryAnnotation: "2026-11-29"}
	w.put(t, m)
	w.sweep(t) // due at once, though its power poll was an hour away
	if d := w.hardware(t, "node07").Status.Attributes.OutOfBand.Drives[1]; d.SerialNumber != "ZC20ABCD" {
		t.Errorf("the annotation did not read the inventory again: %+v", d)
	}
}

// TestPollInventoryUnsupported: a provider without inventory (the fake
// ones, as IPMI and AMT) leaves the Hardware's attributes alone.
func TestPollInventoryUnsupported(t *testing.T) {
	b := newFakeBMCs()
	b.set("10.0.0.1", model.PowerOn, nil)
	w := newPollWorld(t, bmc.PollConfig{Interval: time.Hour, Jitter: -1}, false, b.provider(model.ProviderIPMI))
	w.put(t, secret("bm-auth", map[string]string{"username": "u", "password": "p"}),
		machineAt("m1", "bm-auth", "10.0.0.1", 623, nil), hardwareFor("node07", "m1"))
	w.sweep(t)
	if m := w.machine(t, "m1"); m.Status.PowerState != model.PowerOn {
		t.Fatalf("not polled: %+v", m.Status)
	}
	if a := w.hardware(t, "node07").Status.Attributes; a != nil {
		t.Errorf("attributes written without an inventory: %+v", a)
	}
}

// TestPollInventoryHardwareLater: a Hardware that comes to name a Machine
// already polled — applied after it, or re-pointed by its bmcRef — gets
// the inventory at once, not at the Machine's next inventory time (a day
// away here, and an hour for the power state).
func TestPollInventoryHardwareLater(t *testing.T) {
	sim, _ := inventorySystem(t, r640())
	w := newPollWorld(t, bmc.PollConfig{Interval: time.Hour, Jitter: -1, InventoryInterval: 24 * time.Hour}, false,
		bmc.Redfish{RootCAs: caPool(t, sim), Timeout: 5 * time.Second})
	w.run(t, w.poller.Run)
	opts := &model.ProviderOptions{PreferredOrder: []string{model.ProviderRedfish}}
	w.put(t, secret("rf-auth", map[string]string{"username": rfUser, "password": rfPassword}),
		machine("rf", "rf-auth", sim.Port, opts), machine("rf2", "rf-auth", sim.Port, opts))
	testtool.WaitFor(t, "both machines to be polled", func() bool {
		return w.machine(t, "rf").Status.PowerState == model.PowerOff && w.machine(t, "rf2").Status.PowerState == model.PowerOff
	})
	source := func() string {
		a := w.hardware(t, "node07").Status.Attributes
		if a == nil || a.OutOfBand == nil {
			return ""
		}
		return a.OutOfBand.Source.Machine
	}
	w.put(t, hardwareFor("node07", "rf"))
	testtool.WaitFor(t, "the new Hardware to get rf's inventory", func() bool { return source() == "rf" })
	w.put(t, hardwareFor("node07", "rf2"))
	testtool.WaitFor(t, "the re-pointed Hardware to get rf2's inventory", func() bool { return source() == "rf2" })
}
