package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// TestClientGRPCOverTLS: the arguments Hook reads from Anvil's boot script
// when the gRPC port speaks TLS with a generated CA (tinkerbell_tls=true
// tinkerbell_insecure_tls=true) give a client that reaches the server over
// gRPC on HTTP/2 with TLS; without tinkerbell_insecure_tls the unknown CA
// is refused. (Anvil's own agent calls anvil.server= first.)
func TestClientGRPCOverTLS(t *testing.T) {
	_, h := anvilv1connect.NewAgentServiceHandler(anvilv1connect.UnimplementedAgentServiceHandler{})
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	authority := strings.TrimPrefix(srv.URL, "https://")

	tests := []struct {
		name    string
		cmdline string
		want    func(error) bool
	}{
		{name: "insecure", cmdline: "grpc_authority=" + authority + " worker_id=w1 tinkerbell_tls=true tinkerbell_insecure_tls=true",
			want: func(err error) bool { return connect.CodeOf(err) == connect.CodeUnimplemented }},
		{name: "verified", cmdline: "grpc_authority=" + authority + " worker_id=w1 tinkerbell_tls=true tinkerbell_insecure_tls=false",
			want: func(err error) bool { var u x509.UnknownAuthorityError; return errors.As(err, &u) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseCmdline(tc.cmdline)
			if err != nil {
				t.Fatal(err)
			}
			_, err = bootServers(p)[0].Client.GetAction(context.Background(), connect.NewRequest(&v1.GetActionRequest{}))
			if !tc.want(err) {
				t.Errorf("GetAction = %v", err)
			}
		})
	}
}
