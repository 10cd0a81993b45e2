package kube_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/deploy/crds/crdstest"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/kube"
	"github.com/anvilproj/anvil/internal/store/storetest"
)

// openBound keeps a broken API server from hanging a test; it measures
// nothing.
const openBound = time.Minute

// cluster starts a kube-apiserver with Anvil's CRDs installed.
func cluster(t *testing.T) *rest.Config {
	t.Helper()
	c := kubetest.Start(t)
	defs, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	crdstest.Install(t, c, defs)
	return c.RESTConfig()
}

func open(t *testing.T, cfg kube.Config) *kube.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), openBound)
	defer cancel()
	s, err := kube.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// wipe deletes every object of every stored kind, so that each contract
// test starts from an empty store on the one API server the suite shares.
func wipe(t *testing.T, rc *rest.Config) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range model.Kinds {
		gvr := kube.Resource(kind)
		list, err := dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		for _, u := range list.Items {
			if kind == model.KindSecret && u.GetNamespace() == "kube-system" {
				continue
			}
			if err := dyn.Resource(gvr).Namespace(u.GetNamespace()).Delete(t.Context(), u.GetName(), metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete %s %s/%s: %v", kind, u.GetNamespace(), u.GetName(), err)
			}
		}
	}
}

// TestContract runs the store contract suite, the one the embedded store
// passes, against a real kube-apiserver and etcd.
func TestContract(t *testing.T) {
	rc := cluster(t)
	const history = 16
	storetest.Run(t, storetest.Options{WatchHistory: history}, func(t *testing.T) store.Store {
		wipe(t, rc)
		return open(t, kube.Config{REST: rc, WatchHistory: history, Log: testLog(t)})
	})
}

// testLog sends the store's messages to the test's log.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(b))
	return len(b), nil
}

// TestStoredVersion: the store reads an object's version from the API
// server on demand (store.LiveReader): the version another writer stored,
// and ErrNotFound for what is not there.
func TestStoredVersion(t *testing.T) {
	rc := cluster(t)
	a := open(t, kube.Config{REST: rc, Log: testLog(t)})
	b := open(t, kube.Config{REST: rc, Log: testLog(t)}) // another replica
	data := "version: \"0.1\"\n"
	tmpl := &model.Template{TypeMeta: model.TypeMeta{APIVersion: model.APIVersion, Kind: model.KindTemplate},
		ObjectMeta: model.ObjectMeta{Name: "t", Namespace: "default"}, Spec: model.TemplateSpec{Data: &data}}
	stored, err := a.Create(t.Context(), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.StoredVersion(t.Context(), model.KindTemplate, "default", "t")
	if err != nil {
		t.Fatalf("StoredVersion on another store: %v", err)
	}
	if want := stored.GetObjectMeta().ResourceVersion; got != want {
		t.Errorf("StoredVersion: %s, want %s (the one written)", got, want)
	}
	if _, err := b.StoredVersion(t.Context(), model.KindTemplate, "default", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("StoredVersion of a missing object: %v, want ErrNotFound", err)
	}
}
