// Package storetest is the contract test suite for store.Store
// implementations. Every implementation's tests call Run; the suite uses
// nothing but the store interface, so it holds for the embedded bbolt store
// and for a store on the Kubernetes API alike.
//
// The suite assumes resource versions are decimal integers that grow with
// every write (as both bbolt revisions and etcd revisions are) and never
// waits on the wall clock: watch tests write a sentinel object and read
// events up to it.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/labels"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Options tell the suite what it cannot learn through store.Store.
type Options struct {
	// WatchHistory is how many of the latest events the store under test
	// remembers for watches that resume from an older version: watching
	// from version V needs every event after V, so V stays usable for
	// WatchHistory more writes and is gone (store.ErrGone) after one more.
	// Required: the too-old watch test writes exactly that many objects,
	// so a store under test is configured with a small history.
	WatchHistory int
	// SecretGenerations: the store counts a Secret's generations as it
	// does other kinds' (the embedded store does). The Kubernetes API
	// server keeps metadata.generation only for kinds with a spec, so a
	// store on it leaves a Secret's at what the server says.
	SecretGenerations bool
}

// Run runs the whole suite. open must return a new, empty store for each
// call and arrange (with t.Cleanup) for it to be closed. Run does not close
// stores itself except in tests that are about Close.
func Run(t *testing.T, opts Options, open func(t *testing.T) store.Store) {
	if opts.WatchHistory <= 0 {
		t.Fatalf("storetest.Options.WatchHistory = %d; want the store's history length", opts.WatchHistory)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateGetUpdateDelete", testCRUD},
		{"AlreadyExists", testAlreadyExists},
		{"NotFound", testNotFound},
		{"ConflictOnStaleVersion", testConflict},
		{"UnconditionalUpdate", testUnconditionalUpdate},
		{"Generation", testGeneration},
		{"DefaultNamespace", testDefaultNamespace},
		{"InvalidObjects", testInvalid},
		{"ListOrderAndSelectors", testList},
		{"IndexesHardware", testIndexesHardware},
		{"IndexesWorkflow", testIndexesWorkflow},
		{"IndexMaintenance", testIndexMaintenance},
		{"UnknownIndex", testUnknownIndex},
		{"ApplyCreatesAndUpdates", testApply},
		{"ApplyAtomic", testApplyAtomic},
		{"WatchFromEmpty", testWatchFromEmpty},
		{"WatchFromVersion", testWatchFromVersion},
		{"WatchFromListVersion", testWatchFromListVersion},
		{"WatchTooOld", func(t *testing.T, s store.Store) { testWatchTooOld(t, s, opts.WatchHistory) }},
		{"WatchFilters", testWatchFilters},
		{"WatchContextCancel", testWatchCancel},
		{"ReturnedObjectsAreCopies", testCopies},
		{"SharedReadsAndWrites", testShared},
		{"ConcurrentWriters", testConcurrentWriters},
		{"BootProfiles", testBootProfiles},
		{"BMCKinds", func(t *testing.T, s store.Store) { testBMCKinds(t, s, opts.SecretGenerations) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

// ---- object builders ----

// Hardware returns a Hardware with one interface per MAC (and IP, if given).
func Hardware(ns, name string, macs ...string) *model.Hardware {
	h := &model.Hardware{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name}}
	for _, m := range macs {
		h.Spec.Interfaces = append(h.Spec.Interfaces, model.Interface{DHCP: &model.DHCP{MAC: m}})
	}
	return h
}

// Workflow returns a Workflow on hardware hw whose tasks run on agents.
func Workflow(ns, name, hw string, agents ...string) *model.Workflow {
	w := &model.Workflow{ObjectMeta: model.ObjectMeta{Namespace: ns, Name: name}}
	w.Spec.HardwareRef = hw
	w.Spec.TemplateRef = "tpl"
	for i, a := range agents {
		w.Status.Tasks = append(w.Status.Tasks, model.Task{Name: fmt.Sprintf("t%d", i), AgentID: a})
	}
	return w
}

func ctx(t *testing.T) context.Context { return t.Context() }

func rvOf(t *testing.T, o model.Object) uint64 {
	t.Helper()
	rv := o.GetObjectMeta().ResourceVersion
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q of %s is not a decimal integer", rv, o.GetObjectMeta().Key())
	}
	return n
}

func parseRV(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q is not a decimal integer", rv)
	}
	return n
}

func mustCreate(t *testing.T, s store.Store, o model.Object) model.Object {
	t.Helper()
	got, err := s.Create(ctx(t), o)
	if err != nil {
		t.Fatalf("Create %s: %v", o.GetObjectMeta().Key(), err)
	}
	return got
}

func mustGet(t *testing.T, s store.Store, kind, ns, name string) model.Object {
	t.Helper()
	got, err := s.Get(ctx(t), kind, ns, name)
	if err != nil {
		t.Fatalf("Get %s %s/%s: %v", kind, ns, name, err)
	}
	return got
}

func keys(objs []model.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.GetObjectMeta().Key()
	}
	return out
}

func wantKeys(t *testing.T, what string, objs []model.Object, want ...string) {
	t.Helper()
	got := keys(objs)
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want one wrapping %q", what, err, target)
	}
}

// ---- CRUD ----

