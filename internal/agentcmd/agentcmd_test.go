package agentcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/cmdbase"
)

// TestAgentNeedsWorkerID: without --boot and --worker-id the agent stops
// with an error naming the flag, before its image cache (emptied when
// the catalog opens it) is touched.
func TestAgentNeedsWorkerID(t *testing.T) {
	cache := t.TempDir()
	kept := filepath.Join(cache, "kept")
	if err := os.WriteFile(kept, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := cmdbase.NewRoot("anvil-agent", "test")
	root.AddCommand(NewCommand())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"agent", "--image-cache-dir", cache})
	code := cmdbase.ExitCode(root, root.Execute())
	if code != 1 || !strings.Contains(out.String(), "--worker-id is required") {
		t.Errorf("exit code %d, output %q; want 1 and --worker-id is required", code, out.String())
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the image cache was touched by a command line that cannot run: %v", err)
	}
}
