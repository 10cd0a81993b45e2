// Package cli holds anvil's client commands: apply, get, describe, delete,
// workflow watch and cancel, reprovision, netboot, job, logs, import, and power and
// bootdev (which run BMC Jobs). They talk to a
// running `anvil serve` through the anvil.v1 API (Connect protocol over
// HTTP) and never open the store or any server package's state themselves.
package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/clientheader"
	"github.com/anvilproj/anvil/internal/cmdbase"
)

// EnvServer names the environment variable that sets the server address when
// --server is not given (cmdbase decides it for every binary).
const EnvServer = cmdbase.EnvServer

// EnvCACert names the environment variable that sets --cacert when the flag
// is not given.
const EnvCACert = "ANVIL_CACERT"

// EnvVars are the environment variables the client commands read, which
// no setting of `anvil serve` may take as its own ANVIL_* name.
var EnvVars = []string{EnvServer, EnvToken, EnvTokenFile, EnvCACert}

// Names of the root command's persistent flags for TLS, which the client
// commands read (main defines them, next to --server).
const (
	// FlagCACert names a PEM file of the CA to trust instead of the
	// system's, e.g. what `anvil tls ca` prints.
	FlagCACert = "cacert"
	// FlagInsecureSkipVerify turns off verifying the server's
	// certificate.
	FlagInsecureSkipVerify = "insecure-skip-verify"
)

// DefaultServer is the address the client commands use by default.
const DefaultServer = cmdbase.DefaultServer

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
		newNetbootCmd(),
		newEnrollCmd(),
		newJobCmd(),
		newLogsCmd(),
		newSimulateAgentCmd(),
		newAuditCmd(),
		newSecretsCmd(),
		newImportCmd(),
		newPowerCmd(),
		newBootdevCmd(),
	}
}

// ExitError carries a process exit code other than 1 (e.g. `workflow watch`
// ending in FAILED); cmdbase.Run turns it into the exit code.
type ExitError = cmdbase.ExitError

// clients bundles the API clients for one server.
type clients struct {
	server    string
	http      *http.Client           // with the TLS settings, for other services' clients
	opts      []connect.ClientOption // the token, for other services' clients
	hardware  anvilv1connect.HardwareServiceClient
	templates anvilv1connect.TemplateServiceClient
	workflows anvilv1connect.WorkflowServiceClient
	profiles  anvilv1connect.BootProfileServiceClient
	manifests anvilv1connect.ManifestServiceClient
	logs      anvilv1connect.LogServiceClient
	audit     anvilv1connect.AuditServiceClient
	secrets   anvilv1connect.SecretServiceClient
	jobs      anvilv1connect.JobServiceClient
	machines  anvilv1connect.MachineServiceClient
	bmcJobs   anvilv1connect.BmcJobServiceClient
	bmcTasks  anvilv1connect.BmcTaskServiceClient
	creds     anvilv1connect.CredentialSecretServiceClient
	ruleSets  anvilv1connect.WorkflowRuleSetServiceClient
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

// clientTLS is the TLS configuration for an https:// server: the CA of
// --cacert (else $ANVIL_CACERT, else the system's) and
// --insecure-skip-verify.
func clientTLS(cmd *cobra.Command) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	caFile := os.Getenv(EnvCACert)
	if f := cmd.Flag(FlagCACert); f != nil && f.Changed {
		caFile = f.Value.String()
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", FlagCACert, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--%s %s: no PEM certificate in it", FlagCACert, caFile)
		}
	}
	if f := cmd.Flag(FlagInsecureSkipVerify); f != nil && f.Value.String() == "true" {
		conf.InsecureSkipVerify = true //nolint:gosec // the operator asked for it, for a lab
	}
	return conf, nil
}