func testCRUD(t *testing.T, s store.Store) {
	in := Hardware("ns1", "m1", "aa:bb:cc:dd:ee:01")
	in.Labels = map[string]string{"rack": "r1"}
	created := mustCreate(t, s, in).(*model.Hardware)
	m := created.ObjectMeta
	if m.UID == "" || m.ResourceVersion == "" || m.Generation != 1 || m.CreationTimestamp == nil {
		t.Fatalf("created metadata = %+v; want uid, resourceVersion, generation 1, creationTimestamp", m)
	}
	if created.Kind != model.KindHardware || created.APIVersion != model.APIVersion {
		t.Errorf("created TypeMeta = %+v", created.TypeMeta)
	}
	if in.ResourceVersion != "" || in.UID != "" {
		t.Errorf("Create modified its argument: %+v", in.ObjectMeta)
	}

	got := mustGet(t, s, model.KindHardware, "ns1", "m1").(*model.Hardware)
	if got.UID != m.UID || got.ResourceVersion != m.ResourceVersion || got.Labels["rack"] != "r1" ||
		len(got.Spec.Interfaces) != 1 || got.Spec.Interfaces[0].DHCP.MAC != "aa:bb:cc:dd:ee:01" {
		t.Fatalf("Get = %+v, want what Create returned (%+v)", got, created)
	}
	if !got.CreationTimestamp.Equal(*m.CreationTimestamp) {
		t.Errorf("creationTimestamp %v, created %v", got.CreationTimestamp, m.CreationTimestamp)
	}

	got.Labels["rack"] = "r2"
	got.Status.State = "in-use"
	updated, err := s.Update(ctx(t), got)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	um := updated.GetObjectMeta()
	if rvOf(t, updated) <= rvOf(t, created) {
		t.Errorf("update resourceVersion %s not after create's %s", um.ResourceVersion, m.ResourceVersion)
	}
	if um.UID != m.UID || !um.CreationTimestamp.Equal(*m.CreationTimestamp) {
		t.Errorf("update changed uid/creationTimestamp: %+v vs %+v", um, m)
	}
	got2 := mustGet(t, s, model.KindHardware, "ns1", "m1").(*model.Hardware)
	if got2.Labels["rack"] != "r2" || got2.Status.State != "in-use" || got2.ResourceVersion != um.ResourceVersion {
		t.Errorf("after update Get = %+v", got2.ObjectMeta)
	}

	if err := s.Delete(ctx(t), model.KindHardware, "ns1", "m1", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = s.Get(ctx(t), model.KindHardware, "ns1", "m1")
	wantErr(t, "Get after Delete", err, store.ErrNotFound)

	// A name can be reused after deletion, and gets a new UID.
	again := mustCreate(t, s, Hardware("ns1", "m1"))
	if again.GetObjectMeta().UID == m.UID {
		t.Errorf("recreated object kept the old UID %s", m.UID)
	}
	if rvOf(t, again) <= rvOf(t, updated) {
		t.Errorf("recreate resourceVersion %d not after %d", rvOf(t, again), rvOf(t, updated))
	}
	// Other kinds are independent namespaces of names.
	tpl := &model.Template{ObjectMeta: model.ObjectMeta{Namespace: "ns1", Name: "m1"}}
	mustCreate(t, s, tpl)
	mustCreate(t, s, Workflow("ns1", "m1", "m1"))
}

func testAlreadyExists(t *testing.T, s store.Store) {
	mustCreate(t, s, Hardware("default", "m1"))
	_, err := s.Create(ctx(t), Hardware("default", "m1"))
	wantErr(t, "second Create", err, store.ErrAlreadyExists)
	_, err = s.Create(ctx(t), Hardware("", "m1"))
	wantErr(t, "Create with defaulted namespace", err, store.ErrAlreadyExists)
	mustCreate(t, s, Hardware("other", "m1"))
}

func testNotFound(t *testing.T, s store.Store) {
	_, err := s.Get(ctx(t), model.KindHardware, "default", "nope")
	wantErr(t, "Get", err, store.ErrNotFound)
	if err != nil && !strings.Contains(err.Error(), "nope") {
		t.Errorf("Get error %q does not name the object", err)
	}
	_, err = s.Update(ctx(t), Hardware("default", "nope"))
	wantErr(t, "Update", err, store.ErrNotFound)
	err = s.Delete(ctx(t), model.KindHardware, "default", "nope", "")
	wantErr(t, "Delete", err, store.ErrNotFound)
	mustCreate(t, s, Hardware("default", "m1"))
	_, err = s.Get(ctx(t), model.KindWorkflow, "default", "m1")
	wantErr(t, "Get of another kind", err, store.ErrNotFound)
}

func testConflict(t *testing.T, s store.Store) {
	v1 := mustCreate(t, s, Hardware("default", "m1")).(*model.Hardware)
	stale := model.DeepCopy(v1)
	v1.Labels = map[string]string{"a": "1"}
	v2, err := s.Update(ctx(t), v1)
	if err != nil {
		t.Fatalf("Update with current resourceVersion: %v", err)
	}
	stale.Labels = map[string]string{"a": "2"}
	_, err = s.Update(ctx(t), stale)
	wantErr(t, "Update with stale resourceVersion", err, store.ErrConflict)
	err = s.Delete(ctx(t), model.KindHardware, "default", "m1", stale.ResourceVersion)
	wantErr(t, "Delete with stale resourceVersion", err, store.ErrConflict)
	if got := mustGet(t, s, model.KindHardware, "default", "m1"); got.GetObjectMeta().Labels["a"] != "1" {
		t.Errorf("a conflicting write changed the object: %v", got.GetObjectMeta().Labels)
	}
	if err := s.Delete(ctx(t), model.KindHardware, "default", "m1", v2.GetObjectMeta().ResourceVersion); err != nil {
		t.Fatalf("Delete with current resourceVersion: %v", err)
	}
}

func testUnconditionalUpdate(t *testing.T, s store.Store) {
	v1 := mustCreate(t, s, Hardware("default", "m1")).(*model.Hardware)
	v1.Labels = map[string]string{"a": "1"}
	if _, err := s.Update(ctx(t), v1); err != nil {
		t.Fatal(err)
	}
	blind := Hardware("default", "m1", "aa:bb:cc:dd:ee:ff")
	got, err := s.Update(ctx(t), blind)
	if err != nil {
		t.Fatalf("Update with empty resourceVersion: %v", err)
	}
	if got.GetObjectMeta().UID != v1.UID {
		t.Errorf("unconditional update changed UID")
	}
	if got.GetObjectMeta().Labels != nil {
		t.Errorf("Update replaces the object, but labels %v survived", got.GetObjectMeta().Labels)
	}
}

func testGeneration(t *testing.T, s store.Store) {
	h := mustCreate(t, s, Hardware("default", "m1", "aa:aa:aa:aa:aa:01")).(*model.Hardware)
	if h.Generation != 1 {
		t.Fatalf("generation after create = %d, want 1", h.Generation)
	}
	step := func(what string, change func(h *model.Hardware), want int64) {
		t.Helper()
		change(h)
		got, err := s.Update(ctx(t), h)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		h = got.(*model.Hardware)
		if h.Generation != want {
			t.Errorf("generation after %s = %d, want %d", what, h.Generation, want)
		}
	}
	step("label change", func(h *model.Hardware) { h.Labels = map[string]string{"x": "y"} }, 1)
	step("status change", func(h *model.Hardware) { h.Status.State = "busy" }, 1)
	step("spec change", func(h *model.Hardware) { h.Spec.AgentID = "agent-1" }, 2)
	step("no change", func(h *model.Hardware) {}, 2)
	step("another spec change", func(h *model.Hardware) { h.Spec.Interfaces = nil }, 3)
	// A client-supplied generation is ignored.
	step("forged generation", func(h *model.Hardware) { h.Generation = 99 }, 3)
}

func testDefaultNamespace(t *testing.T, s store.Store) {
	got := mustCreate(t, s, Hardware("", "m1"))
	if ns := got.GetObjectMeta().Namespace; ns != model.DefaultNamespace {
		t.Errorf("namespace = %q, want %q", ns, model.DefaultNamespace)
	}
	mustGet(t, s, model.KindHardware, model.DefaultNamespace, "m1")
	objs, _, err := s.List(ctx(t), model.KindHardware, store.ListOptions{Namespace: model.DefaultNamespace})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "List default", objs, "default/m1")
}

