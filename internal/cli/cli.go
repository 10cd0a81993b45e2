// Package cli holds anvil's client commands: apply, get, describe, delete,
// workflow watch and cancel, reprovision, job and logs. They talk to a
// running `anvil serve` through the anvil.v1 API (Connect protocol over
// HTTP) and never open the store or any server package's state themselves.
package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

// EnvServer names the environment variable that sets the server address when
// --server is not given.
const EnvServer = "ANVIL_SERVER"

// DefaultServer is the address the client commands use by default.
const DefaultServer = "http://127.0.0.1:7080"

// Commands returns the client commands, for the root command to add. They
// read the root's persistent --server flag.
func Commands() []*cobra.Command {
	return []*cobra.Command{
		newApplyCmd(),
		newGetCmd(),
		newDescribeCmd(),
		newDeleteCmd(),
		newWorkflowCmd(),
		newReprovisionCmd(),
		newJobCmd(),
		newLogsCmd(),
		newSimulateAgentCmd(),
		newAuditCmd(),
	}
}

// ExitError carries a process exit code other than 1 (e.g. `workflow watch`
// ending in FAILED); main uses it.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// clients bundles the API clients for one server.
type clients struct {
	server    string
	hardware  anvilv1connect.HardwareServiceClient
	templates anvilv1connect.TemplateServiceClient
	workflows anvilv1connect.WorkflowServiceClient
	manifests anvilv1connect.ManifestServiceClient
	logs      anvilv1connect.LogServiceClient
	audit     anvilv1connect.AuditServiceClient
	jobs      anvilv1connect.JobServiceClient
}

// serverAddress is --server if given, else $ANVIL_SERVER, else the default.
// A bare host:port gets http:// in front.
func serverAddress(cmd *cobra.Command) string {
	addr := ""
	if f := cmd.Flag("server"); f != nil && f.Changed {
		addr = f.Value.String()
	} else if env := os.Getenv(EnvServer); env != "" {
		addr = env
	} else if f != nil {
		addr = f.Value.String()
	}
	if addr == "" {
		addr = DefaultServer
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/")
}

func newClients(cmd *cobra.Command) *clients {
	addr := serverAddress(cmd)
	hc := &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		ResponseHeaderTimeout: 0, // watches stream for as long as they run
	}}
	opts := []connect.ClientOption{connect.WithInterceptors(newBearer(cmd))}
	return &clients{
		server:    addr,
		hardware:  anvilv1connect.NewHardwareServiceClient(hc, addr, opts...),
		templates: anvilv1connect.NewTemplateServiceClient(hc, addr, opts...),
		workflows: anvilv1connect.NewWorkflowServiceClient(hc, addr, opts...),
		manifests: anvilv1connect.NewManifestServiceClient(hc, addr, opts...),
		logs:      anvilv1connect.NewLogServiceClient(hc, addr, opts...),
		audit:     anvilv1connect.NewAuditServiceClient(hc, addr, opts...),
		jobs:      anvilv1connect.NewJobServiceClient(hc, addr, opts...),
	}
}

// explain turns an API error into the one line a user needs: an unreachable
// server says so and how to fix it; anything else is the server's message.
func (c *clients) explain(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		if ce.Code() == connect.CodeUnavailable || ce.Code() == connect.CodeUnknown && isNetError(err) {
			return fmt.Errorf("cannot reach the Anvil server at %s (%s): is `anvil serve` running? Set --server or %s to its address",
				c.server, rootCause(err), EnvServer)
		}
		if ce.Code() == connect.CodeUnauthenticated {
			return fmt.Errorf("%s (the server wants a token: --token, --token-file, $%s or $%s; a local server writes an admin token to DATA_DIR/auth/admin.token, and `anvil token create` makes others)",
				ce.Message(), EnvToken, EnvTokenFile)
		}
		return errors.New(ce.Message())
	}
	if isNetError(err) {
		return fmt.Errorf("cannot reach the Anvil server at %s (%s): is `anvil serve` running? Set --server or %s to its address",
			c.server, rootCause(err), EnvServer)
	}
	return err
}

func isNetError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ne)
}

// rootCause is the innermost error's text: "connection refused", not a chain.
func rootCause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

// ctx returns the command's context, which main cancels on SIGINT.
func ctx(cmd *cobra.Command) context.Context {
	if c := cmd.Context(); c != nil {
		return c
	}
	return context.Background()
}
