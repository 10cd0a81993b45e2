package clientheader

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// headerSeen answers every agent call and records the header it got
// (X-Test unless name says otherwise).
type headerSeen struct {
	anvilv1connect.UnimplementedAgentServiceHandler
	name string
	got  chan string
}

func (h headerSeen) header() string {
	if h.name != "" {
		return h.name
	}
	return "X-Test"
}

func (h headerSeen) ReportActionStatus(_ context.Context, req *connect.Request[v1.ReportActionStatusRequest]) (*connect.Response[v1.ReportActionStatusResponse], error) {
	h.got <- req.Header().Get(h.header())
	return connect.NewResponse(&v1.ReportActionStatusResponse{}), nil
}

func (h headerSeen) StreamLogs(_ context.Context, s *connect.ClientStream[v1.LogLine]) (*connect.Response[v1.StreamLogsResponse], error) {
	h.got <- s.RequestHeader().Get(h.header())
	for s.Receive() {
	}
	return connect.NewResponse(&v1.StreamLogsResponse{}), nil
}

func TestSet(t *testing.T) {
	h := headerSeen{got: make(chan string, 4)}
	mux := http.NewServeMux()
	mux.Handle(anvilv1connect.NewAgentServiceHandler(h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()
	for _, value := range []string{"v1.token", ""} {
		c := anvilv1connect.NewAgentServiceClient(srv.Client(), srv.URL, Set("X-Test", value))
		if _, err := c.ReportActionStatus(ctx, connect.NewRequest(&v1.ReportActionStatusRequest{})); err != nil {
			t.Fatal(err)
		}
		if got := <-h.got; got != value {
			t.Errorf("unary call carried %q; want %q", got, value)
		}
		stream := c.StreamLogs(ctx)
		_ = stream.Send(&v1.LogLine{})
		if _, err := stream.CloseAndReceive(); err != nil {
			t.Fatal(err)
		}
		if got := <-h.got; got != value {
			t.Errorf("streaming call carried %q; want %q", got, value)
		}
	}
}

// TestAgentToken: the agent's token goes in the header the server reads
// it from.
func TestAgentToken(t *testing.T) {
	h := headerSeen{name: v1.AgentTokenHeader, got: make(chan string, 1)}
	mux := http.NewServeMux()
	mux.Handle(anvilv1connect.NewAgentServiceHandler(h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := anvilv1connect.NewAgentServiceClient(srv.Client(), srv.URL, AgentToken("v1.wf-token"))
	if _, err := c.ReportActionStatus(context.Background(), connect.NewRequest(&v1.ReportActionStatusRequest{})); err != nil {
		t.Fatal(err)
	}
	if got := <-h.got; got != "v1.wf-token" {
		t.Errorf("%s carried %q; want v1.wf-token", v1.AgentTokenHeader, got)
	}
}
