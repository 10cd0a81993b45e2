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
