package wire

import (
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestImports keeps the package a leaf that a client can link: the wire's
// messages, protobuf's well-known types and the model, nothing of the
// server.
func TestImports(t *testing.T) {
	for path, files := range testtool.NonStdImports(t) {
		switch {
		case path == "github.com/anvilproj/anvil/api/anvil/v1":
		case path == "github.com/anvilproj/anvil/internal/model":
		case strings.HasPrefix(path, "google.golang.org/protobuf/"):
		default:
			t.Errorf("%v import %s: internal/wire may import only api/anvil/v1, internal/model and protobuf", files, path)
		}
	}
}
