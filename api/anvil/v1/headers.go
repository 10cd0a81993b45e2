package anvilv1

// SentAtHeader is the request header in which an agent's StreamLogs call
// carries the agent's clock when it sent the call (RFC 3339). A machine's
// clock is often wrong (no NTP in the boot environment, a drifting RTC), so
// the server moves the call's lines by the difference to its own clock:
// lines keep the order and spacing the agent saw, and interleave correctly
// with what the server recorded itself. (Hand-written; buf does not
// generate this file.)
const SentAtHeader = "Anvil-Sent-At"

// AgentTokenHeader carries an agent's per-workflow token on every agent
// call. The boot script hands the token to the agent as the kernel
// argument anvil.token=; the server recomputes it from the workflow and
// refuses calls whose token does not match the workflow they act on.
const AgentTokenHeader = "Anvil-Agent-Token"

// PeerQueryHeader marks a call one replica of Kubernetes mode makes to
// another for its part of a merged read (GetLogs, ListUnknownMachines,
// AuditService.List): the callee answers from its own data only, so a
// query never goes round. Anyone may send it; it widens nothing (the call
// is authorized as any other), it only narrows the answer.
const PeerQueryHeader = "Anvil-Peer-Query"

// PeersUnansweredHeader is in the answer of a merged read once per peer
// replica that did not answer in time or failed, as "NAME (URL): REASON":
// that replica's part is missing. Its absence means every replica
// answered (or there are none).
const PeersUnansweredHeader = "Anvil-Peers-Unanswered"
