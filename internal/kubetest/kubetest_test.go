package kubetest_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"slices"
	"strings"
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

// TestStartOnAddress: an API server started on another address than
// 127.0.0.1 listens there, says so in its URL, and its certificate names
// that address (the client verifies it).
func TestStartOnAddress(t *testing.T) {
	const addr = "127.0.0.2" // on lo: all of 127/8 is
	c := kubetest.StartOn(t, addr)
	if want := "https://" + addr + ":"; !strings.HasPrefix(c.URL, want) {
		t.Fatalf("URL %s, want %s…", c.URL, want)
	}
	if code, b := c.Do(t, http.MethodGet, "/readyz", nil, ""); code != http.StatusOK {
		t.Errorf("/readyz at %s: status %d: %s", c.URL, code, b)
	}
}
