package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// TestShortRepliesUncompressed: a client that accepts gzip gets short
// replies (an agent's are tens of bytes) as they are, and long ones (a
// list of objects) compressed.
func TestShortRepliesUncompressed(t *testing.T) {
	e := newEnv(t, envOptions{})
	list := func() (encoding string, n int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, e.url+anvilv1connect.TemplateServiceListProcedure, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("List: %d %v %s", resp.StatusCode, err, b)
		}
		return resp.Header.Get("Content-Encoding"), len(b)
	}
	if enc, n := list(); enc != "" {
		t.Errorf("empty list (%d bytes) sent with Content-Encoding %q, want none", n, enc)
	}
	var docs []string
	for i := range 20 {
		docs = append(docs, fmt.Sprintf("apiVersion: tinkerbell.org/v1alpha1\nkind: Template\nmetadata: {name: t%d, namespace: default}\nspec:\n  data: %q\n", i, tplData))
	}
	if _, err := apply(e, strings.Join(docs, "---\n"), false); err != nil {
		t.Fatal(err)
	}
	if enc, n := list(); enc != "gzip" {
		t.Errorf("list of 20 templates (%d bytes) sent with Content-Encoding %q, want gzip", n, enc)
	}
}
