package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

func hardware(ns, name string, macs ...string) *model.Hardware {
	hw := &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name}}
	for _, m := range macs {
		hw.Spec.Interfaces = append(hw.Spec.Interfaces, model.Interface{DHCP: &model.DHCP{MAC: m}})
	}
	return hw
}

func keys(objs []model.Object) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.GetObjectMeta().Key())
	}
	return out
}

// TestOverlay: an overlay answers Get and ByIndex as the store will once
// its objects are written — replaced objects' old index values gone, new
// ones found, in the store's order — and writes nothing.
func TestOverlay(t *testing.T) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "anvil.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Apply(ctx, []model.Object{
		hardware("a", "h1", "00:00:00:00:00:01"),
		hardware("b", "h2", "00:00:00:00:00:02"),
	}); err != nil {
		t.Fatal(err)
	}
	ov := store.NewOverlay(st, []model.Object{
		hardware("a", "h1", "00:00:00:00:00:03"), // h1 moves to a new MAC...
		hardware("", "h0", "00-00-00-00-00-01"),  // ...and its old one is taken, in another spelling, in "default"
		hardware("b", "h3", "00:00:00:00:00:02"), // a second claim on h2's MAC
	})
	for _, tc := range []struct {
		mac  string
		want []string
	}{
		{"00:00:00:00:00:01", []string{"default/h0"}},
		{"00:00:00:00:00:02", []string{"b/h2", "b/h3"}},
		{"00:00:00:00:00:03", []string{"a/h1"}},
		{"00:00:00:00:00:09", []string{}},
	} {
		got, err := ov.ByIndex(ctx, model.KindHardware, store.IndexMAC, tc.mac)
		if err != nil || !reflect.DeepEqual(keys(got), tc.want) {
			t.Errorf("ByIndex(mac %s) = %v, %v; want %v", tc.mac, keys(got), err, tc.want)
		}
	}
	if got, err := ov.ByIndex(ctx, model.KindHardware, store.IndexAgentID, "00:00:00:00:00:01"); err != nil || !reflect.DeepEqual(keys(got), []string{"default/h0"}) {
		t.Errorf("ByIndex(agent ID) = %v, %v; want default/h0 (its first MAC)", keys(got), err)
	}
	if _, err := ov.ByIndex(ctx, model.KindHardware, "nope", "x"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ByIndex(unknown index) = %v; want ErrInvalid", err)
	}
	for _, tc := range []struct{ ns, name, mac string }{
		{"a", "h1", "00:00:00:00:00:03"}, // the overlay's
		{"b", "h2", "00:00:00:00:00:02"}, // the store's
		{"", "h0", "00-00-00-00-00-01"},  // namespace defaulted
	} {
		obj, err := ov.Get(ctx, model.KindHardware, tc.ns, tc.name)
		if err != nil || obj.(*model.Hardware).Spec.Interfaces[0].DHCP.MAC != tc.mac {
			t.Errorf("Get(%s/%s) = %v, %v; want the one with MAC %s", tc.ns, tc.name, obj, err, tc.mac)
		}
	}
	if _, err := ov.Get(ctx, model.KindHardware, "a", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(unknown) = %v; want ErrNotFound", err)
	}
	// Nothing was written.
	if got, _ := st.ByIndex(ctx, model.KindHardware, store.IndexMAC, "00:00:00:00:00:01"); !reflect.DeepEqual(keys(got), []string{"a/h1"}) {
		t.Errorf("the store after the overlay's reads: %v; want a/h1 unchanged", keys(got))
	}
}

// TestConflicts: the values a Hardware claims (MACs in any spelling,
// reserved IPs, agent IDs) are found on every other Hardware that holds
// them, in any namespace, once per value; a Hardware does not conflict
// with itself, nor with what the same write takes away from another.
func TestConflicts(t *testing.T) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "anvil.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h1 := hardware("acme", "h1", "00:00:00:00:00:01")
	h1.Spec.Interfaces[0].DHCP.IP = &model.IP{Address: "10.0.0.1"}
	h2 := hardware("globex", "h2", "00:00:00:00:00:02")
	h2.Spec.AgentID = "node-2"
	if _, err := st.Apply(ctx, []model.Object{h1, h2}); err != nil {
		t.Fatal(err)
	}
	claims := func(hw *model.Hardware, write ...model.Object) []string {
		t.Helper()
		cs, err := store.Conflicts(ctx, store.NewOverlay(st, append(write, hw)), hw)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, c := range cs {
			out = append(out, c.Index+" "+c.Value+" "+c.Path+" "+c.Other.Key())
		}
		return out
	}
	h3 := hardware("globex", "h3", "00-00-00-00-00-01", "00:00:00:00:00:03")
	h3.Spec.Interfaces[1].DHCP.IP = &model.IP{Address: "10.0.0.1"}
	h3.Spec.AgentID = "node-2"
	want := []string{
		"mac 00:00:00:00:00:01 spec.interfaces[0].dhcp.mac acme/h1",
		"ip 10.0.0.1 spec.interfaces[1].dhcp.ip.address acme/h1",
		"agentID node-2 spec.agentID globex/h2",
	}
	if got := claims(h3); !reflect.DeepEqual(got, want) {
		t.Errorf("Conflicts(h3) = %q; want %q", got, want)
	}
	// h2's first MAC as another's agent ID.
	h4 := hardware("acme", "h4", "00:00:00:00:00:04")
	h4.Spec.AgentID = "00:00:00:00:00:02"
	if got := claims(h4); !reflect.DeepEqual(got, []string{"agentID 00:00:00:00:00:02 spec.agentID globex/h2"}) {
		t.Errorf("Conflicts(h4) = %q; want h2's first MAC", got)
	}
	if got := claims(h1); len(got) != 0 {
		t.Errorf("Conflicts(h1 as stored) = %q; want none", got)
	}
	// h1 gives its MAC and address up in the same write.
	moved := hardware("acme", "h1", "00:00:00:00:00:09")
	if got := claims(h3, moved, &model.Hardware{ObjectMeta: h2.ObjectMeta}); len(got) != 0 {
		t.Errorf("Conflicts(h3) when h1 and h2 give their claims up = %q; want none", got)
	}
}
