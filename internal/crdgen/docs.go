package crdgen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// Docs holds the doc comments of a package's struct types and their
// fields, by type name: what `kubectl explain` shows of a field.
type Docs map[string]typeDoc

type typeDoc struct {
	doc    string
	fields map[string]string
}

// ReadDocs parses the Go files of dir (tests aside) for the doc comments
// of its struct types and their fields.
func ReadDocs(dir string) (Docs, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	docs := Docs{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, spec := range g.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				doc := ts.Doc
				if doc == nil && len(g.Specs) == 1 {
					doc = g.Doc
				}
				td := typeDoc{doc: clean(doc), fields: map[string]string{}}
				for _, fl := range st.Fields.List {
					text := clean(fl.Doc)
					if text == "" {
						text = clean(fl.Comment)
					}
					for _, name := range fl.Names {
						td.fields[name.Name] = text
					}
				}
				docs[ts.Name.Name] = td
			}
		}
	}
	return docs, nil
}

// clean joins a comment's lines into one paragraph.
func clean(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

// Type returns the doc comment of the named struct type t, or "".
func (d Docs) Type(t reflect.Type) string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	return d[t.Name()].doc
}

// field returns the doc of field f of struct type owner, else the doc of
// f's own type.
func (d Docs) field(owner reflect.Type, f reflect.StructField) string {
	if s := d[owner.Name()].fields[f.Name]; s != "" {
		return s
	}
	return d.Type(f.Type)
}
