package workflow

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// foreignWorker counts the times GetAction passed over a workflow because
// the asking agent is no machine of the workflow's namespace.
var foreignWorker = promauto.NewCounter(prometheus.CounterOpts{
	Name: "anvil_workflow_foreign_worker_total",
	Help: "Actions not handed to an agent because no Hardware of the workflow's namespace has its agent ID or MAC (a workflow naming another organisation's machine).",
})
