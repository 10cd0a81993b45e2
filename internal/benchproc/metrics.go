package benchproc

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one reading of a server's /metrics page, by metric family
// name. The benchmarks read the server's own counters and gauges (its
// discovery outcomes, its Go heap, its boot requests in flight) from it
// rather than guessing them from the client side.
type Metrics map[string]*dto.MetricFamily

// ScrapeMetrics reads url (a server's /metrics) with hc and parses the
// Prometheus text format.
func ScrapeMetrics(ctx context.Context, hc *http.Client, url string) (Metrics, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return Metrics(fams), nil
}

// Value is the sum of family name's series (counters, gauges or untyped)
// whose labels include every name/value pair of labels ("result",
// "busy"); ok is false when no series matches.
func (m Metrics) Value(name string, labels ...string) (v float64, ok bool) {
	f := m[name]
	if f == nil || len(labels)%2 != 0 {
		return 0, false
	}
series:
	for _, s := range f.GetMetric() {
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, l := range s.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
					break
				}
			}
			if !found {
				continue series
			}
		}
		switch {
		case s.Counter != nil:
			v += s.GetCounter().GetValue()
		case s.Gauge != nil:
			v += s.GetGauge().GetValue()
		case s.Untyped != nil:
			v += s.GetUntyped().GetValue()
		default:
			continue
		}
		ok = true
	}
	return v, ok
}
