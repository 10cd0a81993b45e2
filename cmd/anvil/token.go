package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvilproj/anvil/internal/auth"
)

// defaultTokenTTL is the lifetime of a token from `anvil token create`.
const defaultTokenTTL = 24 * time.Hour

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage API tokens of the local issuer",
	}
	cmd.AddCommand(newTokenCreateCmd(), newTokenRevokeCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var (
		dataDir, subject, org string
		roles                 []string
		ttl                   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --subject NAME --role ROLE [--role ...] [--org ORG] [--ttl 24h]",
		Short: "Mint a token signed by the server's local issuer and print it",
		Long: `create mints an API token signed with the local issuer's key, the one a server
with no identity provider trusts (DATA_DIR/auth/signing-key.pem, created if
missing), and prints it on standard output. It needs read access to the key,
so run it on the server's machine as the server's user.

  TOKEN=$(anvil token create --subject alice --org acme --role operator)
  curl -H "Authorization: Bearer $TOKEN" ...

Roles are viewer, operator and admin; a token without admin needs --org.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			li, err := auth.EnsureLocalIssuer(auth.LocalIssuerDir(dataDir))
			if err != nil {
				return err
			}
			tok, err := li.Mint(subject, org, roles, ttl)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "/var/lib/anvil", "the server's data directory (its --data-dir)")
	f.StringVar(&subject, "subject", "", "who the token is for: its sub claim (required)")
	f.StringVar(&org, "org", "", "the organisation (namespace) the token is bound to; required unless --role admin")
	f.StringArrayVar(&roles, "role", nil, "role: viewer, operator or admin (required; repeat for several)")
	f.DurationVar(&ttl, "ttl", defaultTokenTTL, "how long the token is valid")
	_ = cmd.MarkFlagRequired("subject")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var dataDir, reason string
	cmd := &cobra.Command{
		Use:   "revoke [--reason TEXT] TOKEN-FILE|-",
		Short: "Revoke a token: the server refuses it from now on",
		Long: `revoke adds the token in TOKEN-FILE (- for standard input) to the server's
revocation list, DATA_DIR/auth/revoked-tokens.json: a running server refuses
it within a second, and every later start too, until it would have expired.
The token is named by its jti; a token without one cannot be revoked alone
(retire its signing key instead). Run it on the server's machine as the
server's user.

  anvil token revoke --reason "pasted in a ticket" leaked.token`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw []byte
			var err error
			if args[0] == "-" {
				raw, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
			} else {
				raw, err = os.ReadFile(args[0])
			}
			if err != nil {
				return fmt.Errorf("read token: %w", err)
			}
			r, err := auth.RevocationOf(strings.TrimSpace(string(raw)))
			if err != nil {
				return fmt.Errorf("revoke: %w", err)
			}
			r.Reason = reason
			if err := auth.Revoke(auth.RevocationFile(dataDir), r, time.Now()); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "revoked token %s of %q (it would have expired %s)\n",
				r.ID, r.Subject, r.Expires.UTC().Format(time.RFC3339))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "/var/lib/anvil", "the server's data directory (its --data-dir)")
	f.StringVar(&reason, "reason", "", "why, kept in the list")
	return cmd
}
