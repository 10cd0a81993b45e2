package kubetest

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
)

// RESTConfig returns a client-go configuration for the cluster's admin
// user. Its client-side rate limit is lifted: client-go's default of 5
// requests a second would make a test's setup, not the server, the
// bottleneck.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert},
		QPS:             1000,
		Burst:           2000,
	}
}

// WriteKubeconfig writes a kubeconfig file for the cluster's admin user
// into dir and returns its path: what `anvil serve --kubeconfig` and
// kubectl take.
func (c *Cluster) WriteKubeconfig(t testing.TB, dir string) string {
	t.Helper()
	kc := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "kubetest",
		"clusters": []any{map[string]any{"name": "kubetest", "cluster": map[string]any{
			"server": c.URL, "certificate-authority-data": base64.StdEncoding.EncodeToString(c.CACert)}}},
		"users": []any{map[string]any{"name": "admin", "user": map[string]any{"token": c.Token}}},
		"contexts": []any{map[string]any{"name": "kubetest", "context": map[string]any{
			"cluster": "kubetest", "user": "admin"}}},
	}
	b, err := json.Marshal(kc) // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
