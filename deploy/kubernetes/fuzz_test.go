package kubernetes

import (
	"strings"
	"testing"
)

// FuzzParse: any YAML stream is read or refused with an error, never a
// panic; an object read has what Path needs, and its path is under the
// API's roots.
func FuzzParse(f *testing.F) {
	files, err := Files()
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files { // the real manifests
		b, err := manifests.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: x, namespace: y}\n")) // cluster-scoped with a namespace
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"))                     // a kind without a known path
	f.Add([]byte("---\n---\n"))                                                           // empty documents
	f.Add([]byte("kind: [\n"))                                                            // not YAML
	f.Fuzz(func(t *testing.T, b []byte) {
		objs, err := parse("fuzz.yaml", b)
		if err != nil {
			return
		}
		for _, o := range objs {
			p := o.Path()
			if o.Kind == "" || o.Name == "" || len(o.JSON) == 0 ||
				!(strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/apis/")) || !strings.HasSuffix(p, "/"+o.Name) {
				t.Fatalf("parse read %+v with path %q", o, p)
			}
		}
	})
}
