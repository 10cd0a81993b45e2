package kube_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/deploy/crds/crdstest"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/kube"
	"github.com/anvilproj/anvil/internal/testtool"
)

// Other writers and an API server that goes away: what the issue's "Bad
// input and faults" asks of the store. One API server for all of them;
// each subtest uses objects of its own.
func TestFaults(t *testing.T) {
	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	crdstest.Install(t, c, defs)
	rc := c.RESTConfig()
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, kube.Config{REST: rc, Log: testLog(t)})

	t.Run("RaceWithAnotherWriter", func(t *testing.T) { testRace(t, s, dyn) })
	t.Run("ForeignFieldsKept", func(t *testing.T) { testForeignFields(t, s, dyn) })
	// Last: it stops the API server for a while.
	t.Run("APIServerPaused", func(t *testing.T) {
		testPaused(t, c, open(t, kube.Config{REST: rc, RequestTimeout: 2 * time.Second, Log: testLog(t)}))
	})
}

// mergePatch patches an object as `kubectl patch --type merge` does:
// another tool, beside Anvil.
func mergePatch(t *testing.T, dyn dynamic.Interface, kind, name string, patch map[string]any, sub ...string) error {
	t.Helper()
	b, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	_, err = dyn.Resource(kube.Resource(kind)).Namespace("default").Patch(t.Context(), name, types.MergePatchType, b, metav1.PatchOptions{}, sub...)
	return err
}

func getRaw(t *testing.T, dyn dynamic.Interface, kind, name string) map[string]any {
	t.Helper()
	u, err := dyn.Resource(kube.Resource(kind)).Namespace("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s: %v", kind, name, err)
	}
	return u.Object
}

