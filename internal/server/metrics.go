package server

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvilproj/anvil/internal/httplimit"
)

// API metrics, on the Prometheus default registry.
var (
	apiRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_api_requests_total",
		Help: "API calls handled, by procedure and result code (\"ok\" or a gRPC code name).",
	}, []string{"procedure", "code"})
	apiDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_api_request_duration_seconds",
		Help:    "Time to handle an API call, by procedure; streams count their whole life.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms .. ~4.4 min
	}, []string{"procedure"})
)

// Boot path limit metrics, on the Prometheus default registry.
var (
	bootLimited = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_http_boot_limited_total",
		Help: "Boot path requests (iPXE scripts and binaries, boot environment files, OS images, metadata) refused by a limit: rate, concurrency, client_rate or client_concurrency.",
	}, []string{"limit"})
	bootCut = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_http_boot_cut_total",
		Help: "Boot path responses cut because the client took nothing for --boot-stall-timeout (stall) or averaged under --boot-min-send-rate after --boot-send-grace (min_rate).",
	}, []string{"reason"})
	bootInFlight = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_http_boot_requests_in_flight",
		Help: "Boot path requests admitted by the limits and being served.",
	})
)

func init() {
	for _, l := range httplimit.Limits { // every series from the start, at 0
		bootLimited.WithLabelValues(string(l))
	}
	for _, r := range httplimit.CutReasons {
		bootCut.WithLabelValues(string(r))
	}
}

// metricsInterceptor counts every handled call, unary and streaming.
type metricsInterceptor struct{}

func observe(procedure string, start time.Time, err error) {
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	apiRequests.WithLabelValues(procedure, code).Inc()
	apiDuration.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
}

func (metricsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		observe(req.Spec().Procedure, start, err)
		return resp, err
	}
}

func (metricsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (metricsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		observe(conn.Spec().Procedure, start, err)
		return err
	}
}
