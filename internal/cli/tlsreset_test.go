package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
)

// TestPlainHTTPToTLSPortReset: Go's TLS server answers plain HTTP with a
// 400 and closes at once, so a request still writing its body sees only
// a reset (seen in CI: "write: connection reset by peer"). The CLI asks
// again without a body and says what is wrong, not "cannot reach".
func TestPlainHTTPToTLSPortReset(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	plainURL := strings.Replace(srv.URL, "https://", "http://", 1)
	reset := fmt.Errorf("post: write tcp: %w", syscall.ECONNRESET)

	c := &clients{server: plainURL}
	err := c.explain(reset)
	if err == nil || !strings.Contains(err.Error(), "is it the HTTPS port?") {
		t.Errorf("explain(reset from a TLS port) = %v; want the HTTPS-port hint", err)
	}

	// A reset from a port that is not TLS stays a reset.
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	c = &clients{server: plain.URL}
	if err := c.explain(reset); err != nil && strings.Contains(err.Error(), "HTTPS port?") {
		t.Errorf("explain(reset from a plain port) = %v; want no HTTPS-port hint", err)
	}
}
