package httpboot

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics, on the Prometheus default registry. The route label is the
// registered pattern (e.g. "/ipxe/script/{mac}/auto.ipxe"), never the
// request path, so that the number of series stays fixed.
var (
	requestsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_http_boot_requests_total",
		Help: "Network boot HTTP requests (iPXE scripts, iPXE binaries, boot environment files), by route pattern and status code.",
	}, []string{"route", "code"})
	bytesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_http_boot_bytes_total",
		Help: "Response body bytes actually sent for network boot HTTP requests, by route pattern.",
	}, []string{"route"})
)

func observe(route string, code int, bytes int64) {
	requestsTotal.WithLabelValues(route, strconv.Itoa(code)).Inc()
	bytesTotal.WithLabelValues(route).Add(float64(bytes))
}
