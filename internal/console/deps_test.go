package console_test

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the console beside the BMC executor, not inside the
// server: it reads Hardware and Machines through the store interface and
// reaches BMCs through the injected Attach, so it imports neither the
// executor nor the API, CLI or engine.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/anvilproj/anvil/internal/model":      true,
		"github.com/anvilproj/anvil/internal/store":      true,
		"github.com/anvilproj/anvil/internal/machinelog": true,
		"github.com/anvilproj/anvil/internal/atomicfile": true,
		"github.com/anvilproj/anvil/internal/clock":      true,
	}
	for path, files := range testtool.NonStdImports(t) {
		if strings.HasPrefix(path, "github.com/anvilproj/anvil/") && !allowed[path] {
			t.Errorf("%v import %s; the console knows only the model, the store interface, machinelog, atomicfile and clock", files, path)
		}
	}
}