func newClients(cmd *cobra.Command) (*clients, error) {
	addr := serverAddress(cmd)
	tlsConf, err := clientTLS(cmd)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   10 * time.Second,
		ForceAttemptHTTP2:     true, // what the HTTPS port prefers
		ResponseHeaderTimeout: 0,    // watches stream for as long as they run
	}}
	token, err := bearerToken(cmd)
	if err != nil {
		return nil, err
	}
	var opts []connect.ClientOption
	if token != "" {
		opts = append(opts, clientheader.Set("Authorization", "Bearer "+token))
	}
	return &clients{
		server:    addr,
		http:      hc,
		opts:      opts,
		hardware:  anvilv1connect.NewHardwareServiceClient(hc, addr, opts...),
		templates: anvilv1connect.NewTemplateServiceClient(hc, addr, opts...),
		workflows: anvilv1connect.NewWorkflowServiceClient(hc, addr, opts...),
		profiles:  anvilv1connect.NewBootProfileServiceClient(hc, addr, opts...),
		manifests: anvilv1connect.NewManifestServiceClient(hc, addr, opts...),
		logs:      anvilv1connect.NewLogServiceClient(hc, addr, opts...),
		audit:     anvilv1connect.NewAuditServiceClient(hc, addr, opts...),
		secrets:   anvilv1connect.NewSecretServiceClient(hc, addr, opts...),
		jobs:      anvilv1connect.NewJobServiceClient(hc, addr, opts...),
		machines:  anvilv1connect.NewMachineServiceClient(hc, addr, opts...),
		bmcJobs:   anvilv1connect.NewBmcJobServiceClient(hc, addr, opts...),
		bmcTasks:  anvilv1connect.NewBmcTaskServiceClient(hc, addr, opts...),
		creds:     anvilv1connect.NewCredentialSecretServiceClient(hc, addr, opts...),
		ruleSets:  anvilv1connect.NewWorkflowRuleSetServiceClient(hc, addr, opts...),
	}, nil
}

// explain turns an API error into the one line a user needs: an unreachable
// server says so and how to fix it; anything else is the server's message.
func (c *clients) explain(err error) error {
	if err == nil {
		return nil
	}
	if tlsErr := c.explainTLS(err); tlsErr != nil {
		return tlsErr
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

// explainTLS says what to do about a TLS failure, or returns nil when err
// is not one.
func (c *clients) explainTLS(err error) error {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
	)
	var ce *connect.Error
	plain := strings.HasPrefix(c.server, "http://")
	switch {
	case plain && errors.As(err, &ce) && ce.Message() == "400 Bad Request",
		// The server answers 400 and closes at once; a request with a
		// body may still be writing it, and then the client sees only
		// the reset. A request without one reads the answer.
		plain && errors.Is(err, syscall.ECONNRESET) && answersPlainHTTPWith400(c.server):
		// What Go's server answers plain HTTP on a TLS port with.
		return fmt.Errorf("the Anvil server at %s answered 400 Bad Request: is it the HTTPS port? Use https:// for the HTTPS port (7443), http:// for the HTTP port (7080)",
			c.server)
	case errors.As(err, &unknown):
		return fmt.Errorf("the Anvil server at %s presented a certificate from a CA this client does not trust (%s): pass --%s FILE or set %s, with FILE from `anvil tls ca` on the server",
			c.server, rootCause(err), FlagCACert, EnvCACert)
	case errors.As(err, &hostname):
		return fmt.Errorf("the Anvil server's certificate does not cover %s (%s): use an address it covers, or add this one to the server's --tls-san",
			c.server, rootCause(err))
	case errors.As(err, &invalid):
		return fmt.Errorf("the Anvil server at %s presented a certificate that is not valid (%s)", c.server, rootCause(err))
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("the Anvil server at %s does not speak TLS there (%s): use http:// for the HTTP port (7080), https:// for the HTTPS port (7443)",
			c.server, rootCause(err))
	}
	return nil
}

// answersPlainHTTPWith400 reports whether server answers a plain GET
// with Go's "HTTP request to an HTTPS server" 400: it is a TLS port.
func answersPlainHTTPWith400(server string) bool {
	hc := &http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Get(strings.TrimRight(server, "/") + "/")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode == http.StatusBadRequest && strings.Contains(string(body), "HTTP request to an HTTPS server")
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
