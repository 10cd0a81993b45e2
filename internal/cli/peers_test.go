package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// unansweredServer answers GetLogs, ListUnknownMachines and the audit
// List as a replica of Kubernetes mode does when a peer did not answer.
type unansweredServer struct {
	anvilv1connect.UnimplementedLogServiceHandler
	anvilv1connect.UnimplementedAuditServiceHandler
}

const unansweredPeer = "anvil-7f9c-x2k4p-3a1f (http://10.20.0.12:7080): unavailable: connection refused"

func withUnanswered[T any](msg *T) *connect.Response[T] {
	r := connect.NewResponse(msg)
	r.Header().Add(v1.PeersUnansweredHeader, unansweredPeer)
	return r
}

func (unansweredServer) GetLogs(context.Context, *connect.Request[v1.GetLogsRequest]) (*connect.Response[v1.GetLogsResponse], error) {
	return withUnanswered(&v1.GetLogsResponse{Lines: []*v1.LogLine{{Time: timestamppb.New(time.Now()), Stream: "dhcp", Line: "DISCOVER"}}}), nil
}

func (unansweredServer) ListUnknownMachines(context.Context, *connect.Request[v1.ListUnknownMachinesRequest]) (*connect.Response[v1.ListUnknownMachinesResponse], error) {
	return withUnanswered(&v1.ListUnknownMachinesResponse{}), nil
}

func (unansweredServer) List(context.Context, *connect.Request[v1.ListAuditRequest]) (*connect.Response[v1.ListAuditResponse], error) {
	return withUnanswered(&v1.ListAuditResponse{}), nil
}

// TestUnansweredReplicaWarning: when the replica asked says a peer's
// part is missing, anvil logs and anvil audit say so on stderr, and still
// print what came.
func TestUnansweredReplicaWarning(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(anvilv1connect.NewLogServiceHandler(unansweredServer{}))
	mux.Handle(anvilv1connect.NewAuditServiceHandler(unansweredServer{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	want := "warning: not every replica answered, a part may be missing: " + unansweredPeer + "\n"
	for _, args := range [][]string{{"logs", "--mac", "3c:ec:ef:12:34:99"}, {"logs", "--unknown"}, {"audit"}} {
		out, errOut, err := run(t, srv.URL, args...)
		if err != nil {
			t.Fatalf("anvil %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		if !strings.Contains(errOut, want) {
			t.Errorf("anvil %s: stderr %q; want %q", strings.Join(args, " "), errOut, want)
		}
		if len(args) > 1 && args[1] == "--mac" && !strings.Contains(out, "DISCOVER") {
			t.Errorf("anvil %s: stdout %q; want the line that came", strings.Join(args, " "), out)
		}
	}
}
