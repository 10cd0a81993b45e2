// Package crdstest installs Anvil's CustomResourceDefinitions (package
// crds) into a test's API server (package kubetest) and waits until the
// server serves their kinds. The install and the wait are
// kubeproc.Cluster.InstallCRDs; this ties them to a test. It is for tests
// only.
package crdstest

import (
	"context"
	"testing"
	"time"

	"github.com/anvilproj/anvil/deploy/crds"
	"github.com/anvilproj/anvil/internal/kubetest"
)

// installBound keeps a CRD that is never established from hanging the
// test; it measures nothing.
const installBound = time.Minute

// Install creates every definition of defs in c and returns once each is
// Established: until then the API server answers 404 for its kind. It
// fails t if one is refused or never established.
func Install(t testing.TB, c *kubetest.Cluster, defs []crds.Definition) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), installBound)
	defer cancel()
	if err := c.InstallCRDs(ctx, defs); err != nil {
		t.Fatal(err)
	}
}
