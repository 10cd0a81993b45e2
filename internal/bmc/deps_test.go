package bmc

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps the executor beside the engine, not inside the
// server: it reads and writes objects through the store interface and
// gets credentials through an injected opener; the API, CLI, workflow
// engine and server wire it, never the other way round.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]string{
		"github.com/anvilproj/anvil/internal/model":      "Machine, Job, Task and Secret",
		"github.com/anvilproj/anvil/internal/clock":      "the one source of time (a leaf)",
		"github.com/anvilproj/anvil/internal/store":      "the Store interface (no implementation)",
		"github.com/anvilproj/anvil/internal/machinelog": "the machine record's Event and Sink (a leaf)",
		"github.com/anvilproj/anvil/internal/macaddr":    "the one MAC type, the machine record.s key (a leaf)",
		"github.com/anvilproj/anvil/internal/bmc/wsman":  "the WS-Management client of the Intel AMT provider",
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/anvilproj/anvil/") && allowed[imp] == "" {
			t.Errorf("bmc imports %s; it must know only the model, the store interface and machinelog", imp)
		}
	}
}
