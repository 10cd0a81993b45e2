package secrets

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/bolt"
)

// TestInStore: two replicas' sources on one store hand out the same value
// for a name (the first one's), refuse another kind for it, and list and
// get it without generating.
func TestInStore(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "anvil.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a, b := &InStore{Store: st}, &InStore{Store: st}

	v1, err := a.Secret("lab", "join", KindKubeadmToken)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(v1) {
		t.Errorf("kubeadm token %q", v1)
	}
	if v2, err := b.Secret("lab", "join", KindKubeadmToken); err != nil || v2 != v1 {
		t.Errorf("the other replica's value = %q, %v; want the first one's %q", v2, err, v1)
	}
	if _, err := b.Secret("lab", "join", KindPassword); err == nil || !strings.Contains(err.Error(), "kind kubeadm-token") {
		t.Errorf("another kind for the same name = %v; want an error naming its kind", err)
	}
	if v, info, err := b.Get("lab", "join"); err != nil || v != v1 || info.Kind != KindKubeadmToken || info.Name != "join" || info.Created.IsZero() {
		t.Errorf("Get = %q, %+v, %v", v, info, err)
	}
	if _, _, err := b.Get("lab", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an unknown secret = %v; want ErrNotFound", err)
	}
	if _, err := a.Secret("lab", "Root Password!", KindPassword); err != nil {
		t.Fatal(err)
	}
	list := a.List()
	if len(list) != 2 || list[0].Name != "Root Password!" || list[1].Name != "join" {
		t.Errorf("List = %+v; want both, by name", list)
	}
	objs, _, _ := st.List(t.Context(), "Secret", store.ListOptions{})
	if len(objs) != 2 {
		t.Errorf("%d Secret objects; want 2", len(objs))
	}
}

// TestObjectName: any secret name maps to a valid Kubernetes object name,
// and different names to different ones.
func TestObjectName(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"join", "JOIN", "root password", "a/b", "---", "ünïcode", strings.Repeat("x", 300), "x"} {
		o := objectName(n)
		if err := store.CheckKey("Secret", "default", o); err != nil || len(o) > 63 {
			t.Errorf("objectName(%q) = %q: %v", n, o, err)
		}
		if prev, dup := seen[o]; dup {
			t.Errorf("objectName(%q) = objectName(%q) = %q", n, prev, o)
		}
		seen[o] = n
	}
}
