package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

func newSecretsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Show the secrets boot profile templates generated (admins only)",
		Long: `A boot profile's config template that calls {{ secret "NAME" "KIND" }} gets a
value generated on first use and kept (a kubeadm bootstrap token, a certificate
key, a password): every machine of the cluster renders the same one. These
commands show them; only admins may.`,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the generated secrets (names, kinds, creation times; no values)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			resp, err := c.secrets.List(ctx(cmd), connect.NewRequest(&v1.ListSecretsRequest{}))
			if err != nil {
				return c.explain(err)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAMESPACE\tNAME\tKIND\tCREATED")
			for _, s := range resp.Msg.GetSecrets() {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.GetNamespace(), s.GetName(), s.GetKind(),
					s.GetCreated().AsTime().Local().Format("2006-01-02 15:04:05"))
			}
			return w.Flush()
		},
	}
	var namespace string
	get := &cobra.Command{
		Use:     "get NAME",
		Short:   "Print one generated secret's value",
		Example: "  anvil secrets get kubeadm-token -n lab",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			resp, err := c.secrets.Get(ctx(cmd), connect.NewRequest(&v1.GetSecretRequest{Namespace: namespace, Name: args[0]}))
			if err != nil {
				return c.explain(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.TrimRight(resp.Msg.GetValue(), "\n"))
			return nil
		},
	}
	get.Flags().StringVarP(&namespace, "namespace", "n", model.DefaultNamespace, "namespace of the secret")
	cmd.AddCommand(list, get)
	return cmd
}
