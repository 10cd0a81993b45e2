package migrate_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/deploy/crds/crdstest"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/migrate"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/secrets"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/backend"
	"github.com/anvilproj/anvil/internal/store/kube"
)

// openBound keeps a broken API server from hanging a test; it measures
// nothing.
const openBound = time.Minute

// siteFile is a provisioned site's objects with their statuses.
const siteFile = "testdata/site.yaml"

// openStore opens the store cfg names, closed when the test ends.
func openStore(t *testing.T, cfg backend.Config) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), openBound)
	defer cancel()
	st, err := backend.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open %s store: %v", cfg.Kind, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// sealerIn opens (making it) the seal key where `anvil serve` keeps it in
// dataDir.
func sealerIn(t *testing.T, dataDir string) *secrets.Sealer {
	t.Helper()
	s, err := secrets.OpenSealer(filepath.Join(dataDir, "secrets", secrets.KeyFileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// loadSite stores the site's objects as the server would hold them: the
// Secret sealed with sealer, every status as the file gives it.
func loadSite(t *testing.T, st store.Store, sealer *secrets.Sealer) {
	t.Helper()
	data, err := os.ReadFile(siteFile)
	if err != nil {
		t.Fatal(err)
	}
	res, err := model.ParseManifests(siteFile, data)
	if err != nil {
		t.Fatal(err)
	}
	var objs []model.Object
	for _, d := range res.Docs {
		if s, ok := d.Object.(*model.Secret); ok {
			if err := sealer.Seal(s); err != nil {
				t.Fatal(err)
			}
		}
		objs = append(objs, d.Object)
	}
	if _, err := st.Apply(t.Context(), objs); err != nil {
		t.Fatal(err)
	}
}

// snapshot is what must survive a move: every object as JSON without the
// metadata a store owns, a Secret's values instead of their sealed form,
// and each object's creation time (the store's, or the one a move kept
// in model.AnnotationCreatedAt).
type snapshot struct {
	objects map[string]string // "Kind ns/name" -> JSON
	created map[string]string // "Kind ns/name" -> RFC 3339
}

func take(t *testing.T, st store.Store, open migrate.SecretOpener) snapshot {
	t.Helper()
	s := snapshot{objects: map[string]string{}, created: map[string]string{}}
	for _, kind := range model.Kinds {
		objs, _, err := st.List(t.Context(), kind, store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if sec, ok := o.(*model.Secret); ok && secrets.IsGenerated(sec) {
				continue // compared by generatedIn
			}
			m := o.GetObjectMeta()
			key := kind + " " + m.Key()
			if at, ok := m.Annotations[model.AnnotationCreatedAt]; ok {
				s.created[key] = at
				delete(m.Annotations, model.AnnotationCreatedAt)
				if len(m.Annotations) == 0 {
					m.Annotations = nil
				}
			} else if m.CreationTimestamp != nil {
				s.created[key] = m.CreationTimestamp.UTC().Format(time.RFC3339Nano)
			}
			m.UID, m.ResourceVersion, m.Generation, m.CreationTimestamp = "", "", 0, nil
			var v any = o
			if sec, ok := o.(*model.Secret); ok {
				vals, err := open(sec)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				sec.Data, sec.StringData, sec.Sealed, sec.Keys = nil, nil, "", nil
				v = struct {
					*model.Secret
					Values map[string][]byte
				}{sec, vals}
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			s.objects[key] = string(b)
		}
	}
	return s
}

// generatedIn opens the generated secrets of an embedded store's server.
func generatedIn(t *testing.T, dataDir string) *secrets.Store {
	t.Helper()
	g, err := secrets.Open(secrets.Config{Dir: filepath.Join(dataDir, "secrets")})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// sameGenerated fails t unless every generated secret of want reads from
// got with its value, kind and creation time (to the second: a cluster
// keeps no finer).
func sameGenerated(t *testing.T, stage string, want []secrets.Generated, got interface {
	Get(ns, name string) (string, secrets.Info, error)
}) {
	t.Helper()
	for _, w := range want {
		v, info, err := got.Get(w.Namespace, w.Name)
		switch {
		case err != nil:
			t.Errorf("%s: generated secret %s/%s: %v", stage, w.Namespace, w.Name, err)
		case v != w.Value || info.Kind != w.Kind || !info.Created.Equal(w.Created.Truncate(time.Second)):
			t.Errorf("%s: generated secret %s/%s = %q, %+v; want %q, %+v", stage, w.Namespace, w.Name, v, info, w.Value, w.Info)
		}
	}
}

// same fails t unless got holds exactly want's objects and creation times.
func same(t *testing.T, stage string, want, got snapshot) {
	t.Helper()
	for key, w := range want.objects {
		switch g, ok := got.objects[key]; {
		case !ok:
			t.Errorf("%s: %s is missing", stage, key)
		case g != w:
			t.Errorf("%s: %s =\n%s\nwant\n%s", stage, key, g, w)
		}
		if g, w := got.created[key], want.created[key]; g != w {
			t.Errorf("%s: %s created at %q; want %q", stage, key, g, w)
		}
	}
	for key := range got.objects {
		if _, ok := want.objects[key]; !ok {
			t.Errorf("%s: %s is not in the source", stage, key)
		}
	}
}

// TestRoundTripThroughKubernetes moves a provisioned site from the
// embedded store into a cluster (a real kube-apiserver) and from there
// into another embedded store with another seal key: every object, its
// status and its creation time arrive unchanged, and the BMC credentials
// still open at each step.
func TestRoundTripThroughKubernetes(t *testing.T) {
	ctx := t.Context()
	dirA := t.TempDir()
	sealA := sealerIn(t, dirA)
	a := openStore(t, backend.Config{DataDir: dirA})
	loadSite(t, a, sealA)
	want := take(t, a, sealA.Open)
	if len(want.objects) != 8 {
		t.Fatalf("the site holds %d objects; want 8", len(want.objects))
	}
	// Generated secrets a machine's config uses: the embedded store's
	// server keeps them in a file beside the store.
	genA := generatedIn(t, dirA)
	for _, name := range []string{"node07-join", "node07-host-key"} {
		kind := secrets.KindKubeadmToken
		if name == "node07-host-key" {
			kind = secrets.KindSSHEd25519
		}
		if _, err := genA.Secret("site-a", name, kind); err != nil {
			t.Fatal(err)
		}
	}
	wantGen := genA.All()

	var fileA bytes.Buffer
	res, err := migrate.Export(ctx, a, &fileA, migrate.ExportOptions{Unseal: sealA.Open, Source: dirA, Generated: wantGen})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total() != 10 || res.Counts[model.KindHardware] != 1 || res.Counts[model.KindSecret] != 3 {
		t.Errorf("export counted %s; want one Hardware, 3 Secrets (2 generated), 10 objects", res.Summary())
	}
	if out := fileA.String(); strings.Contains(out, "sealed:") || strings.Contains(out, "resourceVersion") || strings.Contains(out, "uid:") {
		t.Errorf("an --unseal export holds a sealed value or store-owned metadata:\n%s", out)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "3 Secrets are written with plain values") {
		t.Errorf("export warnings = %q; want one, that a Secret is in the clear", res.Warnings)
	}

	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	crdstest.Install(t, c, defs)
	k := openStore(t, backend.Config{Kind: backend.Kubernetes, Kubeconfig: c.WriteKubeconfig(t, t.TempDir())})
	// A Secret of another application in the same namespace: a cluster's
	// export leaves it out, as no Machine names it.
	other := &model.Secret{ObjectMeta: model.ObjectMeta{Namespace: "site-a", Name: "other-app"},
		Data: map[string]string{"token": base64.StdEncoding.EncodeToString([]byte("not anvil's"))}}
	if _, err := k.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := restore(t, k, "site.yaml", fileA.Bytes(), migrate.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	inCluster := take(t, k, sealA.ClusterKept().Open)
	delete(inCluster.objects, "Secret site-a/other-app")
	same(t, "in the cluster", want, inCluster)
	// The replicas read the generated secrets from the cluster.
	sameGenerated(t, "in the cluster", wantGen, &secrets.InStore{Store: k})

	// What kubectl and CAPT read: the Workflow's status as Tinkerbell
	// writes it, and the Secret's values plain.
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	wf, err := dyn.Resource(kube.Resource(model.KindWorkflow)).Namespace("site-a").Get(ctx, "node07-install", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, _, _ := unstructured.NestedString(wf.Object, "status", "state"); st != "SUCCESS" {
		t.Errorf("the cluster's Workflow status.state = %q; want SUCCESS", st)
	}
	actions, _, _ := unstructured.NestedSlice(wf.Object, "status", "tasks")
	if len(actions) != 1 {
		t.Errorf("the cluster's Workflow has %d status.tasks; want 1", len(actions))
	}
	sec, err := dyn.Resource(kube.Resource(model.KindSecret)).Namespace("site-a").Get(ctx, "bmc-node07", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pw, _, _ := unstructured.NestedString(sec.Object, "data", "password"); pw != base64.StdEncoding.EncodeToString([]byte("pässword with spaces: and {braces}")) {
		t.Errorf("the cluster's Secret data.password = %q; want the password, base64", pw)
	}

	// Restoring again is refused, and writes nothing.
	before, _, err := k.List(ctx, model.KindWorkflow, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restore(t, k, "site.yaml", fileA.Bytes(), migrate.RestoreOptions{}); err == nil ||
		!strings.Contains(err.Error(), "10 objects are already in the target") || !strings.Contains(err.Error(), "Workflow site-a/node07-install") {
		t.Errorf("a second restore = %v; want refused, naming the objects that exist", err)
	}
	after, _, err := k.List(ctx, model.KindWorkflow, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv := after[0].GetObjectMeta().ResourceVersion; rv != before[0].GetObjectMeta().ResourceVersion {
		t.Errorf("a refused restore wrote the Workflow (resourceVersion %s, was %s)", rv, before[0].GetObjectMeta().ResourceVersion)
	}

	// --overwrite rewrites every object, status through its subresource,
	// and the cluster still holds the site.
	res, err = restore(t, k, "site.yaml", fileA.Bytes(), migrate.RestoreOptions{Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "10 objects replaced") {
		t.Errorf("overwrite warnings = %q; want that 8 objects were replaced", res.Warnings)
	}
	inCluster = take(t, k, sealA.ClusterKept().Open)
	delete(inCluster.objects, "Secret site-a/other-app")
	same(t, "in the cluster after --overwrite", want, inCluster)

	var fileK bytes.Buffer
	if _, err := migrate.Export(ctx, k, &fileK, migrate.ExportOptions{AnvilSecretsOnly: true, Source: "cluster"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fileK.String(), "other-app") {
		t.Errorf("the cluster's export holds a Secret no Machine names:\n%s", fileK.String())
	}

	dirB := t.TempDir()
	sealB := sealerIn(t, dirB)
	b := openStore(t, backend.Config{DataDir: dirB})
	genB := generatedIn(t, dirB)
	if _, err := restore(t, b, "cluster.yaml", fileK.Bytes(), migrate.RestoreOptions{Sealer: sealB, Generated: genB}); err != nil {
		t.Fatal(err)
	}
	same(t, "back in an embedded store", want, take(t, b, sealB.Open))
	sameGenerated(t, "back in an embedded store", wantGen, generatedIn(t, dirB))
	if objs, _, err := b.List(ctx, model.KindSecret, store.ListOptions{}); err != nil {
		t.Fatal(err)
	} else if len(objs) != 1 {
		t.Errorf("the embedded store holds %d Secrets; want 1 (generated secrets go to their file)", len(objs))
	}
	got, err := b.Get(ctx, model.KindSecret, "site-a", "bmc-node07")
	if err != nil {
		t.Fatal(err)
	}
	if s := got.(*model.Secret); s.Sealed == "" || len(s.Data) > 0 {
		t.Errorf("the embedded store holds the Secret unsealed: %+v", s)
	} else if _, err := sealA.Open(s); err == nil {
		t.Error("the Secret restored with seal key B opens with key A")
	}
}

// restore is Parse and Restore, as the command runs them.
func restore(t *testing.T, st store.Store, source string, data []byte, opts migrate.RestoreOptions) (migrate.Result, error) {
	t.Helper()
	f, err := migrate.Parse(source, data)
	if err != nil {
		return migrate.Result{}, err
	}
	return migrate.Restore(t.Context(), st, f, opts)
}

// empty fails t unless st holds no object of any kind.
func empty(t *testing.T, st store.Store) {
	t.Helper()
	for _, kind := range model.Kinds {
		objs, _, err := st.List(t.Context(), kind, store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			t.Errorf("a refused restore wrote %s %s", kind, o.GetObjectMeta().Key())
		}
	}
}

const goodHardware = `apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: node01}
spec:
  interfaces:
    - dhcp: {mac: "3c:ec:ef:00:00:01", arch: x86_64}
`

// TestRestoreRefusesBadInput: a file with one bad document is refused with
// an error naming that document, and nothing of it is written, not even
// the good documents before it.
func TestRestoreRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		want []string // in the error
	}{
		{
			name: "unknown kind",
			file: goodHardware + "---\napiVersion: example.org/v1\nkind: Gizmo\nmetadata: {name: g}\n",
			want: []string{"site.yaml:", "document 2", `unknown kind "Gizmo"`},
		},
		{
			name: "field of the wrong type",
			file: goodHardware + "---\napiVersion: tinkerbell.org/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec: {templateRef: t, hardwareRef: node01}\nstatus: {tasks: \"not a list\"}\n",
			want: []string{"site.yaml:12: document 2", "status.tasks: cannot use string"},
		},
		{
			name: "broken YAML",
			file: goodHardware + "---\nkind: Hardware\nmetadata: {name: [unclosed\n",
			want: []string{"document 2", "invalid YAML"},
		},
		{
			name: "invalid object",
			file: goodHardware + "---\napiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: Not_A_Name}\n",
			want: []string{"document 2", "metadata.name"},
		},
		{
			name: "defined twice",
			file: goodHardware + "---\n" + goodHardware,
			want: []string{"document 2 (Hardware default/node01)", "defined again"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := openStore(t, backend.Config{DataDir: dir})
			_, err := restore(t, st, "site.yaml", []byte(tc.file), migrate.RestoreOptions{Sealer: sealerIn(t, dir)})
			if err == nil {
				t.Fatal("Restore succeeded")
			}
			for _, w := range append(tc.want, "nothing written") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Restore = %v; want it to say %q", err, w)
				}
			}
			empty(t, st)
		})
	}
}

// TestSealedSecrets: an export without --unseal keeps a Secret sealed,
// and says so; an embedded store with the same key takes it, one with
// another key refuses the whole file, naming the Secret.
func TestSealedSecrets(t *testing.T) {
	ctx := t.Context()
	dirA := t.TempDir()
	sealA := sealerIn(t, dirA)
	a := openStore(t, backend.Config{DataDir: dirA})
	loadSite(t, a, sealA)
	var file bytes.Buffer
	res, err := migrate.Export(ctx, a, &file, migrate.ExportOptions{Source: dirA})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "1 Secret is written sealed (site-a/bmc-node07)") {
		t.Errorf("export warnings = %q; want that the Secret is written sealed", res.Warnings)
	}
	if strings.Contains(file.String(), "pässword") || strings.Contains(file.String(), "\ndata:") {
		t.Errorf("a sealed export names a value:\n%s", file.String())
	}

	dirB := t.TempDir()
	b := openStore(t, backend.Config{DataDir: dirB})
	_, err = restore(t, b, "site.yaml", file.Bytes(), migrate.RestoreOptions{Sealer: sealerIn(t, dirB)})
	if err == nil || !strings.Contains(err.Error(), "Secret site-a/bmc-node07") || !strings.Contains(err.Error(), "--unseal") {
		t.Errorf("restore with another key = %v; want refused, naming the Secret and --unseal", err)
	}
	empty(t, b)

	// The source's key (restore --seal-key-file) opens it.
	if _, err := restore(t, b, "site.yaml", file.Bytes(), migrate.RestoreOptions{Sealer: sealA}); err != nil {
		t.Fatal(err)
	}
	same(t, "restored with the source's key", take(t, a, sealA.Open), take(t, b, sealA.Open))
}

// TestRestoreOverwrite: objects the target holds are refused, naming them,
// with nothing written — not even the file's new objects; --overwrite
// replaces them.
func TestRestoreOverwrite(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st := openStore(t, backend.Config{DataDir: dir})
	opts := migrate.RestoreOptions{Sealer: sealerIn(t, dir)}
	if _, err := restore(t, st, "one.yaml", []byte(goodHardware), opts); err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(goodHardware, "metadata: {name: node01}", "metadata: {name: node01, labels: {rack: r9}}", 1)
	file := []byte(changed + "---\n" + strings.ReplaceAll(goodHardware, "01", "02"))
	_, err := restore(t, st, "two.yaml", file, opts)
	if err == nil || !strings.Contains(err.Error(), "1 object is already in the target (Hardware default/node01)") {
		t.Errorf("Restore over an existing object = %v; want refused, naming it", err)
	}
	if _, err := st.Get(ctx, model.KindHardware, "default", "node02"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused restore wrote node02 (Get: %v)", err)
	}
	opts.Overwrite = true
	res, err := restore(t, st, "two.yaml", file, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "1 object replaced (Hardware default/node01)") {
		t.Errorf("overwrite warnings = %q; want one naming the replaced Hardware", res.Warnings)
	}
	hw, err := st.Get(ctx, model.KindHardware, "default", "node01")
	if err != nil {
		t.Fatal(err)
	}
	if got := hw.GetObjectMeta().Labels["rack"]; got != "r9" {
		t.Errorf("after --overwrite node01's label rack = %q; want r9", got)
	}

	// A generated secret goes to the generated secrets' file, under the
	// same rule.
	gen := generatedIn(t, dir)
	if _, err := gen.Secret("default", "join", secrets.KindKubeadmToken); err != nil {
		t.Fatal(err)
	}
	opts.Generated, opts.Overwrite = gen, false
	moved := secrets.Generated{Info: secrets.Info{Namespace: "default", Name: "join", Kind: secrets.KindKubeadmToken,
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, Value: "abcdef.0123456789abcdef"}
	var genFile bytes.Buffer
	if _, err := migrate.Export(ctx, listReader{}, &genFile, migrate.ExportOptions{Generated: []secrets.Generated{moved}}); err != nil {
		t.Fatal(err)
	}
	if _, err := restore(t, st, "gen.yaml", genFile.Bytes(), opts); err == nil || !strings.Contains(err.Error(), "(generated secret default/join)") {
		t.Errorf("restore over an existing generated secret = %v; want refused, naming it", err)
	}
	opts.Overwrite = true
	if _, err := restore(t, st, "gen.yaml", genFile.Bytes(), opts); err != nil {
		t.Fatal(err)
	}
	sameGenerated(t, "after --overwrite", []secrets.Generated{moved}, generatedIn(t, dir))
	if objs, _, err := st.List(ctx, model.KindSecret, store.ListOptions{}); err != nil || len(objs) != 0 {
		t.Errorf("the store holds Secrets %v (%v); want none: a generated secret goes to its file", objs, err)
	}
}

// TestRunningWorkflowWarns: exporting a RUNNING workflow warns that its
// agent's token will not be accepted by the target store.
func TestRunningWorkflowWarns(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, backend.Config{DataDir: dir})
	loadSite(t, st, sealerIn(t, dir))
	obj, err := st.Get(t.Context(), model.KindWorkflow, "site-a", "node07-install")
	if err != nil {
		t.Fatal(err)
	}
	wf := obj.(*model.Workflow)
	wf.Status.State = model.StateRunning
	if _, err := st.Update(t.Context(), wf); err != nil {
		t.Fatal(err)
	}
	res, err := migrate.Export(t.Context(), st, io.Discard, migrate.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range res.Warnings {
		found = found || strings.Contains(w, "1 workflow is RUNNING (site-a/node07-install)")
	}
	if !found {
		t.Errorf("export warnings = %q; want one naming the RUNNING workflow", res.Warnings)
	}
}
