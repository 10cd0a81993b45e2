package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
)

func newAuditCmd() *cobra.Command {
	var (
		namespace, subject string
		since              time.Duration
		limit              int32
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the audit log: every mutating management call and refused agent call, who made it and how it ended",
		Long: `audit lists the server's audit log, oldest first: one line per mutating call
(create, update, delete, apply, reprovision, provision, cancel), refused calls
included, and one per refused agent call (subject agent:ID). Admins see every
organisation's records; anyone else those of its own organisation.`,
		Example: `  anvil audit
  anvil audit --since 1h --subject alice
  anvil audit -n acme --limit 50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClients(cmd)
			if err != nil {
				return err
			}
			req := &v1.ListAuditRequest{Namespace: namespace, Subject: subject, Limit: limit}
			if since > 0 {
				req.Since = timestamppb.New(time.Now().Add(-since))
			}
			resp, err := c.audit.List(ctx(cmd), connect.NewRequest(req))
			if err != nil {
				return c.explain(err)
			}
			warnUnanswered(cmd.ErrOrStderr(), resp.Header())
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TIME\tSUBJECT\tORG\tCALL\tNAMESPACE\tOBJECT\tOUTCOME\tFROM")
			for _, r := range resp.Msg.GetRecords() {
				subj := r.GetSubject()
				if subj == "" {
					subj = "(no credentials)"
				}
				outcome := r.GetOutcome()
				if r.GetMessage() != "" {
					outcome += ": " + r.GetMessage()
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
					r.GetTime().AsTime().Local().Format("2006-01-02 15:04:05"), subj, dash(r.GetOrg()),
					shortProcedure(r.GetProcedure()), dash(r.GetNamespace()), dash(r.GetObject()), outcome, r.GetClientIp())
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVarP(&namespace, "namespace", "n", "", "only records naming this namespace or made by its organisation")
	f.StringVar(&subject, "subject", "", "only this caller's records")
	f.DurationVar(&since, "since", 0, "only records of the last DURATION (e.g. 1h)")
	f.Int32Var(&limit, "limit", 0, "at most this many, the newest (default 1000)")
	return cmd
}

// shortProcedure turns "/anvil.v1.HardwareService/Create" into
// "HardwareService/Create".
func shortProcedure(p string) string {
	const prefix = "/anvil.v1."
	if len(p) > len(prefix) && p[:len(prefix)] == prefix {
		return p[len(prefix):]
	}
	return p
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