func testInvalid(t *testing.T, s store.Store) {
	long := strings.Repeat("a", 254)
	for _, tc := range []struct{ ns, name string }{
		{"default", ""},
		{"default", "Upper"},
		{"default", "-lead"},
		{"default", "trail-"},
		{"default", "under_score"},
		{"default", "sla/sh"},
		{"default", "sp ace"},
		{"default", long},
		{"Upper", "ok"},
		{"dot.ted", "ok"},
		{strings.Repeat("n", 64), "ok"},
		{"-ns", "ok"},
	} {
		_, err := s.Create(ctx(t), Hardware(tc.ns, tc.name))
		wantErr(t, fmt.Sprintf("Create %q/%q", tc.ns, tc.name), err, store.ErrInvalid)
		if err != nil && tc.name != "" && tc.name != long && !strings.Contains(err.Error(), tc.name) && !strings.Contains(err.Error(), tc.ns) {
			t.Errorf("error %q does not name the bad value", err)
		}
	}
	// Longest valid names are fine.
	mustCreate(t, s, Hardware(strings.Repeat("n", 63), strings.Repeat("a", 253)))
	mustCreate(t, s, Hardware("default", "a.b-c.0"))

	// Create with a resourceVersion, and a TypeMeta that contradicts the type.
	h := Hardware("default", "rv-set")
	h.ResourceVersion = "5"
	_, err := s.Create(ctx(t), h)
	wantErr(t, "Create with resourceVersion", err, store.ErrInvalid)
	h = Hardware("default", "wrong-kind")
	h.Kind = model.KindWorkflow
	_, err = s.Create(ctx(t), h)
	wantErr(t, "Create with contradicting TypeMeta", err, store.ErrInvalid)
	if _, err := s.Get(ctx(t), model.KindHardware, "default", "wrong-kind"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("invalid object was stored (Get: %v)", err)
	}
}

// ---- List ----

