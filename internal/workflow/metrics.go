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

// staleHandout counts the times GetAction found the workflow it was about
// to hand an action of behind the stored version (Engine.confirm).
var staleHandout = promauto.NewCounter(prometheus.CounterOpts{
	Name: "anvil_workflow_stale_handout_total",
	Help: "Actions not handed out because this replica's cache of the workflow was behind the API server (Kubernetes mode); the agent is answered once the cache catches up.",
})
