package benchproc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

const page = `# HELP anvil_discovery_total Discovery calls.
# TYPE anvil_discovery_total counter
anvil_discovery_total{result="busy"} 7
anvil_discovery_total{result="discovered"} 20
# TYPE go_memstats_heap_alloc_bytes gauge
go_memstats_heap_alloc_bytes 1.5e+06
`

func TestScrapeMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	m, err := ScrapeMetrics(context.Background(), nil, srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
		ok     bool
	}{
		{"anvil_discovery_total", []string{"result", "busy"}, 7, true},
		{"anvil_discovery_total", nil, 27, true}, // every series summed
		{"anvil_discovery_total", []string{"result", "full"}, 0, false},
		{"go_memstats_heap_alloc_bytes", nil, 1.5e6, true},
		{"absent_total", nil, 0, false},
		{"anvil_discovery_total", []string{"result"}, 0, false}, // an odd label list
	} {
		if v, ok := m.Value(c.name, c.labels...); v != c.want || ok != c.ok {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", c.name, c.labels, v, ok, c.want, c.ok)
		}
	}
	if _, err := ScrapeMetrics(context.Background(), nil, srv.URL+"/nothing"); err == nil {
		t.Error("a 404 page: no error")
	}
}
