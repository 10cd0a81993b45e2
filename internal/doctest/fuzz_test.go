package doctest

import (
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; every block it returns has a known kind,
// lies inside the document, and its body is made of the document's lines
// (less indentation); a document that parses has exactly one block per
// directive (no directive is lost, no block goes unmarked).
func FuzzParse(f *testing.F) {
	f.Add(guide)                                                 // every directive, indented fences, ~~~~
	f.Add("<!-- doctest: run -->\n```sh\nx\n```\n```sh\ny\n```") // an unmarked block
	f.Add("<!-- doctest: output -->\n```\nx\n```\n")             // output first
	f.Add("<!-- doctest: console normalize=\"a\\\"b\" lines -->\n```\n$ a \\\n b\nc\n```\n")
	f.Add("```sh\nno directive anywhere\n```\n")
	f.Add("<!-- doctest: run -->\n````\n```\n````\n")
	f.Fuzz(func(t *testing.T, doc string) {
		blocks, err := Parse(doc)
		if err != nil {
			return
		}
		lines := strings.Count(doc, "\n") + 1
		for _, b := range blocks {
			if _, ok := kindNames[b.Kind.String()]; !ok {
				t.Fatalf("block of unknown kind %v", b.Kind)
			}
			if b.Line < 1 || b.Line > lines {
				t.Fatalf("block at line %d of a %d-line document", b.Line, lines)
			}
			for _, l := range strings.Split(strings.TrimSuffix(b.Body, "\n"), "\n") {
				if !strings.Contains(doc, l) {
					t.Fatalf("body line %q is not in the document", l)
				}
			}
			if b.Kind == Console {
				for _, s := range b.Steps() {
					if s.Line <= b.Line || s.Line > lines {
						t.Fatalf("step at line %d outside its block (from %d)", s.Line, b.Line)
					}
				}
			}
		}
		if blocks == nil {
			return // no directive outside a fence: nothing to test
		}
		// Directive lines outside the blocks (a block's body may show one).
		inside := map[int]bool{}
		for _, b := range blocks {
			for l := b.Line; l <= b.Line+strings.Count(b.Body, "\n")+1; l++ {
				inside[l] = true
			}
		}
		n := 0
		for i, l := range strings.Split(doc, "\n") {
			if directive.MatchString(l) && !inside[i+1] {
				n++
			}
		}
		if len(blocks) != n {
			t.Fatalf("%d blocks from %d directives", len(blocks), n)
		}
	})
}
