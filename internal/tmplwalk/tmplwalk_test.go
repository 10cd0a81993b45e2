package tmplwalk

import (
	"slices"
	"testing"
	"text/template/parse"
)

func TestWalk(t *testing.T) {
	const src = `{{ f "a" }}{{ if .X }}{{ f "b" }}{{ else }}{{ range 3 }}{{ f "c" }}{{ end }}{{ end }}{{ with .Y }}{{ g (f "d") }}{{ end }}{{ template "t" f "e" }}`
	trees, err := parse.Parse("t", src, "", "", map[string]any{"f": func(string) string { return "" }, "g": func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	Walk(trees["t"].Root, func(n parse.Node) bool {
		if c, ok := n.(*parse.CommandNode); ok && len(c.Args) == 2 {
			if id, ok := c.Args[0].(*parse.IdentifierNode); ok && id.Ident == "f" {
				got = append(got, c.Args[1].(*parse.StringNode).Text)
			}
		}
		return true
	})
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
		t.Errorf("visited f calls %q; want %q", got, want)
	}
	// visit returning false skips what is below.
	var n int
	Walk(trees["t"].Root, func(x parse.Node) bool {
		n++
		_, isIf := x.(*parse.IfNode)
		return !isIf
	})
	var all int
	Walk(trees["t"].Root, func(parse.Node) bool { all++; return true })
	if n >= all {
		t.Errorf("skipping the if's children visited %d nodes, the full walk %d", n, all)
	}
}
