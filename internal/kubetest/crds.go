package kubetest

import (
	"net/http"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/internal/testtool"
)

// InstallCRDs creates the definitions (all of deploy/crds if defs is nil)
// and waits until the API server serves each one. It returns them by kind.
func (c *Cluster) InstallCRDs(t testing.TB, defs []crds.Definition) map[string]crds.Definition {
	t.Helper()
	if defs == nil {
		var err error
		if defs, err = crds.All(); err != nil {
			t.Fatal(err)
		}
	}
	const path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	byKind := map[string]crds.Definition{}
	for _, d := range defs {
		c.JSON(t, http.MethodPost, path, d.JSON, http.StatusCreated)
		byKind[d.Kind] = d
	}
	for _, d := range defs {
		testtool.WaitFor(t, d.Plural+"."+d.Group+" established", func() bool {
			crd := c.JSON(t, http.MethodGet, path+"/"+d.Plural+"."+d.Group, nil, http.StatusOK)
			status, _ := crd["status"].(map[string]any)
			conds, _ := status["conditions"].([]any)
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true
				}
			}
			return false
		})
	}
	return byKind
}

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
