package agent

import (
	"context"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
)

// WithToken returns a client option that sends token (the per-workflow
// agent token the boot script passed as anvil.token=) on every call, in
// the header the server checks. An empty token sends nothing, for servers
// that do not check agents.
func WithToken(token string) connect.ClientOption {
	return connect.WithInterceptors(tokenInterceptor(token))
}

type tokenInterceptor string

func (t tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if t != "" {
			req.Header().Set(v1.AgentTokenHeader, string(t))
		}
		return next(ctx, req)
	}
}

func (t tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if t != "" {
			conn.RequestHeader().Set(v1.AgentTokenHeader, string(t))
		}
		return conn
	}
}

func (tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
