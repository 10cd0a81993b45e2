package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/benchresult"
)

// TestDocumentTableIsGenerated: docs/benchmarks.md's summary table is
// exactly what the committed result files generate, so a figure cannot be
// edited by hand nor a result file change without the table.
func TestDocumentTableIsGenerated(t *testing.T) {
	root := filepath.Join("..", "..")
	if err := run(filepath.Join(root, "bench", "results"), filepath.Join(root, "docs", "benchmarks.md"), true); err != nil {
		t.Fatal(err)
	}
}

func result(bench string, goals ...benchresult.Goal) *benchresult.Result {
	r := benchresult.New(bench)
	r.Server = benchresult.AnvilServer("dev", []string{"anvil", "serve", "--no-dhcp"})
	r.Goals = goals
	r.Samples = []float64{1}
	r.Finish()
	return r
}

func write(t *testing.T, dir, variant string, r *benchresult.Result) {
	t.Helper()
	if _, err := r.Write(dir, variant); err != nil {
		t.Fatal(err)
	}
}

const docText = "# Benchmarks\n\nintro\n\n" + Begin + "\nold table\n" + End + "\n\n## Fleet\n"

func TestGenerateAndCheck(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "bench", "results")
	write(t, results, "", result("http", benchresult.Goal{Measure: "GB/s, 1 conn", Target: "≥ 1.0× nginx", Result: "1.4 GB/s", Peer: "1.0 GB/s", Met: true}))
	write(t, results, "1000", result("fleet", benchresult.Goal{Measure: "run time", Target: "≤ 10 s", Result: "12 s | slow", Met: false,
		Reason: "docs/benchmarks.md#fleet"}))
	write(t, results, "", result("zzz-new", benchresult.Goal{Measure: "m", Target: "t", Result: "r", Met: false, Reason: "the disk"}))
	doc := filepath.Join(dir, "docs", "benchmarks.md")
	os.MkdirAll(filepath.Dir(doc), 0o755)
	os.WriteFile(doc, []byte(docText), 0o644)

	if err := run(results, doc, true); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("-check of a stale table: %v", err)
	}
	if err := run(results, doc, false); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	got := string(b)
	if !strings.HasPrefix(got, "# Benchmarks\n\nintro\n\n"+Begin+"\n") || !strings.HasSuffix(got, End+"\n\n## Fleet\n") || strings.Contains(got, "old table") {
		t.Errorf("the text around the markers changed or the old table stayed:\n%s", got)
	}
	fleet, http, other := strings.Index(got, "| fleet |"), strings.Index(got, "| http |"), strings.Index(got, "| zzz-new |")
	if fleet < 0 || http < fleet || other < http {
		t.Errorf("rows not in bench.sh's order (fleet, http, then others):\n%s", got)
	}
	for _, want := range []string{
		`12 s \| slow`,               // a pipe cannot break the row
		"**not met**: [why](#fleet)", // a docs reference becomes a link
		"**not met**: the disk",      // a measured reason stays text
		"[fleet-1000.json](../bench/results/fleet-1000.json)", // the row names its file
		"| 1.0 GB/s | **met** |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if err := run(results, doc, true); err != nil {
		t.Errorf("-check right after generating: %v", err)
	}
}

// TestRefusesInvalidResults: the runner fails when a result names a
// server under test that is not `anvil serve`, instead of leaving it out.
func TestRefusesInvalidResults(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "", result("http", benchresult.Goal{Measure: "m", Target: "t", Result: "r", Met: true}))
	os.WriteFile(filepath.Join(dir, "dhcp.json"), []byte(`{"bench":"dhcp","server":{"name":"kea-dhcp4","options":["kea-dhcp4","-c","x"]}}`), 0o644)
	os.MkdirAll(filepath.Join(dir, "archive"), 0o755)
	os.WriteFile(filepath.Join(dir, "archive", "old.json"), []byte(`{"ad hoc": true}`), 0o644)
	doc := filepath.Join(dir, "doc.md")
	os.WriteFile(doc, []byte(docText), 0o644)
	err := run(dir, doc, false)
	if err == nil || !strings.Contains(err.Error(), "dhcp.json") || !strings.Contains(err.Error(), "server under test") {
		t.Errorf("a result measuring kea as the server: %v", err)
	}
	if b, _ := os.ReadFile(doc); string(b) != docText {
		t.Error("the document was changed although a result was refused")
	}
}

func TestNeedsMarkers(t *testing.T) {
	if _, err := splice([]byte("# no table\n"), "x"); err == nil || !strings.Contains(err.Error(), "generated table") {
		t.Errorf("a document without markers: %v", err)
	}
	if _, err := splice([]byte(Begin+"\n"+End+"\n"+Begin+"\n"+End+"\n"), "x"); err == nil {
		t.Error("markers twice accepted")
	}
	if _, err := load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no result files") {
		t.Errorf("an empty results directory: %v", err)
	}
}

func TestValidateOnly(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "", result("http", benchresult.Goal{Measure: "m", Target: "t", Result: "r", Met: true}))
	if err := run(dir, "", false); err != nil {
		t.Errorf("valid results, no document: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "x.json"), []byte(`{"bench":"x","server":{"name":"anvil serve","options":["dnsmasq"]}}`), 0o644)
	if err := run(dir, "", false); err == nil {
		t.Error("an invalid result passed the check")
	}
}

// FuzzSplice: a document splices only with its markers once each, and
// then keeps everything outside them and holds the table between them.
func FuzzSplice(f *testing.F) {
	f.Add(docText)
	f.Add(End + "\n" + Begin + "\n")
	f.Add(Begin + End)
	f.Fuzz(func(t *testing.T, doc string) {
		out, err := splice([]byte(doc), "TABLE\n")
		if err != nil {
			return
		}
		got := string(out)
		before, _, _ := strings.Cut(doc, Begin)
		_, after, _ := strings.Cut(doc, End)
		if !strings.HasPrefix(got, before+Begin+"\n\nTABLE\n\n"+End) || !strings.HasSuffix(got, End+after) {
			t.Errorf("splice(%q) = %q", doc, got)
		}
	})
}
