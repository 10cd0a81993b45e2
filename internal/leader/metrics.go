package leader

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics of the election. A process runs one Elector; were it to run
// several (the tests do), the gauge counts the terms on in the process.
var (
	leaderGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_leader",
		Help: "1 while this replica is the leader (its term is on: the Lease held and renewed within the renew deadline), else 0.",
	})
	leaderTransitions = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_leader_transitions_total",
		Help: "Times this replica became or stopped being the leader.",
	})
)
