package kubetest

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/anvilproj/anvil/internal/kubeproc"
)

// As returns the cluster as another user sees it: the same API server,
// with a client that sends token (a ServiceAccount's, from the
// TokenRequest API, say) instead of Token. Its Do, JSON and Apply speak as
// that user, as RBAC judges it.
func (c *Cluster) As(t testing.TB, token string) *Cluster {
	t.Helper()
	as := *c
	as.Token = token
	as.Client = kubeproc.NewClient(token, c.CACert)
	t.Cleanup(as.Client.CloseIdleConnections)
	return &as
}

// Apply applies obj (JSON, or anything Do would marshal) at path, the
// object's own path (…/namespaces/NS/PLURAL/NAME), with server-side apply
// as `kubectl apply --server-side --force-conflicts` does, as
// fieldManager. Unknown or duplicate fields are refused
// (fieldValidation=Strict, kubectl's default), so a misspelt field fails
// instead of being dropped. It returns the status and body as Do does.
func (c *Cluster) Apply(t testing.TB, path, fieldManager string, obj any) (int, []byte) {
	t.Helper()
	q := url.Values{"fieldManager": {fieldManager}, "force": {"true"}, "fieldValidation": {"Strict"}}
	return c.send(t, http.MethodPatch, path+"?"+q.Encode(), "application/apply-patch+yaml", obj, "application/json")
}

// MergePatch sends patch (a JSON merge patch, RFC 7386) to path, as
// `kubectl patch --type merge` does, and returns the status and body as Do
// does.
func (c *Cluster) MergePatch(t testing.TB, path string, patch any) (int, []byte) {
	t.Helper()
	return c.send(t, http.MethodPatch, path, "application/merge-patch+json", patch, "application/json")
}
