// Package crdstest installs Anvil's CustomResourceDefinitions (package
// crds) into a test's API server (package kubetest) and waits until the
// server serves their kinds. It owns that wait only; what the tests then
// store is theirs. It is for tests only.
package crdstest

import (
	"net/http"
	"testing"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// crdPath is where the API server takes CustomResourceDefinitions.
const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

// Install creates every definition of defs in c and returns once each is
// Established: until then the API server answers 404 for its kind. It
// fails t if one is refused or never established.
func Install(t testing.TB, c *kubetest.Cluster, defs []crds.Definition) {
	t.Helper()
	for _, d := range defs {
		c.JSON(t, http.MethodPost, crdPath, d.JSON, http.StatusCreated)
	}
	for _, d := range defs {
		testtool.WaitFor(t, d.Plural+"."+d.Group+" established", func() bool {
			crd := c.JSON(t, http.MethodGet, crdPath+"/"+d.Plural+"."+d.Group, nil, http.StatusOK)
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
}
