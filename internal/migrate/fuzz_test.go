package migrate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/migrate"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// listReader is a store.Reader over parsed objects, listed as a store
// lists them (by namespace, then name).
type listReader map[string][]model.Object

func (r listReader) Get(_ context.Context, kind, ns, name string) (model.Object, error) {
	return nil, store.NotFoundError(kind, ns, name)
}

func (r listReader) List(_ context.Context, kind string, _ store.ListOptions) ([]model.Object, string, error) {
	objs := r[kind]
	sort.Slice(objs, func(i, j int) bool {
		a, b := objs[i].GetObjectMeta(), objs[j].GetObjectMeta()
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	return objs, "1", nil
}

// exportDocs is Export of a store holding docs' objects.
func exportDocs(t *testing.T, docs []model.Document) []byte {
	t.Helper()
	r := listReader{}
	for _, d := range docs {
		k := model.KindOf(d.Object)
		r[k] = append(r[k], d.Object)
	}
	var buf bytes.Buffer
	fixed := func() time.Time { return time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC) }
	if _, err := migrate.Export(t.Context(), r, &buf, migrate.ExportOptions{Source: "fuzz", Now: fixed}); err != nil {
		t.Fatalf("Export of parsed objects: %v", err)
	}
	return buf.Bytes()
}

// objectsJSON is docs' objects as JSON, keyed by kind, namespace and name.
func objectsJSON(t *testing.T, docs []model.Document) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range docs {
		b, err := json.Marshal(d.Object)
		if err != nil {
			t.Fatal(err)
		}
		out[model.KindOf(d.Object)+" "+d.Object.GetObjectMeta().Key()] = string(b)
	}
	return out
}

// FuzzExportRoundTrip: whatever a restore accepts, an export of it reads
// back as the same objects, and exporting those again gives the same
// file — the file form loses nothing a store holds.
func FuzzExportRoundTrip(f *testing.F) {
	site, err := os.ReadFile(siteFile)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(site)                                        // every kind, with statuses
	f.Add([]byte(goodHardware))                        // one object, defaults
	f.Add([]byte(goodHardware + "---\nkind: Gizmo\n")) // refused
	f.Add([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s, annotations: {anvil.dev/created-at: x}}\nsealed: v1:abc\nkeys: [a]\n"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- " + "{apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {a: b}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := migrate.Parse("in.yaml", data)
		if err != nil {
			return
		}
		docs := in.Docs
		file := exportDocs(t, docs)
		out, err := migrate.Parse("export.yaml", file)
		if err != nil {
			t.Fatalf("the export of accepted input does not parse: %v\n%s", err, file)
		}
		again := out.Docs
		want, got := objectsJSON(t, docs), objectsJSON(t, again)
		if len(got) != len(want) {
			t.Fatalf("the export holds %d objects; the input %d", len(got), len(want))
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s after export =\n%s\nwant\n%s", k, got[k], w)
			}
		}
		if second := exportDocs(t, again); !bytes.Equal(second, file) {
			t.Errorf("exporting the export again differs:\n%s\nfirst:\n%s", second, file)
		}
	})
}
