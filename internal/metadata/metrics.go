package metadata

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics, on the Prometheus default registry. The route label is a fixed
// pattern ("/metadata", "/{version}/meta-data/hostname",
// "/{version}/meta-data/public-keys/{n}/openssh-key", "/{version}/other"
// for items that do not exist), never the request path, so that the number
// of series stays fixed.
var requestsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_metadata_requests_total",
	Help: "Metadata requests, by route pattern and outcome (served, unknown-ip, ambiguous-ip, not-found, bad-request, error).",
}, []string{"route", "outcome"})

func observe(route, outcome string) {
	requestsTotal.WithLabelValues(route, outcome).Inc()
}
