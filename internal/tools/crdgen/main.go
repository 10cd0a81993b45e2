// Command crdgen rewrites the schema block of each CustomResourceDefinition
// in a directory (deploy/crds) from Anvil's model types (package
// internal/crdgen does the work). `go generate ./deploy/crds` runs it;
// deploy/crds's tests fail when a manifest differs from what it writes.
// It is a build-time program: the anvil binary does not link it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/anvilproj/anvil/internal/crdgen"
)

func main() {
	dir := flag.String("dir", ".", "directory of the CRD manifests (*.yaml)")
	modelDir := flag.String("model", "../../internal/model", "directory of the model's Go source, for descriptions")
	flag.Parse()
	if err := run(*dir, *modelDir); err != nil {
		fmt.Fprintln(os.Stderr, "crdgen:", err)
		os.Exit(1)
	}
}

func run(dir, modelDir string) error {
	docs, err := crdgen.ReadDocs(modelDir)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no *.yaml in %s", dir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		out, err := crdgen.Generate(filepath.Base(f), b, docs)
		if err != nil {
			return err
		}
		if err := os.WriteFile(f, out, 0o644); err != nil {
			return err
		}
	}
	return nil
}
