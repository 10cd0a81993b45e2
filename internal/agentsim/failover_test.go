package agentsim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFailoverMovesOnWhenAReplicaIsGone: requests go to the first replica
// while it answers (an HTTP error is an answer); once it is gone the call
// fails, and the next goes to the second replica and stays there.
func TestFailoverMovesOnWhenAReplicaIsGone(t *testing.T) {
	serve := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/fail" {
				http.Error(w, name, http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, name)
		}))
	}
	a, b := serve("a"), serve("b")
	defer b.Close()
	f := NewFailover(nil, strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://"))
	c := &http.Client{Transport: f}
	get := func(path string) (string, error) {
		resp, err := c.Get("http://replicas.invalid" + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(body)), err
	}
	for _, path := range []string{"/", "/fail", "/"} {
		if got, err := get(path); err != nil || got != "a" {
			t.Fatalf("GET %s with a up: %q, %v; want a's answer", path, got, err)
		}
	}
	a.Close()
	if got, err := get("/"); err == nil {
		t.Fatalf("GET with a gone answered %q; want the call to fail (the caller decides to retry)", got)
	}
	for range 2 {
		if got, err := get("/"); err != nil || got != "b" {
			t.Fatalf("GET after a failed: %q, %v; want b's answer", got, err)
		}
	}
	if f.Host() != strings.TrimPrefix(b.URL, "http://") {
		t.Fatalf("Host() = %s, want b's", f.Host())
	}
}

// TestFailoverMovesOnWhenAReplyIsCutOff: a reply whose body ends early
// (the replica died while answering) moves on as a refused call does.
func TestFailoverMovesOnWhenAReplyIsCutOff(t *testing.T) {
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "a partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection is closed mid-body
	}))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "b") }))
	defer b.Close()
	f := NewFailover(nil, strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://"))
	c := &http.Client{Transport: f}
	resp, err := c.Get("http://replicas.invalid/")
	if err != nil {
		t.Fatal(err)
	}
	if body, err := io.ReadAll(resp.Body); err == nil {
		t.Fatalf("read %q from a cut-off reply without an error", body)
	}
	resp.Body.Close()
	if f.Host() != strings.TrimPrefix(b.URL, "http://") {
		t.Fatalf("Host() = %s after a cut-off reply, want b's", f.Host())
	}
}
