package ui_test

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestNoSecondPath: the UI has no second way to change anything or to
// decide access. It does not link internal/api (a mutation goes through
// the API's HTTP handler: its gate, authorization and audit), the
// workflow engine, or the server; who may do what is internal/auth's
// answer.
func TestNoSecondPath(t *testing.T) {
	const module = "github.com/anvilproj/anvil"
	deps := testtool.ModuleDeps(t, module+"/internal/ui")
	if _, ok := deps[module+"/internal/auth"]; !ok {
		t.Fatalf("internal/ui's deps miss internal/auth, which it imports: the walk is broken (got %d packages)", len(deps))
	}
	for pkg, chain := range deps {
		for _, bad := range []string{"internal/api", "internal/workflow", "internal/server"} {
			if p := module + "/" + bad; pkg == p || strings.HasPrefix(pkg, p+"/") {
				t.Errorf("internal/ui links %s: %s", bad, strings.ReplaceAll(strings.Join(chain, " → "), module+"/", ""))
			}
		}
	}
}
