package api

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Authentication and authorization metrics, on the Prometheus default
// registry. The per-procedure result codes are counted by the server's
// metrics interceptor (anvil_api_requests_total); these say why.
var (
	authRefused = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_api_auth_refused_total",
		Help: "Management calls refused, by reason: token (missing or invalid credentials) or permission (the principal may not).",
	}, []string{"reason"})
	agentRefused = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_agent_refused_total",
		Help: "Agent calls refused, by protocol (anvil, tinkerbell) and reason: no_token, bad_token, unknown_workflow, wrong_agent, not_its_task, wrong_ip, no_address, unknown_agent, unvouched_line.",
	}, []string{"protocol", "reason"})
	tooLargeTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_api_request_too_large_total",
		Help: "API requests refused because their body exceeded the server's limit (--max-request-mib), by procedure (\"other\" for a path that is none).",
	}, []string{"procedure"})
	agentAttributes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_agent_attributes_total",
		Help: "Agent attributes (a tink-agent's AgentAttributes, Anvil's agent's inventory) sent by agents, by outcome: stored (on the Hardware), unchanged, too_large, error.",
	}, []string{"outcome"})
	auditFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_audit_write_failures_total",
		Help: "Audit records that could not be written (each also logged as an error).",
	})
	peerUnanswered = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_api_peer_unanswered_total",
		Help: "Kubernetes mode: peer replicas that did not answer a merged read (or an unreadable list of them), by procedure; that part was missing from the answer.",
	}, []string{"procedure"})
)
