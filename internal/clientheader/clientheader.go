// Package clientheader adds a request header to every call a connect
// client makes, unary and streaming: the bearer token of the CLI and of
// orchestrators, the agent's per-workflow token.
//
// It owns only the header; it must not decide what the value is or where
// it comes from.
package clientheader

import (
	"context"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
)

// AgentToken returns a client option that sends token (the per-workflow
// agent token the boot script passes as anvil.token=) on every call, in
// the header the server checks. An empty token sends nothing, for servers
// that do not check agents. The agent and `anvil simulate-agent` use it.
func AgentToken(token string) connect.ClientOption {
	return Set(v1.AgentTokenHeader, token)
}

// Set returns a client option that sets header name to value on every
// call. An empty value sets nothing, for servers that want none.
func Set(name, value string) connect.ClientOption {
	return connect.WithInterceptors(setter{name, value})
}

type setter struct{ name, value string }

func (s setter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if s.value != "" {
			req.Header().Set(s.name, s.value)
		}
		return next(ctx, req)
	}
}

func (s setter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if s.value != "" {
			conn.RequestHeader().Set(s.name, s.value)
		}
		return conn
	}
}

func (setter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
