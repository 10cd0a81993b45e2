package main

import (
	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/server"
	"github.com/anvilproj/anvil/internal/tlsconf"
)

func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "The API's TLS: export the generated CA",
		Args:  cobra.NoArgs,
	}
	var dataDir string
	ca := &cobra.Command{
		Use:   "ca",
		Short: "Print the CA `anvil serve` generated (PEM), for clients to trust",
		Long: `ca prints the certificate of the CA that ` + "`anvil serve`" + ` generated in
DATA_DIR/tls on its first start with TLS on (and no --tls-cert), for clients
to trust:

  anvil tls ca > anvil-ca.pem
  anvil --server https://10.0.0.1:7443 --cacert anvil-ca.pem get hardware
  curl --cacert anvil-ca.pem https://10.0.0.1:7443/healthz
  grpcurl -cacert anvil-ca.pem 10.0.0.1:42113 list

Compare its fingerprint with the ca_sha256 the server logged at start:

  openssl x509 -noout -fingerprint -sha256 -in anvil-ca.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pem, err := tlsconf.ReadCA(server.TLSDir(dataDir))
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(pem)
			return err
		},
	}
	ca.Flags().StringVar(&dataDir, "data-dir", "/var/lib/anvil", "the server's data directory")
	cmd.AddCommand(ca)
	return cmd
}
