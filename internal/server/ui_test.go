package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestUIServed: anvil serve answers the web UI on the HTTP port; the
// local issuer's admin token logs in, and a Hardware applied through the
// API appears on the hardware page (the UI's view follows the store).
func TestUIServed(t *testing.T) {
	data := t.TempDir()
	base, _, _, _, _ := startWith(t, func(c *Config) {
		c.InsecureNoAuth = false
		c.DataDir = data
	})
	tok, err := os.ReadFile(filepath.Join(data, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := string(bytes.TrimSpace(tok))

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	resp, err := c.Get(base + "/ui/hardware")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ui/login" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET /ui/hardware without a session ended at %s (CSP %q); want the login page with the UI's CSP",
			resp.Request.URL, resp.Header.Get("Content-Security-Policy"))
	}
	resp, err = c.PostForm(base+"/ui/login", url.Values{"token": {admin}, "next": {"/ui/hardware"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/hardware" {
		t.Fatalf("login with the admin token = %d at %s; want 200 at /ui/hardware", resp.StatusCode, resp.Request.URL)
	}

	manifest := "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: ui-node1}\n" +
		"spec:\n  interfaces:\n  - dhcp: {mac: \"52:54:00:0c:00:01\", ip: {address: 10.0.3.11, netmask: 255.255.255.0}}\n"
	body, err := json.Marshal(map[string]string{"source": "ui.yaml", "content": manifest})
	if err != nil {
		t.Fatal(err)
	}
	if code, out := callJSON(t, base, "/anvil.v1.ManifestService/Apply", admin, string(body)); code != http.StatusOK {
		t.Fatalf("Apply: %d %s", code, out)
	}
	testtool.WaitFor(t, "the hardware page to list ui-node1", func() bool {
		_, page := getWith(t, c, base+"/ui/hardware?mac=52:54:00:0c:00:01")
		return strings.Contains(page, "default/ui-node1")
	})
}

func getWith(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b.String()
}
