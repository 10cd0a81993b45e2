package kubetest_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"slices"
	"testing"

	"github.com/anvilproj/anvil/internal/kubetest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// TestStartListsNamespaces: the API server started answers an
// authenticated list of namespaces with the ones every cluster has, and
// refuses a request without the token.
func TestStartListsNamespaces(t *testing.T) {
	c := kubetest.Start(t)

	// The namespaces are created by a post-start hook of the API server;
	// /readyz does not wait for them.
	var names []string
	testtool.WaitFor(t, "the default namespaces", func() bool {
		list := c.JSON(t, http.MethodGet, "/api/v1/namespaces", nil, http.StatusOK)
		if list["kind"] != "NamespaceList" {
			t.Fatalf("kind %v, want NamespaceList", list["kind"])
		}
		names = names[:0]
		items, _ := list["items"].([]any)
		for _, it := range items {
			md, _ := it.(map[string]any)["metadata"].(map[string]any)
			name, _ := md["name"].(string)
			names = append(names, name)
		}
		return slices.Contains(names, "default") && slices.Contains(names, "kube-system")
	})

	// A wrong token is refused: the server checks the token file, and the
	// client verifies the server with the CA Cluster gives.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CACert) {
		t.Fatal("CACert holds no certificate")
	}
	other := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer other.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, c.URL+"/api/v1/namespaces", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer not-"+c.Token)
	resp, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token: status %d, want 401", resp.StatusCode)
	}
}
