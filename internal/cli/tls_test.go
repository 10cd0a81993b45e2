package cli

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/server"
	"github.com/anvilproj/anvil/internal/tlsconf"
)

// startTLSServer runs `anvil serve` with TLS on free loopback ports and
// returns its HTTP and HTTPS addresses and the CA file `anvil tls ca`
// would print.
func startTLSServer(t *testing.T) (httpBase, httpsBase, caFile string) {
	t.Helper()
	lns := server.Listeners{HTTP: listenLocal(t), HTTPS: listenLocal(t), GRPC: listenLocal(t)}
	dataDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{DataDir: dataDir, Bind: "127.0.0.1", InsecureNoAuth: true, Listeners: lns,
			TLS: true, DisableDHCP: true, DisableTFTP: true, DisableSyslog: true, DisableMetadata: true})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	httpBase = "http://" + lns.HTTP.Addr().String()
	httpsBase = "https://" + lns.HTTPS.Addr().String()
	for i := 0; ; i++ {
		resp, err := http.Get(httpBase + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if i > 500 {
			t.Fatalf("server never became ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pem, err := tlsconf.ReadCA(server.TLSDir(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "anvil-ca.pem")
	if err := os.WriteFile(caFile, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return httpBase, httpsBase, caFile
}

// runWithTLSFlags is run with the root's TLS flags defined as main does.
func runWithTLSFlags(args ...string) (string, error) {
	root := &cobra.Command{Use: "anvil", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().String("server", DefaultServer, "")
	root.PersistentFlags().String(FlagCACert, "", "")
	root.PersistentFlags().Bool(FlagInsecureSkipVerify, false, "")
	root.AddCommand(Commands()...)
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return stdout.String(), err
}

func TestTLSClient(t *testing.T) {
	httpBase, httpsBase, caFile := startTLSServer(t)
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     string // ANVIL_CACERT
		args    []string
		wantErr string // "" for success
	}{
		{name: "--cacert", args: []string{"--server", httpsBase, "--cacert", caFile}},
		{name: "ANVIL_CACERT", env: caFile, args: []string{"--server", httpsBase}},
		{name: "--cacert wins over the environment", env: garbage, args: []string{"--server", httpsBase, "--cacert", caFile}},
		{name: "--insecure-skip-verify", args: []string{"--server", httpsBase, "--insecure-skip-verify"}},
		{name: "plain HTTP port", args: []string{"--server", httpBase}},
		{name: "CA not trusted", args: []string{"--server", httpsBase}, wantErr: "pass --cacert FILE or set ANVIL_CACERT"},
		{name: "https to the HTTP port", args: []string{"--server", strings.Replace(httpBase, "http:", "https:", 1), "--cacert", caFile},
			wantErr: "does not speak TLS there"},
		{name: "http to the HTTPS port", args: []string{"--server", strings.Replace(httpsBase, "https:", "http:", 1)},
			wantErr: "is it the HTTPS port?"},
		{name: "CA file missing", args: []string{"--server", httpsBase, "--cacert", "/nonexistent/ca.pem"}, wantErr: "--cacert: open"},
		{name: "CA file not PEM", args: []string{"--server", httpsBase, "--cacert", garbage}, wantErr: "no PEM certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvCACert, tc.env)
			out, err := runWithTLSFlags(append(tc.args, "get", "hardware")...)
			if tc.wantErr == "" {
				if err != nil || !strings.Contains(out, "No hardware found") {
					t.Errorf("get hardware = %q, %v; want an empty list", out, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Errorf("get hardware: err = %v; want one line containing %q", err, tc.wantErr)
			}
		})
	}
}
