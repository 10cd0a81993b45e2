package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

const module = "github.com/anvilproj/anvil"

// excluded are what the boot environment's binary must not link, directly
// or through anything it imports, each with why: every byte of it is
// downloaded and unpacked by every machine on every netboot, and none of
// these runs there.
var excluded = []struct{ prefix, why string }{
	{module + "/internal/server", "the server"},
	{module + "/internal/store", "the store"},
	{module + "/internal/api", "the API handlers"},
	{module + "/internal/workflow", "the workflow engine"},
	{module + "/internal/cli", "the management CLI"},
	{module + "/internal/bmc", "the BMC clients"},
	{module + "/internal/leader", "Kubernetes mode's leader election"},
	{"k8s.io/", "the Kubernetes client"},
	{"sigs.k8s.io/", "the Kubernetes client's helpers"},
	{"github.com/stmcginnis/gofish", "the Redfish client"},
	{"github.com/bougou/go-ipmi", "the IPMI client"},
	{"go.etcd.io/bbolt", "the embedded store's database"},
}

// needed are what /init's modes run on; their absence would mean the walk
// below is broken, not that the binary is slim.
var needed = []string{
	module + "/internal/agent",
	module + "/internal/agentcmd",
	module + "/internal/container",
	module + "/internal/actions",
	module + "/internal/hwinfo",
	module + "/internal/kmod",
}

// TestLinksOnlyTheAgent lists what anvil-agent links, for the boot
// environment's platform (linux, no cgo), with the go tool, and fails on
// anything excluded, naming the chain of imports that brings it in.
func TestLinksOnlyTheAgent(t *testing.T) {
	goTool := testtool.RequireBinary(t, "go", "golang-go (or Go from go.dev, as make deps installs)")
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			imports := listImports(t, goTool, arch)
			chains := importChains(module+"/cmd/anvil-agent", imports)
			for _, pkg := range needed {
				if _, ok := chains[pkg]; !ok {
					t.Errorf("anvil-agent does not link %s, which /init runs: the walk is broken (got %d packages)", pkg, len(chains))
				}
			}
			for pkg, chain := range chains {
				for _, ex := range excluded {
					if pkg == ex.prefix || strings.HasPrefix(pkg, strings.TrimSuffix(ex.prefix, "/")+"/") {
						t.Errorf("anvil-agent links %s (%s): %s", pkg, ex.why, strings.Join(chain, " → "))
					}
				}
			}
		})
	}
}

// listImports runs `go list -deps` on this package for linux/arch without
// cgo and returns each package's imports.
func listImports(t *testing.T, goTool, arch string) map[string][]string {
	t.Helper()
	cmd := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.Bytes())
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			imports[fields[0]] = fields[1:]
		}
	}
	return imports
}

// importChains walks imports from root breadth first and returns, for
// each package reached, the shortest chain of imports from root to it.
func importChains(root string, imports map[string][]string) map[string][]string {
	chains := map[string][]string{root: {root}}
	queue := []string{root}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, imp := range imports[cur] {
			if _, seen := chains[imp]; seen {
				continue
			}
			chains[imp] = append(append([]string(nil), chains[cur]...), imp)
			queue = append(queue, imp)
		}
	}
	return chains
}

// TestImportChains: the walk finds indirect imports with their chain and
// leaves out what nothing imports.
func TestImportChains(t *testing.T) {
	got := importChains("main", map[string][]string{
		"main":   {"a", "b"},
		"a":      {"k8s.io/client-go"},
		"b":      {"a"},
		"orphan": {"x"},
	})
	want := map[string]string{
		"main":             "main",
		"a":                "main a",
		"b":                "main b",
		"k8s.io/client-go": "main a k8s.io/client-go",
	}
	if len(got) != len(want) {
		t.Errorf("importChains reached %d packages %v; want %d", len(got), got, len(want))
	}
	for pkg, chain := range want {
		if strings.Join(got[pkg], " ") != chain {
			t.Errorf("chain to %s = %v; want %s", pkg, got[pkg], chain)
		}
	}
}
