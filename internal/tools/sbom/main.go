// Command sbom writes a CycloneDX 1.5 JSON software bill of materials for
// one release artefact (`make release`): the Go modules and the Go
// toolchain compiled into the binaries it holds, read from the build
// information the Go linker embeds (what `go version -m` prints). A
// binary is its own artefact; a .deb or a container image names the
// binaries inside it with -binary.
//
// The output depends only on its inputs: no clock (the document's time is
// -created, the commit's), a serial number derived from the artefact's
// SHA-256, components sorted, so two builds of one commit give the same
// bytes, as the rest of the release does.
//
// It owns the SBOM's format only; which artefacts get one is
// scripts/release.sh's. It is a build-time program: anvil does not link it.
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	artefact := fs.String("artefact", "", "the release artefact the SBOM describes (required)")
	name := fs.String("name", "", "the artefact's component name (default: its file name)")
	version := fs.String("version", "", "the artefact's version (required)")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "the document's time, Unix seconds (default $SOURCE_DATE_EPOCH)")
	out := fs.String("o", "", "write here instead of standard output")
	var binaries multi
	fs.Var(&binaries, "binary", "a Go binary inside the artefact (repeatable; default: the artefact itself)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *artefact == "" || *version == "" {
		return errors.New("-artefact and -version are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if *created == "" || err != nil {
		return fmt.Errorf("-created %q: want Unix seconds (the commit's time, so builds are reproducible)", *created)
	}
	if len(binaries) == 0 {
		binaries = multi{*artefact}
	}
	if *name == "" {
		*name = filepath.Base(*artefact)
	}
	doc, err := build(*artefact, *name, *version, time.Unix(secs, 0).UTC(), binaries)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}

// The parts of CycloneDX 1.5 written here.
type (
	bom struct {
		Format       string      `json:"bomFormat"`
		Spec         string      `json:"specVersion"`
		Serial       string      `json:"serialNumber"`
		Version      int         `json:"version"`
		Metadata     metadata    `json:"metadata"`
		Components   []component `json:"components"`
		Dependencies []dep       `json:"dependencies"`
	}
	metadata struct {
		Timestamp string    `json:"timestamp"`
		Tools     tools     `json:"tools"`
		Component component `json:"component"`
	}
	tools struct {
		Components []component `json:"components"`
	}
	component struct {
		Type       string     `json:"type"`
		BOMRef     string     `json:"bom-ref,omitempty"`
		Name       string     `json:"name"`
		Version    string     `json:"version,omitempty"`
		PURL       string     `json:"purl,omitempty"`
		Hashes     []hash     `json:"hashes,omitempty"`
		Properties []property `json:"properties,omitempty"`
	}
	hash struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	}
	property struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	dep struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	}
)

// build reads each binary's build information and describes the
// artefact as containing every module any of them was built from.
func build(artefact, name, version string, created time.Time, binaries []string) (*bom, error) {
	sum, err := fileSHA256(artefact)
	if err != nil {
		return nil, err
	}
	top := component{Type: "application", BOMRef: "artefact:" + name, Name: name, Version: version,
		Hashes: []hash{{Alg: "SHA-256", Content: sum}}}
	mods := map[string]component{}
	for _, bin := range binaries {
		bi, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("%s: no Go build information (is it a Go binary?): %w", bin, err)
		}
		goVer := strings.TrimPrefix(bi.GoVersion, "go")
		add(mods, component{Type: "platform", Name: "go", Version: goVer, PURL: "pkg:golang/std@v" + goVer})
		// The main module is Anvil itself, built from this tree at version.
		add(mods, component{Type: "application", Name: bi.Main.Path, Version: version,
			PURL: "pkg:golang/" + bi.Main.Path + "@" + version})
		for _, m := range bi.Deps {
			c := component{Type: "library", Name: m.Path, Version: m.Version,
				PURL: "pkg:golang/" + m.Path + "@" + m.Version}
			if m.Sum != "" {
				c.Properties = []property{{Name: "go:module:sum", Value: m.Sum}}
			}
			if m.Replace != nil {
				c.Properties = append(c.Properties, property{Name: "go:module:replaced-by", Value: m.Replace.Path + "@" + m.Replace.Version})
			}
			add(mods, c)
		}
		for _, s := range bi.Settings {
			if s.Key == "GOOS" || s.Key == "GOARCH" || s.Key == "CGO_ENABLED" || s.Key == "-trimpath" {
				top.Properties = append(top.Properties, property{Name: "go:build:" + filepath.Base(bin) + ":" + s.Key, Value: s.Value})
			}
		}
	}
	refs := make([]string, 0, len(mods))
	comps := make([]component, 0, len(mods))
	for ref := range mods {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	for _, ref := range refs {
		comps = append(comps, mods[ref])
	}
	serial := sha256.Sum256([]byte("anvil-sbom\x00" + sum))
	// A version-5-shaped UUID from the artefact's digest: the same
	// artefact always gets the same serial number.
	serial[6] = serial[6]&0x0f | 0x50
	serial[8] = serial[8]&0x3f | 0x80
	u := hex.EncodeToString(serial[:16])
	return &bom{
		Format:  "CycloneDX",
		Spec:    "1.5",
		Serial:  fmt.Sprintf("urn:uuid:%s-%s-%s-%s-%s", u[0:8], u[8:12], u[12:16], u[16:20], u[20:32]),
		Version: 1,
		Metadata: metadata{
			Timestamp: created.Format(time.RFC3339),
			Tools:     tools{Components: []component{{Type: "application", Name: "anvil internal/tools/sbom"}}},
			Component: top,
		},
		Components:   comps,
		Dependencies: []dep{{Ref: top.BOMRef, DependsOn: refs}},
	}, nil
}

// add puts c in mods under its purl, which is also its bom-ref.
func add(mods map[string]component, c component) {
	c.BOMRef = c.PURL
	mods[c.PURL] = c
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
