package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSBOM: the SBOM of a Go binary lists the modules `go version -m`
// prints for it, names the artefact with its SHA-256, and is the same
// bytes when written twice.
func TestSBOM(t *testing.T) {
	// A Go binary of this module with dependencies: ociimage's.
	exe := filepath.Join(t.TempDir(), "ociimage")
	build := exec.Command("go", "build", "-trimpath", "-o", exe, "../ociimage")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ociimage: %v\n%s", err, out)
	}
	args := []string{"-artefact", exe, "-name", "anvil", "-version", "v9.9.9", "-created", "1764201600"}
	var a, b bytes.Buffer
	if err := run(args, &a); err != nil {
		t.Fatal(err)
	}
	if err := run(args, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two SBOMs of one binary differ")
	}
	var doc bom
	if err := json.Unmarshal(a.Bytes(), &doc); err != nil {
		t.Fatalf("SBOM is not JSON: %v", err)
	}
	if doc.Format != "CycloneDX" || doc.Spec != "1.5" || !strings.HasPrefix(doc.Serial, "urn:uuid:") {
		t.Errorf("header = %s %s %s; want CycloneDX 1.5 urn:uuid:…", doc.Format, doc.Spec, doc.Serial)
	}
	if doc.Metadata.Timestamp != "2025-11-27T00:00:00Z" {
		t.Errorf("timestamp = %s; want -created's", doc.Metadata.Timestamp)
	}
	sum, _ := fileSHA256(exe)
	if h := doc.Metadata.Component.Hashes; len(h) != 1 || h[0].Content != sum || len(sum) != 64 {
		t.Errorf("artefact hashes = %v; want its SHA-256 %s", h, sum)
	}
	// Every module go version -m lists is a component.
	out, err := exec.Command("go", "version", "-m", exe).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	purls := map[string]bool{}
	for _, c := range doc.Components {
		purls[c.PURL] = true
	}
	deps := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "dep" {
			deps++
			if p := "pkg:golang/" + f[1] + "@" + f[2]; !purls[p] {
				t.Errorf("component %s missing", p)
			}
		}
	}
	if deps == 0 {
		t.Error("go version -m listed no dependency of the test binary; the test checked nothing")
	}
	if !purls["pkg:golang/github.com/anvilproj/anvil@v9.9.9"] {
		t.Error("the main module is not a component at -version")
	}
}

// TestSBOMRefuses: what is not a Go binary, and a missing -created, are
// refused with the cause.
func TestSBOMRefuses(t *testing.T) {
	notGo := filepath.Join(t.TempDir(), "x.deb")
	if err := os.WriteFile(notGo, []byte("!<arch>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-artefact", notGo, "-version", "v1", "-created", "0"}, "no Go build information"},
		{[]string{"-artefact", notGo, "-version", "v1", "-created", "yesterday"}, "want Unix seconds"},
		{[]string{"-artefact", notGo, "-created", "0"}, "-version are required"},
	} {
		err := run(tc.args, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v; want an error with %q", tc.args, err, tc.want)
		}
	}
}
