package agent

import (
	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/clientheader"
)

// WithToken returns a client option that sends token (the per-workflow
// agent token the boot script passed as anvil.token=) on every call, in
// the header the server checks. An empty token sends nothing, for servers
// that do not check agents.
func WithToken(token string) connect.ClientOption {
	return clientheader.Set(v1.AgentTokenHeader, token)
}