func testList(t *testing.T, s store.Store) {
	mk := func(ns, name string, lbl map[string]string, macs ...string) {
		h := Hardware(ns, name, macs...)
		h.Labels = lbl
		mustCreate(t, s, h)
	}
	// Namespaces "a" and "a-b" order differently by "ns/name" string than
	// by (namespace, name): the contract is the latter.
	mk("a-b", "x", map[string]string{"env": "prod"}, "00:00:00:00:00:01")
	mk("a", "z", map[string]string{"env": "prod", "gpu": "1"}, "00:00:00:00:00:02")
	mk("a", "b.1", map[string]string{"env": "dev"})
	mk("a", "b", nil, "00:00:00:00:00:03", "00:00:00:00:00:04")
	mk("b", "a", map[string]string{"env": "prod"})
	mustCreate(t, s, Workflow("a", "w", "z"))

	list := func(opts store.ListOptions) []model.Object {
		t.Helper()
		objs, rv, err := s.List(ctx(t), model.KindHardware, opts)
		if err != nil {
			t.Fatalf("List(%+v): %v", opts, err)
		}
		parseRV(t, rv)
		return objs
	}
	sel := func(s string) labels.Selector {
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	fields := func(s string) []store.FieldRequirement {
		f, err := store.ParseFieldSelector(model.KindHardware, s)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	wantKeys(t, "List all", list(store.ListOptions{}), "a/b", "a/b.1", "a/z", "a-b/x", "b/a")
	wantKeys(t, "List ns a", list(store.ListOptions{Namespace: "a"}), "a/b", "a/b.1", "a/z")
	wantKeys(t, "List ns none", list(store.ListOptions{Namespace: "nothing"}))
	wantKeys(t, "List env=prod", list(store.ListOptions{Labels: sel("env=prod")}), "a/z", "a-b/x", "b/a")
	wantKeys(t, "List env=prod,!gpu", list(store.ListOptions{Labels: sel("env=prod,!gpu")}), "a-b/x", "b/a")
	wantKeys(t, "List env in (dev,prod) ns a", list(store.ListOptions{Namespace: "a", Labels: sel("env in (dev,prod)")}), "a/b.1", "a/z")
	wantKeys(t, "List mac field", list(store.ListOptions{Fields: fields("spec.interfaces.dhcp.mac=00:00:00:00:00:04")}), "a/b")
	wantKeys(t, "List name!=", list(store.ListOptions{Fields: fields("metadata.name!=b,metadata.namespace=a")}), "a/b.1", "a/z")
	wantKeys(t, "List all three", list(store.ListOptions{Namespace: "a", Labels: sel("env"), Fields: fields("metadata.name=z")}), "a/z")

	wfs, _, err := s.List(ctx(t), model.KindWorkflow, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "List workflows", wfs, "a/w")
	f, err := store.ParseFieldSelector(model.KindWorkflow, "spec.hardwareRef=z")
	if err != nil {
		t.Fatal(err)
	}
	wfs, _, err = s.List(ctx(t), model.KindWorkflow, store.ListOptions{Fields: f})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "List workflows by hardwareRef", wfs, "a/w")
}

// ---- indexes ----

func byIndex(t *testing.T, s store.Store, kind, index, value string) []model.Object {
	t.Helper()
	objs, err := s.ByIndex(ctx(t), kind, index, value)
	if err != nil {
		t.Fatalf("ByIndex(%s, %s, %s): %v", kind, index, value, err)
	}
	return objs
}

func testIndexesHardware(t *testing.T, s store.Store) {
	h := Hardware("ns", "m1", "AA:BB:CC:DD:EE:01", "aa:bb:cc:dd:ee:02")
	h.Spec.Interfaces[0].DHCP.IP = &model.IP{Address: "10.0.0.1"}
	h.Spec.Interfaces[1].DHCP.IP = &model.IP{Address: "10.0.0.2"}
	h.Spec.Metadata = &model.HardwareMetadata{Instance: &model.MetadataInstance{ID: "inst-1"}}
	h.Spec.AgentID = "agent-1"
	mustCreate(t, s, h)
	// MACs are indexed in canonical form whatever the spelling.
	mustCreate(t, s, Hardware("aa", "m2", "AABB.CCDD.EE03"))
	mustCreate(t, s, Hardware("zz", "m3", "aa-bb-cc-dd-ee-02")) // shares a MAC with m1

	k := model.KindHardware
	wantKeys(t, "mac (lower-cased)", byIndex(t, s, k, store.IndexMAC, "aa:bb:cc:dd:ee:01"), "ns/m1")
	wantKeys(t, "mac upper", byIndex(t, s, k, store.IndexMAC, "AA:BB:CC:DD:EE:01"))
	wantKeys(t, "shared mac", byIndex(t, s, k, store.IndexMAC, "aa:bb:cc:dd:ee:02"), "ns/m1", "zz/m3")
	wantKeys(t, "ip", byIndex(t, s, k, store.IndexIP, "10.0.0.2"), "ns/m1")
	wantKeys(t, "agentID spec", byIndex(t, s, k, store.IndexAgentID, "agent-1"), "ns/m1")
	wantKeys(t, "agentID first mac", byIndex(t, s, k, store.IndexAgentID, "aa:bb:cc:dd:ee:01"), "ns/m1")
	wantKeys(t, "agentID first mac of m2", byIndex(t, s, k, store.IndexAgentID, "aa:bb:cc:dd:ee:03"), "aa/m2")
	wantKeys(t, "instanceID", byIndex(t, s, k, store.IndexInstanceID, "inst-1"), "ns/m1")
	wantKeys(t, "instanceID empty", byIndex(t, s, k, store.IndexInstanceID, ""))
	wantKeys(t, "unknown value", byIndex(t, s, k, store.IndexMAC, "ff:ff:ff:ff:ff:ff"))
}

func testIndexesWorkflow(t *testing.T, s store.Store) {
	mustCreate(t, s, Workflow("ns", "w1", "m1", "agent-a", "agent-b", "agent-a"))
	mustCreate(t, s, Workflow("ns", "w2", "m1", "agent-b"))
	mustCreate(t, s, Workflow("ns", "w3", "m2"))
	k := model.KindWorkflow
	wantKeys(t, "hardwareRef m1", byIndex(t, s, k, store.IndexHardwareRef, "m1"), "ns/w1", "ns/w2")
	wantKeys(t, "hardwareRef m2", byIndex(t, s, k, store.IndexHardwareRef, "m2"), "ns/w3")
	wantKeys(t, "agentID a", byIndex(t, s, k, store.IndexAgentID, "agent-a"), "ns/w1")
	wantKeys(t, "agentID b", byIndex(t, s, k, store.IndexAgentID, "agent-b"), "ns/w1", "ns/w2")
}

func testIndexMaintenance(t *testing.T, s store.Store) {
	h := mustCreate(t, s, Hardware("default", "m1", "00:00:00:00:00:01")).(*model.Hardware)
	h.Spec.Interfaces[0].DHCP.MAC = "00:00:00:00:00:02"
	if _, err := s.Update(ctx(t), h); err != nil {
		t.Fatal(err)
	}
	k := model.KindHardware
	wantKeys(t, "old mac after update", byIndex(t, s, k, store.IndexMAC, "00:00:00:00:00:01"))
	wantKeys(t, "new mac after update", byIndex(t, s, k, store.IndexMAC, "00:00:00:00:00:02"), "default/m1")
	wantKeys(t, "old agentID after update", byIndex(t, s, k, store.IndexAgentID, "00:00:00:00:00:01"))

	w := mustCreate(t, s, Workflow("default", "w1", "m1", "agent-a")).(*model.Workflow)
	w.Status.Tasks[0].AgentID = "agent-b"
	w.Spec.HardwareRef = "m2"
	if _, err := s.Update(ctx(t), w); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "old task agent", byIndex(t, s, model.KindWorkflow, store.IndexAgentID, "agent-a"))
	wantKeys(t, "new task agent", byIndex(t, s, model.KindWorkflow, store.IndexAgentID, "agent-b"), "default/w1")
	wantKeys(t, "old hardwareRef", byIndex(t, s, model.KindWorkflow, store.IndexHardwareRef, "m1"))
	wantKeys(t, "new hardwareRef", byIndex(t, s, model.KindWorkflow, store.IndexHardwareRef, "m2"), "default/w1")

	if err := s.Delete(ctx(t), k, "default", "m1", ""); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "mac after delete", byIndex(t, s, k, store.IndexMAC, "00:00:00:00:00:02"))
	if err := s.Delete(ctx(t), model.KindWorkflow, "default", "w1", ""); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "agent after delete", byIndex(t, s, model.KindWorkflow, store.IndexAgentID, "agent-b"))
}

func testUnknownIndex(t *testing.T, s store.Store) {
	if _, err := s.ByIndex(ctx(t), model.KindHardware, "colour", "red"); err == nil {
		t.Error("ByIndex with an unknown index succeeded")
	}
	if _, err := s.ByIndex(ctx(t), model.KindWorkflow, store.IndexMAC, "x"); err == nil {
		t.Error("ByIndex(Workflow, mac) succeeded; Workflow has no mac index")
	}
	if _, err := s.ByIndex(ctx(t), model.KindTemplate, store.IndexHardwareRef, "x"); err == nil {
		t.Error("ByIndex(Template, hardwareRef) succeeded; Template has no indexes")
	}
}

// ---- Apply ----

func testApply(t *testing.T, s store.Store) {
	existing := Workflow("default", "w1", "m1", "agent-a")
	existing.Status.State = model.StateRunning
	old := mustCreate(t, s, existing)

	data := "version: 0.1"
	in := []model.Object{
		Hardware("default", "m1", "00:00:00:00:00:01"),
		&model.Template{ObjectMeta: model.ObjectMeta{Name: "tpl"}, Spec: model.TemplateSpec{Data: &data}},
		Workflow("default", "w1", "m1"), // no status: the stored one is kept
	}
	in[2].(*model.Workflow).Labels = map[string]string{"applied": "yes"}
	out, err := s.Apply(ctx(t), in)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(out) != 3 {
		t.Fatalf("Apply returned %d objects, want 3", len(out))
	}
	wantKeys(t, "Apply result", out, "default/m1", "default/tpl", "default/w1")
	last := uint64(0)
	for _, o := range out {
		if rv := rvOf(t, o); rv <= last {
			t.Errorf("Apply results' resourceVersions not increasing: %s", o.GetObjectMeta().ResourceVersion)
		} else {
			last = rv
		}
	}
	w := mustGet(t, s, model.KindWorkflow, "default", "w1").(*model.Workflow)
	if w.Status.State != model.StateRunning || len(w.Status.Tasks) != 1 {
		t.Errorf("Apply with empty status dropped the stored status: %+v", w.Status)
	}
	if w.Labels["applied"] != "yes" || w.UID != old.GetObjectMeta().UID {
		t.Errorf("applied workflow = %+v", w.ObjectMeta)
	}
	wantKeys(t, "status kept: agent index", byIndex(t, s, model.KindWorkflow, store.IndexAgentID, "agent-a"), "default/w1")

	// A non-zero status replaces the stored one.
	w2 := Workflow("default", "w1", "m1", "agent-z")
	w2.Status.State = model.StateSuccess
	if _, err := s.Apply(ctx(t), []model.Object{w2}); err != nil {
		t.Fatal(err)
	}
	w = mustGet(t, s, model.KindWorkflow, "default", "w1").(*model.Workflow)
	if w.Status.State != model.StateSuccess {
		t.Errorf("Apply with a status kept the old one: %+v", w.Status)
	}
	wantKeys(t, "status replaced: old agent", byIndex(t, s, model.KindWorkflow, store.IndexAgentID, "agent-a"))
	wantKeys(t, "status replaced: new agent", byIndex(t, s, model.KindWorkflow, store.IndexAgentID, "agent-z"), "default/w1")

	// Apply ignores a stale resourceVersion: it is unconditional.
	stale := Hardware("default", "m1", "00:00:00:00:00:09")
	stale.ResourceVersion = "1"
	if _, err := s.Apply(ctx(t), []model.Object{stale}); err != nil {
		t.Errorf("Apply with a stale resourceVersion: %v", err)
	}
	if out, err := s.Apply(ctx(t), nil); err != nil || len(out) != 0 {
		t.Errorf("Apply(nil) = %v, %v", out, err)
	}
}

