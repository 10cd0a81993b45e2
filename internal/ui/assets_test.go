package ui_test

import (
	"net/http"
	"regexp"
	"testing"
)

// TestStaticCaching: pages link the stylesheet and script under the
// current version, which a browser may keep (immutable); any other URL of
// a static file is answered but revalidated; pages themselves stay
// no-store.
func TestStaticCaching(t *testing.T) {
	const immutable, revalidate = "public, max-age=31536000, immutable", "no-cache"
	e := newEnv(t)
	b := e.browser(t)
	resp, page := b.get("/ui/login")
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("login page Cache-Control = %q; want no-store", cc)
	}
	links := regexp.MustCompile(`(?:href|src)="(/ui/static/[^"?]+)\?v=([0-9a-f]{16})"`).FindAllStringSubmatch(page, -1)
	if len(links) != 2 || links[0][2] != links[1][2] {
		t.Fatalf("login page links %v; want the stylesheet and the script under one version", links)
	}
	for _, l := range links {
		path, version := l[1], l[2]
		resp, body := b.get(path + "?v=" + version)
		if resp.StatusCode != http.StatusOK || body == "" {
			t.Errorf("GET %s?v=%s = %d, %d bytes", path, version, resp.StatusCode, len(body))
		}
		if cc := resp.Header.Get("Cache-Control"); cc != immutable {
			t.Errorf("GET %s?v=%s: Cache-Control = %q; want %q", path, version, cc, immutable)
		}
		for _, other := range []string{path, path + "?v=0123456789abcdef"} {
			resp, body := b.get(other)
			if cc := resp.Header.Get("Cache-Control"); resp.StatusCode != http.StatusOK || body == "" || cc != revalidate {
				t.Errorf("GET %s = %d, Cache-Control %q; want 200, %q", other, resp.StatusCode, cc, revalidate)
			}
		}
	}
}
