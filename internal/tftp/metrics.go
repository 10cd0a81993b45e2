package tftp

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Outcomes of a transfer: the Event.Outcome values and the label values
// of anvil_tftp_transfers_total.
const (
	// OutcomeServed: the client acknowledged the last block.
	OutcomeServed = "served"
	// OutcomeNotFound: no such file (ERROR 1 sent).
	OutcomeNotFound = "not-found"
	// OutcomeRefused: the request was turned down by design, not by a
	// failure: a path outside the served tree, a write request, an
	// unsupported mode, the server busy, or the client declining the
	// option acknowledgement for another reason than learning the size.
	OutcomeRefused = "refused"
	// OutcomeSizeProbe: the client asked for tsize, read it from the
	// option acknowledgement and ended the request. PXE firmware (UEFI's
	// among others) does this before every real transfer: it is normal,
	// and an operator reading a machine's record must not take it for a
	// failure.
	OutcomeSizeProbe = "size-probe"
	// OutcomeError: the transfer failed: the client sent an ERROR, a read
	// or network error, or the server shut down.
	OutcomeError = "error"
	// OutcomeTimeout: the client stopped answering; the transfer was
	// abandoned after the retries.
	OutcomeTimeout = "timeout"
)

// OutcomeSuppressed is the outcome of the Event that summarizes a source's
// refused and not-found requests left unrecorded by the rate limit
// (Config.RefusalBurst). It is not a transfer outcome: those requests are
// counted under their own outcomes.
const OutcomeSuppressed = "suppressed"

var outcomes = []string{OutcomeServed, OutcomeNotFound, OutcomeRefused, OutcomeSizeProbe, OutcomeError, OutcomeTimeout}

// Metrics, on the Prometheus default registry.
var (
	transfersTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_tftp_transfers_total",
		Help: "TFTP requests handled, by outcome (served, not-found, refused, error, timeout).",
	}, []string{"outcome"})
	bytesTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_tftp_bytes_total",
		Help: "TFTP DATA payload bytes sent, retransmissions included.",
	})
	retransmitsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_tftp_retransmits_total",
		Help: "TFTP DATA and OACK packets sent again after a timeout or a client's report of a gap.",
	})
	activeTransfers = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_tftp_active_transfers",
		Help: "TFTP transfers in progress.",
	})
	malformedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_tftp_malformed_packets_total",
		Help: "Packets on the TFTP port that were not a well-formed request; each is logged and dropped.",
	})
	suppressedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_tftp_refusals_suppressed_total",
		Help: "Refused and not-found TFTP requests counted but not recorded one by one (per-source rate limit); each is also in anvil_tftp_transfers_total.",
	})
)

func init() {
	// Every outcome is exported from the start, at 0.
	for _, o := range outcomes {
		transfersTotal.WithLabelValues(o)
	}
}