// testRace: another tool patches a Workflow while Anvil updates it, as
// fast as both can. Anvil's conditional read-modify-write loses to no one
// (a stale version is ErrConflict; it re-reads and tries again), and its
// unconditional updates keep the other tool's fields: every change of
// both writers is in the object at the end.
func testRace(t *testing.T, s *kube.Store, dyn dynamic.Interface) {
	const rounds = 30
	wf := &model.Workflow{ObjectMeta: model.ObjectMeta{Name: "raced", Namespace: "default"},
		Spec: model.WorkflowSpec{TemplateRef: "t", HardwareRef: "h", HardwareMap: map[string]string{"device_1": "02:00:00:00:00:01"}}}
	if _, err := s.Create(t.Context(), wf); err != nil {
		t.Fatal(err)
	}

	// Round 1: labels from the other tool against annotations from
	// Anvil's conditional updates (both are metadata: each write
	// replaces the other's version).
	var wg sync.WaitGroup
	var conflicts int
	wg.Go(func() {
		for i := range rounds {
			if err := mergePatch(t, dyn, model.KindWorkflow, "raced", map[string]any{
				"metadata": map[string]any{"labels": map[string]any{fmt.Sprintf("ext-%d", i): "x"}}}); err != nil {
				t.Errorf("external patch %d: %v", i, err)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range rounds {
			for {
				o, err := s.Get(t.Context(), model.KindWorkflow, "default", "raced")
				if err != nil {
					t.Errorf("get: %v", err)
					return
				}
				w := o.(*model.Workflow)
				if w.Annotations == nil {
					w.Annotations = map[string]string{}
				}
				w.Annotations[fmt.Sprintf("anvil-%d", i)] = "y"
				_, err = s.Update(t.Context(), w) // conditional: w carries its resourceVersion
				if errors.Is(err, store.ErrConflict) {
					conflicts++
					continue
				}
				if err != nil {
					t.Errorf("update %d: %v", i, err)
					return
				}
				break
			}
		}
	})
	wg.Wait()
	t.Logf("conditional updates refused as conflicts and retried: %d", conflicts)

	// Round 2: the other tool sets a field Anvil does not model while
	// Anvil's unconditional updates change the spec it does.
	wg.Go(func() {
		for i := range rounds {
			if err := mergePatch(t, dyn, model.KindWorkflow, "raced", map[string]any{
				"spec": map[string]any{"externalCounter": i}}); err != nil {
				t.Errorf("external patch %d: %v", i, err)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range rounds {
			o, err := s.Get(t.Context(), model.KindWorkflow, "default", "raced")
			if err != nil {
				t.Errorf("get: %v", err)
				return
			}
			w := o.(*model.Workflow)
			w.ResourceVersion = "" // unconditional
			w.Spec.HardwareMap["round"] = fmt.Sprint(i)
			if _, err := s.Update(t.Context(), w); err != nil {
				t.Errorf("unconditional update %d: %v", i, err)
				return
			}
		}
	})
	wg.Wait()
	if t.Failed() {
		return
	}

	raw := getRaw(t, dyn, model.KindWorkflow, "raced")
	meta := raw["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	for i := range rounds {
		if labels[fmt.Sprintf("ext-%d", i)] != "x" {
			t.Errorf("the other tool's label ext-%d was lost; labels %v", i, labels)
		}
		if ann[fmt.Sprintf("anvil-%d", i)] != "y" {
			t.Errorf("Anvil's annotation anvil-%d was lost; annotations %v", i, ann)
		}
	}
	spec := raw["spec"].(map[string]any)
	if got := spec["externalCounter"]; got != int64(rounds-1) {
		t.Errorf("spec.externalCounter = %v (%T); want the other tool's last write, %d", got, got, rounds-1)
	}
	if got := spec["hardwareMap"].(map[string]any)["round"]; got != fmt.Sprint(rounds-1) {
		t.Errorf("spec.hardwareMap.round = %v; want Anvil's last write, %d", got, rounds-1)
	}
	// And the store's view agrees with the API server's.
	testtool.WaitFor(t, "the cache to reflect the last writes", func() bool {
		o, err := s.Get(t.Context(), model.KindWorkflow, "default", "raced")
		if err != nil {
			t.Fatal(err)
		}
		w := o.(*model.Workflow)
		return w.Spec.HardwareMap["round"] == fmt.Sprint(rounds-1) && len(w.Labels) == rounds && len(w.Annotations) == rounds
	})
}

// testForeignFields: objects another tool created with fields Anvil does
// not model — in a Workflow's spec and status, in metadata (annotations,
// finalizers, owner references), in a Template — keep them through
// Anvil's writes of the fields it does model.
func testForeignFields(t *testing.T, s *kube.Store, dyn dynamic.Interface) {
	ctx := t.Context()
	owner := []any{map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellMachine",
		"name": "m-0", "uid": "0b6c9c59-1f7e-4c3a-a3c1-9d1b0c2f5e11", "controller": true, "blockOwnerDeletion": true}}
	foreignMeta := func(name string) map[string]any {
		return map[string]any{"name": name, "namespace": "default",
			"annotations":     map[string]any{"example.com/note": "kept"},
			"finalizers":      []any{"example.com/cleanup"},
			"ownerReferences": owner}
	}
	create := func(kind string, obj map[string]any, status map[string]any) {
		t.Helper()
		r := dyn.Resource(kube.Resource(kind)).Namespace("default")
		u, err := r.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s: %v", kind, err)
		}
		t.Cleanup(func() {
			// The finalizer would keep the object; the next subtests
			// do not mind, but leave the cluster as found.
			_ = mergePatch(t, dyn, kind, u.GetName(), map[string]any{"metadata": map[string]any{"finalizers": nil}})
		})
		if status != nil {
			u.Object["status"] = status
			if _, err := r.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("status of %s: %v", kind, err)
			}
		}
	}
	create(model.KindTemplate, map[string]any{"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
		"metadata": foreignMeta("foreign-tpl"),
		"spec":     map[string]any{"data": "version: \"0.1\"\nname: a\n", "renderer": "gotemplate-v2"},
	}, map[string]any{"state": "", "validatedBy": "other-controller"})
	create(model.KindWorkflow, map[string]any{"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
		"metadata": foreignMeta("foreign-wf"),
		"spec": map[string]any{"templateRef": "foreign-tpl", "hardwareRef": "h",
			"hardwareMap": map[string]any{"device_1": "02:00:00:00:00:02"},
			"priority":    map[string]any{"class": "batch", "weight": 3}},
	}, map[string]any{"state": "STATE_PENDING", "externalTracking": map[string]any{"ticket": "OPS-42"}})

	create(model.KindHardware, map[string]any{"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
		"metadata": foreignMeta("foreign-hw"),
		"spec": map[string]any{"interfaces": []any{
			map[string]any{"dhcp": map[string]any{"mac": "02:00:00:00:00:05", "portLabel": "swp5"},
				"netboot": map[string]any{"allowPXE": true, "allowWorkflow": true, "httpBootURI": "http://boot.example/x"}},
			map[string]any{"dhcp": map[string]any{"mac": "02:00:00:00:00:06"}, "bond": "bond0"},
		}},
	}, nil)

	// Anvil sees them, then writes what it models: the Template's data,
	// the Workflow's labels, spec and status, the Hardware's allowPXE
	// (inside a list: spec.interfaces).
	var tpl *model.Template
	var wf *model.Workflow
	var hw *model.Hardware
	testtool.WaitFor(t, "the objects in the cache", func() bool {
		to, err1 := s.Get(ctx, model.KindTemplate, "default", "foreign-tpl")
		wo, err2 := s.Get(ctx, model.KindWorkflow, "default", "foreign-wf")
		ho, err3 := s.Get(ctx, model.KindHardware, "default", "foreign-hw")
		if err1 != nil || err2 != nil || err3 != nil {
			return false
		}
		tpl, wf, hw = to.(*model.Template), wo.(*model.Workflow), ho.(*model.Hardware)
		return wf.Status.State != ""
	})
	hw.Spec.Interfaces[0].Netboot.AllowPXE = model.Bool(false)
	if _, err := s.Update(ctx, hw); err != nil {
		t.Fatal(err)
	}
	hwAgain := model.DeepCopy(hw)
	hwAgain.ResourceVersion = ""
	hwAgain.Spec.Interfaces[1].DHCP.Hostname = "node6"
	if _, err := s.Update(ctx, hwAgain); err != nil {
		t.Fatal(err)
	}
	data := "version: \"0.1\"\nname: b\n"
	tpl.Spec.Data = &data
	if _, err := s.Update(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	wf.Labels = map[string]string{"anvil.dev/touched": "yes"}
	wf.Spec.HardwareMap["device_2"] = "02:00:00:00:00:03"
	wf.Status.State = model.StateRunning
	wf.Status.TemplateRendering = "successful"
	if _, err := s.Update(ctx, wf); err != nil {
		t.Fatal(err)
	}
	// An unconditional apply, as `anvil apply` of the same object
	// makes, too.
	again := model.DeepCopy(wf)
	again.ResourceVersion = ""
	again.Spec.HardwareMap["device_3"] = "02:00:00:00:00:04"
	if _, err := s.Apply(ctx, []model.Object{again}); err != nil {
		t.Fatal(err)
	}

	checkMeta := func(kind string, raw map[string]any) {
		t.Helper()
		meta := raw["metadata"].(map[string]any)
		if a, _ := meta["annotations"].(map[string]any); a["example.com/note"] != "kept" {
			t.Errorf("%s: the other tool's annotation was lost: %v", kind, meta["annotations"])
		}
		if f, _ := meta["finalizers"].([]any); len(f) != 1 || f[0] != "example.com/cleanup" {
			t.Errorf("%s: finalizers = %v; want the other tool's", kind, meta["finalizers"])
		}
		if o, _ := meta["ownerReferences"].([]any); len(o) != 1 || o[0].(map[string]any)["name"] != "m-0" {
			t.Errorf("%s: ownerReferences = %v; want the other tool's", kind, meta["ownerReferences"])
		}
	}
	raw := getRaw(t, dyn, model.KindHardware, "foreign-hw")
	checkMeta("Hardware", raw)
	ifs := raw["spec"].(map[string]any)["interfaces"].([]any)
	if0, if1 := ifs[0].(map[string]any), ifs[1].(map[string]any)
	if nb := if0["netboot"].(map[string]any); nb["allowPXE"] != false || nb["httpBootURI"] != "http://boot.example/x" {
		t.Errorf("Hardware interfaces[0].netboot = %v; want Anvil's allowPXE false and the other tool's httpBootURI", nb)
	}
	if d := if0["dhcp"].(map[string]any); d["portLabel"] != "swp5" {
		t.Errorf("Hardware interfaces[0].dhcp = %v; want the other tool's portLabel kept", d)
	}
	if d := if1["dhcp"].(map[string]any); if1["bond"] != "bond0" || d["hostname"] != "node6" {
		t.Errorf("Hardware interfaces[1] = %v; want Anvil's hostname and the other tool's bond", if1)
	}

	raw = getRaw(t, dyn, model.KindTemplate, "foreign-tpl")
	checkMeta("Template", raw)
	if spec := raw["spec"].(map[string]any); spec["data"] != data || spec["renderer"] != "gotemplate-v2" {
		t.Errorf("Template spec = %v; want Anvil's data and the other tool's renderer", spec)
	}
	if st, _ := raw["status"].(map[string]any); st["validatedBy"] != "other-controller" {
		t.Errorf("Template status = %v; want the other tool's validatedBy kept", raw["status"])
	}

	raw = getRaw(t, dyn, model.KindWorkflow, "foreign-wf")
	checkMeta("Workflow", raw)
	if l := raw["metadata"].(map[string]any)["labels"].(map[string]any); l["anvil.dev/touched"] != "yes" {
		t.Errorf("Workflow labels = %v; want Anvil's", l)
	}
	spec := raw["spec"].(map[string]any)
	if p, _ := spec["priority"].(map[string]any); p["class"] != "batch" {
		t.Errorf("Workflow spec.priority = %v; want the other tool's, kept", spec["priority"])
	}
	if hm := spec["hardwareMap"].(map[string]any); hm["device_2"] == nil || hm["device_3"] == nil {
		t.Errorf("Workflow spec.hardwareMap = %v; want Anvil's device_2 and device_3", hm)
	}
	st := raw["status"].(map[string]any)
	if st["state"] != string(model.StateRunning) || st["templateRendering"] != "successful" {
		t.Errorf("Workflow status = %v; want Anvil's state and rendering", st)
	}
	if e, _ := st["externalTracking"].(map[string]any); e["ticket"] != "OPS-42" {
		t.Errorf("Workflow status.externalTracking = %v; want the other tool's, kept", st["externalTracking"])
	}
}

// testPaused: with the API server stopped (SIGSTOP: connections hang, as
// across a partition), reads are answered from the cache, and writes
// fail with store.ErrUnavailable once RequestTimeout has passed instead
// of hanging; once it answers again, writes go through and the cache
// follows.
func testPaused(t *testing.T, c *kubetest.Cluster, s *kube.Store) {
	ctx := t.Context()
	hw := &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "paused-hw", Namespace: "default"},
		Spec: model.HardwareSpec{Interfaces: []model.Interface{{DHCP: &model.DHCP{MAC: "02:00:00:00:00:09"}}}}}
	created, err := s.Create(ctx, hw)
	if err != nil {
		t.Fatal(err)
	}

	c.PauseAPIServer(t)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			c.ResumeAPIServer(t)
		}
	})
	if _, err := s.Get(ctx, model.KindHardware, "default", "paused-hw"); err != nil {
		t.Errorf("Get from the cache with the API server away: %v", err)
	}
	if objs, err := s.ByIndex(ctx, model.KindHardware, store.IndexMAC, "02:00:00:00:00:09"); err != nil || len(objs) != 1 {
		t.Errorf("ByIndex from the cache with the API server away = %d objects, %v; want the Hardware", len(objs), err)
	}

	// ctx has no deadline: only the store's own bound can end these.
	upd := model.DeepCopy(created).(*model.Hardware)
	upd.ResourceVersion = ""
	upd.Labels = map[string]string{"while": "paused"}
	_, err = s.Update(ctx, upd)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("Update with the API server away = %v; want store.ErrUnavailable saying it did not answer", err)
	}
	_, err = s.Create(ctx, &model.Hardware{ObjectMeta: model.ObjectMeta{Name: "paused-new", Namespace: "default"}})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Create with the API server away = %v; want store.ErrUnavailable", err)
	}
	t.Logf("the error a writer sees: %v", err)

	c.ResumeAPIServer(t)
	resumed = true
	// The write is retried, as a caller would, until it goes through.
	var out model.Object
	testtool.WaitFor(t, "a write once the API server is back", func() bool {
		out, err = s.Update(ctx, upd)
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Update after the pause: %v", err)
		}
		return err == nil
	})
	if out.GetObjectMeta().Labels["while"] != "paused" {
		t.Errorf("Update after the pause returned %v", out.GetObjectMeta().Labels)
	}
	got, err := s.Get(ctx, model.KindHardware, "default", "paused-hw")
	if err != nil || got.GetObjectMeta().Labels["while"] != "paused" {
		t.Errorf("Get after the write = %v, %v; want the label written", got, err)
	}
}