func testApplyAtomic(t *testing.T, s store.Store) {
	before, rv0, err := s.List(ctx(t), model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(ctx(t), []model.Object{
		Hardware("default", "good-1"),
		Hardware("default", "Bad_Name"),
		Hardware("default", "good-2"),
	})
	wantErr(t, "Apply with an invalid object", err, store.ErrInvalid)
	after, rv1, err := s.List(ctx(t), model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("failed Apply stored %q", keys(after))
	}
	if rv1 != rv0 {
		t.Errorf("failed Apply moved the store's version from %s to %s", rv0, rv1)
	}
	out, err := s.Apply(ctx(t), []model.Object{Hardware("default", "good-1"), Hardware("default", "good-2")})
	if err != nil || len(out) != 2 {
		t.Fatalf("Apply of valid objects: %v", err)
	}
}

// ---- Watch ----

// watch starts a watch that ends with the test.
func watch(t *testing.T, s store.Store, kind string, opts store.WatchOptions) <-chan store.Event {
	t.Helper()
	ch, err := s.Watch(ctx(t), kind, opts)
	if err != nil {
		t.Fatalf("Watch(%s, %+v): %v", kind, opts, err)
	}
	return ch
}

// next receives one event. The timeout only turns a hang into a failure; no
// test depends on timing.
func next(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed, want an event")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event in 30s")
	}
	return store.Event{}
}

type evSummary struct {
	Type store.EventType
	Key  string
}

func (e evSummary) String() string { return string(e.Type) + " " + e.Key }

// until reads events up to and including the Added event of sentinel key
// and returns those before it.
func until(t *testing.T, ch <-chan store.Event, sentinel string) []evSummary {
	t.Helper()
	var out []evSummary
	for {
		ev := next(t, ch)
		if ev.Type == store.Error {
			t.Fatalf("watch error: %v", ev.Err)
		}
		k := ev.Object.GetObjectMeta().Key()
		if ev.Type == store.Added && k == sentinel {
			return out
		}
		out = append(out, evSummary{ev.Type, k})
	}
}

func wantEvents(t *testing.T, what string, got []evSummary, want ...evSummary) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: events %v, want %v", what, got, want)
	}
}

func testWatchFromEmpty(t *testing.T, s store.Store) {
	a := mustCreate(t, s, Hardware("default", "a"))
	mustCreate(t, s, Hardware("default", "b"))
	ch := watch(t, s, model.KindHardware, store.WatchOptions{})
	seen := map[string]bool{}
	for range 2 {
		ev := next(t, ch)
		if ev.Type != store.Added {
			t.Fatalf("initial event %s, want ADDED", ev.Type)
		}
		seen[ev.Object.GetObjectMeta().Key()] = true
	}
	if !seen["default/a"] || !seen["default/b"] {
		t.Fatalf("initial events for %v, want default/a and default/b", seen)
	}
	a.GetObjectMeta().Labels = map[string]string{"x": "1"}
	upd, err := s.Update(ctx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, ch)
	if ev.Type != store.Modified || ev.Object.GetObjectMeta().Key() != "default/a" ||
		ev.Object.GetObjectMeta().ResourceVersion != upd.GetObjectMeta().ResourceVersion ||
		ev.Object.GetObjectMeta().Labels["x"] != "1" {
		t.Fatalf("after update: %s %+v", ev.Type, ev.Object)
	}
	if err := s.Delete(ctx(t), model.KindHardware, "default", "a", ""); err != nil {
		t.Fatal(err)
	}
	ev = next(t, ch)
	if ev.Type != store.Deleted || ev.Object.GetObjectMeta().Key() != "default/a" {
		t.Fatalf("after delete: %s %+v", ev.Type, ev.Object)
	}
	if ev.Object.GetObjectMeta().Labels["x"] != "1" {
		t.Errorf("Deleted event does not carry the last state: %+v", ev.Object.GetObjectMeta())
	}
	if rvOf(t, ev.Object) <= rvOf(t, upd) {
		t.Errorf("Deleted event resourceVersion %s, want the deletion's (after %s)",
			ev.Object.GetObjectMeta().ResourceVersion, upd.GetObjectMeta().ResourceVersion)
	}
	_, listRV, err := s.List(ctx(t), model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rvOf(t, ev.Object) > parseRV(t, listRV) {
		t.Errorf("deletion resourceVersion %d is after the list's %s", rvOf(t, ev.Object), listRV)
	}
	// Other kinds' changes are not on this watch.
	mustCreate(t, s, Workflow("default", "w", "a"))
	mustCreate(t, s, Hardware("default", "sentinel"))
	wantEvents(t, "after other kind", until(t, ch, "default/sentinel"))
}

func testWatchFromVersion(t *testing.T, s store.Store) {
	a := mustCreate(t, s, Hardware("default", "a"))
	rv0 := a.GetObjectMeta().ResourceVersion
	a.GetObjectMeta().Labels = map[string]string{"v": "2"}
	if _, err := s.Update(ctx(t), a); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, Hardware("default", "b"))
	mustCreate(t, s, Workflow("default", "w", "a")) // another kind
	if err := s.Delete(ctx(t), model.KindHardware, "default", "a", ""); err != nil {
		t.Fatal(err)
	}
	ch := watch(t, s, model.KindHardware, store.WatchOptions{ResourceVersion: rv0})
	mustCreate(t, s, Hardware("default", "sentinel"))
	wantEvents(t, "watch from create's version", until(t, ch, "default/sentinel"),
		evSummary{store.Modified, "default/a"},
		evSummary{store.Added, "default/b"},
		evSummary{store.Deleted, "default/a"})

	// Replayed events carry the versions the changes had, increasing.
	ch = watch(t, s, model.KindHardware, store.WatchOptions{ResourceVersion: rv0})
	last := parseRV(t, rv0)
	for range 3 {
		ev := next(t, ch)
		if rv := rvOf(t, ev.Object); rv <= last {
			t.Errorf("replayed %s %s at %d, not after %d", ev.Type, ev.Object.GetObjectMeta().Key(), rv, last)
		} else {
			last = rv
		}
	}
}

