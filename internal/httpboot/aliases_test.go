package httpboot

import (
	"net/http"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/ipxe"
)

// Smee's script paths serve the same scripts as Anvil's routes.
func TestScriptAliases(t *testing.T) {
	var got ScriptRequest
	h, _ := newTest(t, Config{Scripter: testScripter(&got)})
	srv := WithScriptAliases(h)
	tests := []struct {
		name, target string
		wantCode     int
		wantMAC      string // "" : asked by source address
	}{
		{"by source address", "/auto.ipxe", 200, ""},
		{"by MAC", "/52:54:00:ab:cd:ef/auto.ipxe", 200, "52:54:00:ab:cd:ef"},
		{"by MAC, upper case with hyphens", "/52-54-00-AB-CD-EF/auto.ipxe", 200, "52:54:00:ab:cd:ef"},
		{"unknown MAC", "/52:54:00:00:00:01/auto.ipxe", 404, "52:54:00:00:00:01"},
		{"Anvil's own route still", "/ipxe/script/52:54:00:ab:cd:ef/auto.ipxe", 200, "52:54:00:ab:cd:ef"},
		{"not a MAC: not a script", "/bootenv/auto.ipxe", 404, "-"},
		{"deeper: not a script", "/a/52:54:00:ab:cd:ef/auto.ipxe", 404, "-"},
		{"another file: not a script", "/52:54:00:ab:cd:ef/boot.ipxe", 404, "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got = ScriptRequest{}
			w := do(srv, "GET", tc.target+"?buildarch=arm64")
			if w.Code != tc.wantCode {
				t.Fatalf("GET %s = %d %q; want %d", tc.target, w.Code, w.Body.String(), tc.wantCode)
			}
			if tc.wantMAC == "-" {
				if got.Source.IsValid() {
					t.Errorf("GET %s reached the scripter (%+v); want no script route", tc.target, got)
				}
				return
			}
			if got.MAC.String() != tc.wantMAC || got.Source.String() != "192.0.2.1" || got.BuildArch != "arm64" {
				t.Errorf("GET %s asked the scripter %+v; want MAC %q, source 192.0.2.1, buildarch arm64", tc.target, got, tc.wantMAC)
			}
		})
	}
}

// FuzzScriptAlias: an alias is always one of Anvil's script routes, served
// by the mux's script patterns, and never stands for a path with a '/' in
// its MAC or anything but auto.ipxe.
func FuzzScriptAlias(f *testing.F) {
	for _, seed := range []string{
		"/auto.ipxe", "/52:54:00:ab:cd:ef/auto.ipxe", "/52-54-00-AB-CD-EF/auto.ipxe", // Smee's forms
		"/ipxe/script/auto.ipxe", "//auto.ipxe", "/a/b/auto.ipxe", "/auto.ipxe/", "auto.ipxe", // not aliases
		"/0102.0304.0506/auto.ipxe", "/01:02:03:04:05:06:07:08/auto.ipxe", // Cisco form; too long
	} {
		f.Add(seed)
	}
	mux := http.NewServeMux()
	New(Config{}).Register(mux)
	f.Fuzz(func(t *testing.T, path string) {
		p, ok := ScriptAlias(path)
		if !ok {
			if p != "" {
				t.Fatalf("ScriptAlias(%q) = %q, false; want \"\"", path, p)
			}
			return
		}
		if !strings.HasPrefix(p, ipxe.ScriptPrefix) || !strings.HasSuffix(p, "/"+ipxe.ScriptName) || !strings.HasSuffix(path, "/"+ipxe.ScriptName) {
			t.Fatalf("ScriptAlias(%q) = %q; want a script route", path, p)
		}
		r, err := http.NewRequest("GET", "http://anvil"+p, nil)
		if err != nil {
			t.Fatalf("ScriptAlias(%q) = %q, not a request path: %v", path, p, err)
		}
		if _, pattern := mux.Handler(r); pattern != "GET "+routeScript && pattern != "GET "+routeScriptIP {
			t.Fatalf("ScriptAlias(%q) = %q, served by %q; want a script route", path, p, pattern)
		}
	})
}
