package cli

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// serverPackages are what the client commands must not link, directly or
// through anything they import: the server and what only it needs (the
// store, sealed secrets, the audit log, the workflow engine), and the
// agent with its kernel-module loader. A client that links them is a
// second server in size and start time (docs/design.md, "The client does
// not link the server"); what both sides need goes in a leaf package
// (internal/wire, internal/model, internal/clientheader).
var serverPackages = []string{
	"internal/api",
	"internal/store",
	"internal/secrets",
	"internal/audit",
	"internal/kmod",
	"internal/workflow",
	"internal/agent",
	"internal/server",
}

func TestClientLinksNoServer(t *testing.T) {
	const module = "github.com/anvilproj/anvil"
	deps := testtool.ModuleDeps(t, module+"/internal/cli")
	if _, ok := deps[module+"/internal/wire"]; !ok {
		t.Fatalf("internal/cli's deps miss internal/wire, which it imports: the walk is broken (got %d packages)", len(deps))
	}
	for pkg, chain := range deps {
		for _, bad := range serverPackages {
			if p := module + "/" + bad; pkg == p || strings.HasPrefix(pkg, p+"/") {
				t.Errorf("internal/cli links %s: %s", bad, strings.ReplaceAll(strings.Join(chain, " → "), module+"/", ""))
			}
		}
	}
}