func testWatchFromListVersion(t *testing.T, s store.Store) {
	mustCreate(t, s, Hardware("default", "a"))
	_, rv, err := s.List(ctx(t), model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch := watch(t, s, model.KindHardware, store.WatchOptions{ResourceVersion: rv})
	mustCreate(t, s, Hardware("default", "b"))
	mustCreate(t, s, Hardware("default", "sentinel"))
	wantEvents(t, "watch from list version", until(t, ch, "default/sentinel"),
		evSummary{store.Added, "default/b"})
}

// testWatchTooOld writes exactly as many objects as the store remembers
// after a first one: watching from the first write's version still works
// (it needs exactly the remembered events), and one write later it is
// gone.
func testWatchTooOld(t *testing.T, s store.Store, history int) {
	first := mustCreate(t, s, Hardware("default", "first"))
	rv := first.GetObjectMeta().ResourceVersion
	watchFrom := func() error {
		wctx, cancel := context.WithCancel(ctx(t))
		defer cancel()
		_, err := s.Watch(wctx, model.KindHardware, store.WatchOptions{ResourceVersion: rv})
		return err
	}
	// Concurrent writers, as a busy server has them: each is one event
	// whatever order they commit in.
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < history; i += workers {
				if _, err := s.Create(ctx(t), Hardware("default", fmt.Sprintf("h-%d", i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := watchFrom(); err != nil {
		t.Fatalf("Watch from %s after %d more writes (the history's length) = %v; want nil", rv, history, err)
	}
	mustCreate(t, s, Hardware("default", "one-more"))
	if err := watchFrom(); !errors.Is(err, store.ErrGone) {
		t.Fatalf("Watch from %s after %d more writes = %v; want ErrGone", rv, history+1, err)
	}
}

func testWatchFilters(t *testing.T, s store.Store) {
	sel, err := labels.Parse("app=web")
	if err != nil {
		t.Fatal(err)
	}
	fields, err := store.ParseFieldSelector(model.KindHardware, "spec.agentID!=skip")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(ns, name, app, agent string) model.Object {
		h := Hardware(ns, name)
		h.Labels = map[string]string{"app": app}
		h.Spec.AgentID = agent
		return mustCreate(t, s, h)
	}
	pre := mk("ns1", "pre", "web", "x") // matches: initial ADDED
	mk("ns1", "pre-db", "db", "x")
	mk("ns2", "pre-other", "web", "x")

	opts := store.WatchOptions{Namespace: "ns1", Labels: sel, Fields: fields}
	ch := watch(t, s, model.KindHardware, opts)
	ev := next(t, ch)
	if ev.Type != store.Added || ev.Object.GetObjectMeta().Key() != "ns1/pre" {
		t.Fatalf("initial event %s %s, want ADDED ns1/pre", ev.Type, ev.Object.GetObjectMeta().Key())
	}
	_, rv, err := s.List(ctx(t), model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	mk("ns1", "web-1", "web", "x")      // yes
	mk("ns1", "db-1", "db", "x")        // wrong label
	mk("ns2", "web-2", "web", "x")      // wrong namespace
	mk("ns1", "skipped", "web", "skip") // excluded by field
	p := pre.(*model.Hardware)
	p.Spec.AgentID = "y"
	if _, err := s.Update(ctx(t), p); err != nil { // yes: Modified
		t.Fatal(err)
	}
	if err := s.Delete(ctx(t), model.KindHardware, "ns1", "db-1", ""); err != nil { // no
		t.Fatal(err)
	}
	if err := s.Delete(ctx(t), model.KindHardware, "ns1", "web-1", ""); err != nil { // yes
		t.Fatal(err)
	}
	mk("ns1", "sentinel", "web", "x")
	want := []evSummary{
		{store.Added, "ns1/web-1"},
		{store.Modified, "ns1/pre"},
		{store.Deleted, "ns1/web-1"},
	}
	wantEvents(t, "filtered live events", until(t, ch, "ns1/sentinel"), want...)

	// The same filter applies to replayed history.
	ch = watch(t, s, model.KindHardware, store.WatchOptions{Namespace: "ns1", Labels: sel, Fields: fields, ResourceVersion: rv})
	wantEvents(t, "filtered replay", until(t, ch, "ns1/sentinel"), want...)
}

func testWatchCancel(t *testing.T, s store.Store) {
	mustCreate(t, s, Hardware("default", "a"))
	wctx, cancel := context.WithCancel(ctx(t))
	ch, err := s.Watch(wctx, model.KindHardware, store.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	// The channel closes (possibly after the initial event) once ctx ends.
	for range ch {
	}
	// The store keeps working with a cancelled watch around.
	mustCreate(t, s, Hardware("default", "b"))
}

// ---- copies ----

func testCopies(t *testing.T, s store.Store) {
	in := Hardware("default", "m1", "00:00:00:00:00:01")
	in.Labels = map[string]string{"k": "v"}
	created := mustCreate(t, s, in).(*model.Hardware)
	ch := watch(t, s, model.KindHardware, store.WatchOptions{})
	ev := next(t, ch)

	// Mutate everything we were given, and our input.
	in.Labels["k"] = "input"
	in.Spec.Interfaces[0].DHCP.MAC = "ff:ff:ff:ff:ff:ff"
	created.Labels["k"] = "created"
	created.Spec.Interfaces[0].DHCP.MAC = "ff:ff:ff:ff:ff:fe"
	ev.Object.GetObjectMeta().Labels["k"] = "event"
	got := mustGet(t, s, model.KindHardware, "default", "m1").(*model.Hardware)
	got.Labels["k"] = "get"
	got.Spec.Interfaces[0].DHCP.MAC = "ff:ff:ff:ff:ff:fd"
	list, _, err := s.List(ctx(t), model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list[0].GetObjectMeta().Labels["k"] = "list"
	idx := byIndex(t, s, model.KindHardware, store.IndexMAC, "00:00:00:00:00:01")
	idx[0].GetObjectMeta().Labels["k"] = "index"

	check := func(what string) {
		t.Helper()
		h := mustGet(t, s, model.KindHardware, "default", "m1").(*model.Hardware)
		if h.Labels["k"] != "v" || h.Spec.Interfaces[0].DHCP.MAC != "00:00:00:00:00:01" {
			t.Errorf("%s: stored object changed: labels %v, mac %s", what, h.Labels, h.Spec.Interfaces[0].DHCP.MAC)
		}
	}
	check("after mutating returned objects")
	wantKeys(t, "index after mutating returned objects", byIndex(t, s, model.KindHardware, store.IndexMAC, "00:00:00:00:00:01"), "default/m1")

	// Two watchers get independent objects.
	ch2 := watch(t, s, model.KindHardware, store.WatchOptions{ResourceVersion: created.ResourceVersion})
	h := mustGet(t, s, model.KindHardware, "default", "m1")
	h.GetObjectMeta().Labels["k"] = "v2"
	if _, err := s.Update(ctx(t), h); err != nil {
		t.Fatal(err)
	}
	e1, e2 := next(t, ch), next(t, ch2)
	e1.Object.GetObjectMeta().Labels["k"] = "mutated"
	if e2.Object.GetObjectMeta().Labels["k"] != "v2" {
		t.Errorf("watchers share objects: second sees %v", e2.Object.GetObjectMeta().Labels)
	}
}

// ---- concurrency ----

func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, each = 32, 20
	type result struct {
		rvs []uint64
		err error
	}
	results := make([]result, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			r := &results[w]
			for i := range each {
				name := fmt.Sprintf("w%d-%d", w, i)
				o, err := s.Create(ctx(t), Hardware("default", name))
				if err != nil {
					r.err = err
					return
				}
				rv, err := strconv.ParseUint(o.GetObjectMeta().ResourceVersion, 10, 64)
				if err != nil {
					r.err = err
					return
				}
				r.rvs = append(r.rvs, rv)
				o.GetObjectMeta().Labels = map[string]string{"i": strconv.Itoa(i)}
				o, err = s.Update(ctx(t), o)
				if err != nil {
					r.err = err
					return
				}
				rv, _ = strconv.ParseUint(o.GetObjectMeta().ResourceVersion, 10, 64)
				r.rvs = append(r.rvs, rv)
			}
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for w, r := range results {
		if r.err != nil {
			t.Fatalf("writer %d: %v", w, r.err)
		}
		for i, rv := range r.rvs {
			if seen[rv] {
				t.Errorf("resourceVersion %d handed out twice", rv)
			}
			seen[rv] = true
			if i > 0 && rv <= r.rvs[i-1] {
				t.Errorf("writer %d: resourceVersion %d after %d", w, rv, r.rvs[i-1])
			}
		}
	}
	objs, rv, err := s.List(ctx(t), model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != writers*each {
		t.Errorf("List has %d objects, want %d", len(objs), writers*each)
	}
	listRV := parseRV(t, rv)
	for v := range seen {
		if v > listRV {
			t.Errorf("list version %d is before write %d", listRV, v)
		}
	}
}

// testBootProfiles checks Anvil's own kind: its apiVersion, a list by
// namespace (what the boot policy falls back to), its watch, and the
// Hardware field selector on bootProfileRef.
func testBootProfiles(t *testing.T, s store.Store) {
	ch := watch(t, s, model.KindBootProfile, store.WatchOptions{Namespace: "lab"})
	for _, p := range []*model.BootProfile{
		{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "flatcar"}, Spec: model.BootProfileSpec{Kernel: "/k", Selector: []string{"role=worker"}}},
		{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "talos"}, Spec: model.BootProfileSpec{Kernel: "/t"}},
		{ObjectMeta: model.ObjectMeta{Namespace: "other", Name: "flatcar"}, Spec: model.BootProfileSpec{Kernel: "/k"}},
	} {
		mustCreate(t, s, p)
	}
	got := mustGet(t, s, model.KindBootProfile, "lab", "flatcar").(*model.BootProfile)
	if got.APIVersion != model.AnvilAPIVersion || got.Kind != model.KindBootProfile || got.Spec.Selector[0] != "role=worker" {
		t.Errorf("Get = %+v", got)
	}
	objs, _, err := s.List(ctx(t), model.KindBootProfile, store.ListOptions{Namespace: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "List(lab)", objs, "lab/flatcar", "lab/talos")
	var evs []evSummary
	for range 2 {
		ev := next(t, ch)
		evs = append(evs, evSummary{ev.Type, ev.Object.GetObjectMeta().Key()})
	}
	wantEvents(t, "watch lab", evs, evSummary{store.Added, "lab/flatcar"}, evSummary{store.Added, "lab/talos"})

	h := Hardware("lab", "m1", "00:00:00:00:00:01")
	h.Spec.BootProfileRef = &model.LocalObjectReference{Name: "talos"}
	mustCreate(t, s, h)
	mustCreate(t, s, Hardware("lab", "m2", "00:00:00:00:00:02"))
	objs, _, err = s.List(ctx(t), model.KindHardware, store.ListOptions{Fields: []store.FieldRequirement{{Field: "spec.bootProfileRef.name", Value: "talos"}}})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "Hardware with bootProfileRef talos", objs, "lab/m1")
}

// testBMCKinds checks Rufio's kinds and the core Secret: their apiVersions,
// a status kept by an Apply that carries none (a re-applied manifest must
// not forget a Machine's power state or a Job's outcome), a generation
// that follows a Secret's sealed content, and the Job field selector on
// spec.machineRef.name.
func testBMCKinds(t *testing.T, s store.Store, secretGenerations bool) {
	on := "on"
	m := &model.Machine{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "bmc1"},
		Spec: model.MachineSpec{Connection: model.Connection{Host: "10.0.0.9", AuthSecretRef: model.SecretReference{Name: "s"}}}}
	mustCreate(t, s, m)
	cur := mustGet(t, s, model.KindMachine, "lab", "bmc1").(*model.Machine)
	cur.Status.PowerState = model.PowerOn
	if _, err := s.Update(ctx(t), cur); err != nil {
		t.Fatal(err)
	}
	again := model.DeepCopy(m)
	again.Spec.Connection.Port = 6230
	if _, err := s.Apply(ctx(t), []model.Object{again}); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, model.KindMachine, "lab", "bmc1").(*model.Machine)
	if got.APIVersion != model.BMCAPIVersion || got.Kind != model.KindMachine || got.Spec.Connection.Port != 6230 || got.Status.PowerState != model.PowerOn {
		t.Errorf("Machine after Apply = %+v; want the new port and the kept power state", got)
	}
	for _, j := range []*model.Job{
		{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "j1"}, Spec: model.JobSpec{MachineRef: model.ObjectReference{Name: "bmc1"}, Tasks: []model.BMCAction{{PowerAction: &on}}}},
		{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "j2"}, Spec: model.JobSpec{MachineRef: model.ObjectReference{Name: "bmc2"}, Tasks: []model.BMCAction{{PowerAction: &on}}}},
	} {
		mustCreate(t, s, j)
	}
	objs, _, err := s.List(ctx(t), model.KindJob, store.ListOptions{Fields: []store.FieldRequirement{{Field: "spec.machineRef.name", Value: "bmc1"}}})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "Jobs of bmc1", objs, "lab/j1")
	task := &model.BMCTask{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: model.TaskName("j1", 0), Labels: map[string]string{model.BMCJobLabel: "j1"}},
		Spec: model.TaskSpec{Task: model.BMCAction{PowerAction: &on}}}
	mustCreate(t, s, task)
	if got := mustGet(t, s, model.KindTask, "lab", "j1-task-0"); got.GetTypeMeta().APIVersion != model.BMCAPIVersion {
		t.Errorf("Task apiVersion = %q", got.GetTypeMeta().APIVersion)
	}
	sec := &model.Secret{ObjectMeta: model.ObjectMeta{Namespace: "lab", Name: "s"}, Type: "kubernetes.io/basic-auth", Sealed: "v1:AAAA", Keys: []string{"password", "username"}}
	first := mustCreate(t, s, sec).GetObjectMeta().Generation
	sec.Sealed = "v1:BBBB"
	updated, err := s.Update(ctx(t), sec)
	if err != nil {
		t.Fatal(err)
	}
	if secretGenerations && updated.GetObjectMeta().Generation != first+1 ||
		updated.(*model.Secret).Sealed != "v1:BBBB" || updated.(*model.Secret).Type != "kubernetes.io/basic-auth" ||
		!slices.Equal(updated.(*model.Secret).Keys, []string{"password", "username"}) || updated.GetTypeMeta().APIVersion != model.CoreAPIVersion {
		t.Errorf("Secret after a new sealed value: generation %d (was %d), %+v", updated.GetObjectMeta().Generation, first, updated)
	}
}

// testShared checks the shared reads and writes (store.Sharer, with the
// helpers that fall back to copies for a store without them): they answer
// as Get, ByIndex and Update do, a write never changes an object handed
// out before it (shared objects are immutable), and a shared watch sees
// the same events.
func testShared(t *testing.T, s store.Store) {
	wf := mustCreate(t, s, Workflow("default", "w1", "hw1", "agent-1")).(*model.Workflow)
	ch := watch(t, s, model.KindWorkflow, store.WatchOptions{ResourceVersion: wf.ResourceVersion, Shared: true})

	got, err := store.GetShared(ctx(t), s, model.KindWorkflow, "default", "w1")
	if err != nil {
		t.Fatalf("GetShared: %v", err)
	}
	old := got.(*model.Workflow)
	if old.ResourceVersion != wf.ResourceVersion || old.Status.Tasks[0].AgentID != "agent-1" {
		t.Fatalf("GetShared = rv %s %+v, want rv %s as created", old.ResourceVersion, old.Status.Tasks, wf.ResourceVersion)
	}
	objs, err := store.SharedIndexer(s).ByIndex(ctx(t), model.KindWorkflow, store.IndexAgentID, "agent-1")
	if err != nil || len(objs) != 1 || objs[0].GetObjectMeta().ResourceVersion != wf.ResourceVersion {
		t.Fatalf("SharedIndexer.ByIndex = %v, %v; want w1 at rv %s", keys(objs), err, wf.ResourceVersion)
	}

	// A status change made copy-on-write, written through UpdateShared
	// where the store has it.
	next1 := model.WithPrivateStatus(old)
	next1.Status.State = model.StateRunning
	next1.Status.Tasks[0].AgentID = "agent-2"
	var updated model.Object
	if sh := store.AsSharer(s); sh != nil {
		updated, err = sh.UpdateShared(ctx(t), next1)
	} else {
		updated, err = s.Update(ctx(t), next1)
	}
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	uw := updated.(*model.Workflow)
	if rvOf(t, uw) <= rvOf(t, wf) || uw.Status.State != model.StateRunning {
		t.Fatalf("updated = rv %s state %q; want a newer rv and RUNNING", uw.ResourceVersion, uw.Status.State)
	}
	if old.ResourceVersion != wf.ResourceVersion || old.Status.State != "" || old.Status.Tasks[0].AgentID != "agent-1" {
		t.Fatalf("the object read before the write changed: rv %s state %q tasks %+v", old.ResourceVersion, old.Status.State, old.Status.Tasks)
	}
	if objs := byIndex(t, s, model.KindWorkflow, store.IndexAgentID, "agent-2"); len(objs) != 1 {
		t.Fatalf("index after the shared update: %v, want w1 under agent-2", keys(objs))
	}

	// The stale version conflicts, shared or not.
	stale := model.WithPrivateStatus(old)
	if sh := store.AsSharer(s); sh != nil {
		_, err = sh.UpdateShared(ctx(t), stale)
	} else {
		_, err = s.Update(ctx(t), stale)
	}
	wantErr(t, "update from a stale shared read", err, store.ErrConflict)

	ev := next(t, ch)
	if ev.Type != store.Modified || ev.Object.GetObjectMeta().ResourceVersion != uw.ResourceVersion ||
		ev.Object.(*model.Workflow).Status.State != model.StateRunning {
		t.Fatalf("shared watch event = %s %+v, want MODIFIED at rv %s", ev.Type, ev.Object, uw.ResourceVersion)
	}
	if err := s.Delete(ctx(t), model.KindWorkflow, "default", "w1", ""); err != nil {
		t.Fatal(err)
	}
	ev = next(t, ch)
	if ev.Type != store.Deleted || rvOf(t, ev.Object) <= rvOf(t, uw) {
		t.Fatalf("shared watch event = %s at rv %s, want DELETED after rv %s", ev.Type, ev.Object.GetObjectMeta().ResourceVersion, uw.ResourceVersion)
	}
	if uw.ResourceVersion == ev.Object.GetObjectMeta().ResourceVersion {
		t.Fatal("the Deleted event's resourceVersion was written into the shared object")
	}
}
